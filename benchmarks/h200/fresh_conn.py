"""draftbench with a new TCP connection for every request, as sglang.bench_serving opens one (a new aiohttp
session per request): an experiment on how the arrival of a closed loop's next request moves the real
server's TTFT (docs/real-gpu.md), not a mode of the product. Same arguments as `draftbench`."""

import sys

from harness import http1
from harness.cli import main

# an idle connection is never young enough to be reused: every request connects anew
http1.HTTP1Transport.__init__.__kwdefaults__["keepalive_s"] = -1.0

if __name__ == "__main__":
    sys.exit(main())
