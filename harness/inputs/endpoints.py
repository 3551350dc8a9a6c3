"""Existing servers (a variant's `endpoint:`) and API keys read from the environment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from harness.common.errors import InputError


def parse_endpoint(value: str) -> tuple[str, int]:
    """(host, port) of `http://host:port`; ValueError naming what is wrong. No path, no https: the server
    is reached directly or through the SSH target's port forward, as a started one is."""
    parts = urlsplit(value.strip())
    if parts.scheme != "http":
        raise ValueError(f"expected http://host:port, got {value!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"expected http://host:port with nothing after the port, got {value!r}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError(f"expected http://host:port with a port number, got {value!r}")
    return parts.hostname, port


class MissingApiKey(InputError):
    """The plan names an API key variable this environment does not set: bad input (exit 2)."""


class _Keyed(Protocol):  # harness.inputs.plan_parts.Server, and a Variant
    @property
    def api_key_env(self) -> str | None: ...


class _KeyedVariant(_Keyed, Protocol):  # harness.inputs.config.Variant (config.py imports this module)
    @property
    def name(self) -> str: ...


class _KeyedPlan(Protocol):  # harness.inputs.config.Plan
    @property
    def server(self) -> _Keyed: ...
    @property
    def source_path(self) -> Path | None: ...


def api_key_name(plan: _KeyedPlan, variant: _KeyedVariant) -> str | None:
    """The environment variable naming `variant`'s API key: its own, else the plan's `server.api_key_env`."""
    return variant.api_key_env or plan.server.api_key_env


def api_key(plan: _KeyedPlan, variant: _KeyedVariant) -> str | None:
    """The key itself, from this process's environment; None when the plan names none. A named variable
    that is unset or empty is an error before anything starts (a server without its key answers 401)."""
    name = api_key_name(plan, variant)
    if name is None:
        return None
    value = os.environ.get(name, "")
    if not value:
        own = bool(variant.api_key_env)
        field = f"variants.{variant.name}.api_key_env" if own else "server.api_key_env"
        raise MissingApiKey(str(plan.source_path or "") or None, None, field,
                            f"variant '{variant.name}': the API key variable {name} is not set "
                            "in this environment")
    return value
