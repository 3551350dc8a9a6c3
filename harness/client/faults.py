"""How network and server faults are written into a result: short, stable texts ("connection reset",
"timeout", "http 500: <body head>") whatever layer raised them (the openai SDK, httpx2, aiohttp, the OS)."""

from __future__ import annotations

import aiohttp
import httpx2
import openai

__all__ = ["BODY_HEAD", "FAULTS", "MALFORMED", "describe_fault", "http_error"]

BODY_HEAD = 300  # characters of an HTTP error body kept in StreamResult.error


def describe_fault(exc: BaseException) -> str:
    """A short, stable description of a network or server fault, from the root cause outwards (the
    SDK and its transport wrap aiohttp errors in types that do not say what happened)."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in reversed(chain):
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, aiohttp.ClientConnectorError) and isinstance(e.os_error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError,
                          BrokenPipeError, ConnectionAbortedError)):
            return "connection reset"
        if isinstance(e, (TimeoutError, aiohttp.ServerTimeoutError)):
            return "timeout"
    for e in reversed(chain):
        if isinstance(e, (aiohttp.ClientConnectorError, OSError)):
            return f"connection error: {e}"
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return "timeout"
    root = chain[-1]
    return f"connection error: {type(root).__name__}: {root}".rstrip(": ")


def http_error(exc: openai.APIStatusError) -> str:
    try:
        body = exc.response.text
    except (httpx2.ResponseNotRead, UnicodeDecodeError):
        body = str(exc.body or exc.message)
    return f"http {exc.status_code}: {' '.join(body.split())[:BODY_HEAD]}"


FAULTS = (openai.APIConnectionError, httpx2.HTTPError, aiohttp.ClientError, OSError, TimeoutError)
# Raised by event handling on valid HTTP but bad events (invalid JSON, unexpected shapes).
MALFORMED = (ValueError, TypeError, AttributeError, KeyError, IndexError)
