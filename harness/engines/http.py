"""What every engine's admin client shares: one aiohttp session against a server's base URL (no /v1), the
bearer key on every call when the server has one, and the `python -c 'import X'` version probe."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp

from harness.common.errors import HarnessError

if TYPE_CHECKING:
    from harness.targets.base import Target


class AdminSession:
    def __init__(self, base_url: str, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._session = aiohttp.ClientSession(headers=headers)

    async def close(self) -> None:
        await self._session.close()

    async def _get(self, path: str, timeout: float) -> tuple[int, bytes]:
        limit = aiohttp.ClientTimeout(total=timeout)
        async with self._session.get(self.base_url + path, timeout=limit) as resp:
            return resp.status, await resp.read()


async def installed_version(target: Target, python: str, module: str, display: str) -> str:
    """`module.__version__` as `python` on the target imports it; a clear error when it cannot."""
    res = await target.run([python, "-c", f"import {module}; print({module}.__version__)"], timeout=120)
    if res.rc != 0:
        last = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        raise HarnessError(f"{display} is not importable by '{python}' on {target.name}: {last[0]}")
    return res.stdout.strip().splitlines()[-1]
