"""vLLM's own endpoints on one server: /health, /v1/models, /version, /metrics, and the dev-mode ones
(/server_info, /reset_prefix_cache: only with VLLM_SERVER_DEV_MODE=1; a 404 otherwise)."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from harness.engines.http import AdminSession
from harness.engines.vllm.metrics import Scrape, parse_metrics

_ERRORS = (TimeoutError, aiohttp.ClientError, OSError)


class Admin(AdminSession):
    """vLLM's endpoints on one server; what it lacks (flush outside dev mode) answers False/None."""

    async def _json(self, path: str, timeout: float) -> object:  # parsed JSON, None when unreadable
        try:
            status, body = await self._get(path, timeout)
            return orjson.loads(body) if status == 200 else None
        except (*_ERRORS, orjson.JSONDecodeError):
            return None

    async def healthy(self, timeout: float = 10.0) -> bool:
        """/health answers 200 once the engine is up (503 when the engine died), and /v1/models lists the
        model: the HTTP server is up before the engine in some versions, so both are asked."""
        try:
            status, _ = await self._get("/health", timeout)
        except _ERRORS:
            return False
        return status == 200 and await self.model_id(timeout) is not None

    async def flush_cache(self, timeout: float = 30.0) -> bool:
        """POST /reset_prefix_cache (dev mode only). Acceptance never depends on it: it comes from counter
        deltas. False when the endpoint is absent or the reset was refused (requests still running)."""
        try:
            async with self._session.post(self.base_url + "/reset_prefix_cache",
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                body = await resp.read()
                if resp.status != 200:
                    return False
        except _ERRORS:
            return False
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return True  # older versions answer an empty 200
        return bool(data.get("success", True)) if isinstance(data, dict) else True

    async def server_info(self, timeout: float = 30.0) -> dict[str, Any] | None:
        """/version, plus /server_info's config in dev mode. The /server_info request is also the access-log
        line the runner waits for after a phase (uvicorn logs it, 404 or not)."""
        version = await self._json("/version", timeout)
        if not isinstance(version, dict):
            return None
        info: dict[str, Any] = {"version": version.get("version")}
        dev = await self._json("/server_info", timeout)
        if isinstance(dev, dict):
            info["server_info"] = dev
        return info

    async def histograms(self, timeout: float = 10.0) -> Scrape | None:
        """One /metrics scrape (spec counters and latency histograms); None when it failed."""
        try:
            status, body = await self._get("/metrics", timeout)
        except _ERRORS:
            return None
        return parse_metrics(body.decode("utf-8", "replace")) if status == 200 else None

    async def model_id(self, timeout: float = 10.0) -> str | None:
        data = await self._json("/v1/models", timeout)
        try:
            items = data.get("data") or [] if isinstance(data, dict) else []
            return items[0]["id"] if items else None
        except (KeyError, IndexError, TypeError):
            return None
