"""Handing a started server its API key without putting it on a command line (where `ps` shows it for the
server's whole life and a failed spawn prints it).

vLLM reads VLLM_API_KEY (`args.api_key or envs.VLLM_API_KEY`): the key goes into a 0600 file in the run's
private directory on the target, a tiny sh wrapper exports it and deletes the file before exec'ing the server.
SGLang reads its key from no variable, but reads server args from `--config FILE` (.json/.yaml): the key
goes into a 0600 JSON file it names, deleted once the server is ready (or stopped). Either way no argv holds
the key. SGLang still prints its ServerArgs, api_key included, into its own log on the target: the harness
scrubs its copy and says so (`Server.key_in_log`).
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Protocol

from harness.common.errors import HarnessError

if TYPE_CHECKING:
    from harness.engines.base import Engine
    from harness.targets.base import Target

# $0: the env file; "$@": the server's argv. The file is gone before the server starts.
_ENV_WRAPPER = 'set -a && . "$0" && set +a && rm -f -- "$0" && exec "$@"'


async def hand_over(target: Target, engine: Engine, argv: list[str], key: str,
                    stem: str) -> tuple[list[str], str | None]:
    """(the argv to spawn, the key file to delete once the server has read it, or None). `stem`: a path in a
    private (0700) directory on the target, without suffix."""
    if engine.api_key_env:
        path = f"{stem}.key.env"
        await target.write_private(path, f"{engine.api_key_env}={shlex.quote(key)}\n".encode())
        return ["sh", "-c", _ENV_WRAPPER, path, *argv], None
    flag = engine.api_key_file_flag
    if not flag:
        raise HarnessError(f"{engine.display_name} takes its API key neither from a variable nor from a file")
    if flag in argv:
        raise HarnessError(f"the launch command already has {flag}: the API key is handed to "
                           f"{engine.display_name} in a {flag} file of its own; move those settings to "
                           "extra_args")
    path = f"{stem}.key.json"
    await target.write_private(path, json.dumps({"api-key": key}).encode())
    return [*argv, flag, path], path


async def remove_key_file(target: Target, path: str | None) -> None:
    if path:
        try:
            await target.run(["rm", "-f", "--", path], timeout=30)
        except Exception:  # noqa: BLE001 - a lost link: the file is 0600 in a 0700 directory, as before
            pass


class _LoggingServer(Protocol):  # harness.serve.server.Server (which imports this module)
    @property
    def target(self) -> Target: ...
    @property
    def remote_log(self) -> str: ...


def key_in_log_warning(server: _LoggingServer) -> str:
    return (f"the server wrote the API key into its own log on {server.target.name}: {server.remote_log} "
            f"(the run directory's copy is scrubbed); delete that file or keep it private")
