"""SGLang's native admin endpoints: health, flush_cache, server_info (REFERENCE.md §3), /metrics."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from harness.engines.http import AdminSession
from harness.engines.sglang.prom import Totals, histogram_totals


class Admin(AdminSession):
    """A small aiohttp session against one server's base URL (http://host:port, no /v1)."""

    async def healthy(self, timeout: float = 10.0) -> bool:
        """True when /health_generate answers 200 (a real 1-token generation in every version)."""
        try:
            status, _ = await self._get("/health_generate", timeout)
            return status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def flush_cache(self, timeout: float = 30.0) -> bool:
        """POST /flush_cache; resets the cumulative spec counters. False when the server was busy."""
        try:
            async with self._session.post(self.base_url + "/flush_cache",
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                await resp.read()
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def server_info(self, timeout: float = 30.0) -> dict[str, Any] | None:
        """/server_info (0.5.8+) with a fallback to /get_server_info (all versions)."""
        for path in ("/get_server_info", "/server_info"):
            try:
                status, body = await self._get(path, timeout)
            except (TimeoutError, aiohttp.ClientError, OSError):
                return None
            if status == 200:
                try:
                    data = orjson.loads(body)
                except orjson.JSONDecodeError:
                    return None
                return data if isinstance(data, dict) else None
        return None

    async def histograms(self, timeout: float = 10.0) -> Totals | None:
        """SGLang's latency histograms from /metrics (harness.engines.sglang.prom); None without
        --enable-metrics."""
        try:
            status, body = await self._get("/metrics", timeout)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        return histogram_totals(body.decode("utf-8", "replace")) if status == 200 else None

    async def authorized(self, timeout: float = 10.0) -> bool:
        """False when /v1/models answers 401: SGLang's --api-key guards every route but /health* and
        /metrics, so the key is checked where requests go. Network faults are not an auth answer: True."""
        try:
            status, _ = await self._get("/v1/models", timeout)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return True
        return status != 401

    async def model_id(self, timeout: float = 10.0) -> str | None:
        try:
            status, body = await self._get("/v1/models", timeout)
            if status == 200:
                data = orjson.loads(body).get("data") or []
                return data[0]["id"] if data else None
        except (TimeoutError, aiohttp.ClientError, OSError, orjson.JSONDecodeError, KeyError):
            return None
        return None


def avg_spec_accept_length(info: dict[str, Any] | None) -> float | None:
    """Mean of internal_states[*].avg_spec_accept_length (absent before a decode log window closes)."""
    if not info:
        return None
    states = info.get("internal_states") or []
    vals = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
    vals = [float(v) for v in vals if isinstance(v, int | float)]
    return sum(vals) / len(vals) if vals else None
