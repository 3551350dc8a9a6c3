"""What the App's halves share. The App owns the state: its reactive attributes, which the section screens
watch, and the few plain ones its halves share (the plan, the fleet, the run going). A half (servers, run,
results, retrain, tune, session) is a plain object holding the App: it handles the messages the App routes
to it (`handles`), changes the App's state, and starts its workers on the App (`work`), so every worker
keeps its group, its exclusivity and the App's one error handler."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial, wraps
from typing import Any

from textual.app import App
from textual.message import Message
from textual.worker import Worker

ROUTE = "_handles"  # the attribute `handles` marks a half's handler with: the message types it takes


class AppMessage(Message):
    """A message for the App, which routes it to its halves' handlers (harness.tui.app.DraftbenchApp). Every
    message of harness.tui.messages is one."""


class Half:
    def __init__(self, app: App[int]) -> None:
        self.app: Any = app  # harness.tui.app.DraftbenchApp, which imports this module: not imported back

    def handlers(self) -> list[tuple[type[Message], Callable[[Any], Any]]]:
        """(message type, bound handler) of every method marked with `handles`, in the order they are
        written."""
        out = []
        for name, fn in vars(type(self)).items():
            for message in getattr(fn, ROUTE, ()):
                out.append((message, getattr(self, name)))
        return out


def handles(*messages: type[Message]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a half's method as the handler of these messages (textual's @on, for a half). A handler changes
    the App's state and returns; what takes time goes to a worker (`work`)."""
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"{fn.__qualname__}: a half's handler is not async; start a worker from it")
        setattr(fn, ROUTE, (*getattr(fn, ROUTE, ()), *messages))
        return fn
    return mark


def work(*, group: str, thread: bool = False, exclusive: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """textual's @work(group=..., exit_on_error=False) for a half's method: the worker runs on the App."""
    def decorator(method: Callable[..., Any]) -> Callable[..., Worker[Any]]:
        @wraps(method)
        def start(half: Half, *args: object, **kwargs: object) -> Worker[Any]:
            return half.app.run_worker(partial(method, half, *args, **kwargs), name=method.__name__,
                                       group=group, description=method.__name__, exclusive=exclusive,
                                       exit_on_error=False, thread=thread)
        return start
    return decorator
