"""How fast does each client get a burst of concurrent requests onto the wire?

A closed loop at concurrency N sends a wave of N requests whenever a batch of them completes; the
client's own CPU work per request (building it, opening a connection) spreads the wave out, and the
server sees, and schedules, the late ones late. This measures that spread.

A small server (this file, `--serve`) runs in its own process pinned to one core: HTTP/1.1 with
Content-Length bodies and keep-alive, answering every request with SGLang 0.5.15's chat stream framing
(`_fastserver.py`: role chunk, one content chunk, finish chunk, the `"choices": []` usage chunk when
asked for, `data: [DONE]`). The content chunk is the request's arrival time on the `perf_counter`
clock (CLOCK_MONOTONIC, the same in every process on Linux): the kernel's receive stamp of the read
that completed the request's body (SO_TIMESTAMPNS, mapped onto perf_counter, as harness.client.rxstamp does
for the client), so that the server's own work on the requests before it does not delay it; where the
kernel gives no stamp, perf_counter right after that read. The server's read time is sent too
(`last_read_ms` in the JSON: the same, but including the server's own queueing).

Each client runs alone, in a fresh process pinned to another core, and fires `size` requests at once
(`asyncio.gather`) in repeated waves, each 10 ms after the previous one completed; the first 3 waves
are discarded (connections, imports, and draftbench's first request per path, which goes through the
openai SDK), then `gc.freeze()` as in client_ingest.py. Per client and burst size: the median over
waves of the first and the last arrival, in ms after the wave started (the client's perf_counter just
before the gather), and of their difference (spread); and the client's CPU time per request over the
measured waves (`time.process_time`, which covers reading the tiny responses too).

Clients: draftbench (harness.client.stream.ReplayClient: later requests to a path reuse the head the SDK built
for the first, `ReplayClient._send`), draftbench-sdk-build (the same client with that path switched off:
the SDK builds every request, as before), sglang and vllm (their bench request functions, reproduced
in `_reference_clients.py`: SGLang opens a new aiohttp session and TCP connection per request, vLLM
shares one keep-alive session). `ratio_last_arrival_vs_sglang_<size>` in the JSON is SGLang's median
last arrival over draftbench's, measured in the same run: above 1, draftbench gets the burst out
sooner. aiohttp (SGLang's and vLLM's clients) writes a request's body in a task of its own, started
eagerly only from Python 3.12: on older Pythons no body leaves before every request of the burst is
built, so their first arrival is close to their last. Linux only (sched_setaffinity, SO_TIMESTAMPNS);
on one core client and server share it.

    python benchmarks/send_burst.py --quick --json out.json   # well under a minute
    python benchmarks/send_burst.py --sizes 8 64 256 --waves 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from client_ingest import ServerProcess  # noqa: E402 (found through the path above)

CLIENTS = ["draftbench", "draftbench-sdk-build", "sglang", "vllm"]
WARMUP_WAVES = 3
GAP_S = 0.01  # between waves: the previous wave's connections settle (SGLang's close theirs)
OFFSET_RECHECK_S = 0.1  # how often the server measures CLOCK_REALTIME - perf_counter again


# ------------------------------------------------------------------ server (runs pinned, `--serve`)

class _Conn:
    __slots__ = ("sock", "buf", "out", "closing")

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = bytearray()
        self.out = b""  # what the kernel did not take yet
        self.closing = False  # close once `out` is written


class BurstServer:
    """A selectors loop (no asyncio: nothing to cancel, no tracebacks at exit) on 127.0.0.1."""

    def __init__(self) -> None:
        from harness.client import rxstamp

        self.rxstamp = rxstamp
        self.kernel = rxstamp.kernel_stamps()  # also holds the kernel's stamping switch on
        self.offset_ns = rxstamp.clock_offset_ns()
        self.recheck_at = time.perf_counter() + OFFSET_RECHECK_S
        self.anc_size = socket.CMSG_SPACE(struct.calcsize("@ll")) if self.kernel else 0
        self.sel = selectors.DefaultSelector()
        self.lsock = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self.lsock.setblocking(False)
        if self.kernel:
            rxstamp.enable(self.lsock)
        self.conns: dict[int, _Conn] = {}
        self.tails: dict[tuple[bool, bool], tuple[bytes, bytes]] = {}

    @property
    def port(self) -> int:
        return self.lsock.getsockname()[1]

    def run(self, stop: Any) -> None:
        self.sel.register(self.lsock, selectors.EVENT_READ, "accept")
        self.sel.register(stop, selectors.EVENT_READ, "stop")
        try:
            while True:
                for key, mask in self.sel.select():
                    if key.data == "accept":
                        self.accept()
                    elif key.data == "stop":
                        if not os.read(stop.fileno(), 4096):
                            return
                    elif mask & selectors.EVENT_WRITE:
                        self.flush(key.data)
                    else:
                        self.readable(key.data)
        finally:
            for c in list(self.conns.values()):
                self.close(c)
            self.sel.close()
            self.lsock.close()

    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. out of descriptors: leave it in the backlog
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.kernel:
                self.rxstamp.enable(sock)
            c = _Conn(sock)
            self.conns[sock.fileno()] = c
            self.sel.register(sock, selectors.EVENT_READ, c)

    def close(self, c: _Conn) -> None:
        fd = c.sock.fileno()
        if fd >= 0:
            self.conns.pop(fd, None)
            try:
                self.sel.unregister(c.sock)
            except (KeyError, ValueError):
                pass
        c.sock.close()

    def readable(self, c: _Conn) -> None:
        try:
            data, anc, _, _ = c.sock.recvmsg(1 << 16, self.anc_size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset by the peer
            self.close(c)
            return
        t_read = time.perf_counter()
        if not data:
            self.close(c)
            return
        t_arrival = t_read
        if self.kernel:
            ns = _kernel_ns(anc, self.rxstamp.SO_TIMESTAMPNS)
            if ns is not None:
                if t_read >= self.recheck_at:
                    self.offset_ns = self.rxstamp.clock_offset_ns()
                    self.recheck_at = t_read + OFFSET_RECHECK_S
                t_arrival = min((ns - self.offset_ns) * 1e-9, t_read)
        c.buf += data
        while not c.closing:
            end = c.buf.find(b"\r\n\r\n")
            if end < 0:
                break
            lines = bytes(c.buf[:end]).split(b"\r\n")
            length, close, chunked = 0, lines[0].endswith(b"HTTP/1.0"), False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name, value = name.strip().lower(), value.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = True
                elif name == b"connection":
                    close = value == b"close" or (close and value != b"keep-alive")
            if chunked:  # none of the clients measured sends it
                self.send(c,
                          b"HTTP/1.1 411 Length Required\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                c.closing = True
                break
            if len(c.buf) < end + 4 + length:
                break  # the body is still on its way
            body = bytes(c.buf[end + 4:end + 4 + length])
            del c.buf[:end + 4 + length]
            self.send(c, self.response(body, t_arrival, t_read))
            c.closing = close
        if c.closing and not c.out:
            self.close(c)

    def response(self, body: bytes, t_arrival: float, t_read: float) -> bytes:
        from _fastserver import HEAD, chunk, frame, tail

        try:
            req = json.loads(body)
            opts = req.get("stream_options") or {}
        except (ValueError, AttributeError):
            req, opts = {}, {}
        continuous = bool(opts.get("continuous_usage_stats"))
        include_usage = bool(opts.get("include_usage"))
        key = (continuous, include_usage)
        if key not in self.tails:
            self.tails[key] = (HEAD + frame(chunk("", role=True)), tail(1, include_usage))
        head, end = self.tails[key]
        return head + frame(chunk(f"{t_arrival:.9f} {t_read:.9f}", cum=1 if continuous else None)) + end

    def send(self, c: _Conn, data: bytes) -> None:
        if c.out:
            c.out += data
            return
        try:
            n = c.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError:
            c.closing, c.out = True, b""
            return
        if n < len(data):
            c.out = data[n:]
            self.sel.modify(c.sock, selectors.EVENT_WRITE, c)

    def flush(self, c: _Conn) -> None:
        try:
            n = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(c)
            return
        c.out = c.out[n:]
        if not c.out:
            if c.closing:
                self.close(c)
            else:
                self.sel.modify(c.sock, selectors.EVENT_READ, c)


def _kernel_ns(anc: list[tuple[int, int, bytes]], kind_wanted: int) -> int | None:
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == kind_wanted and len(data) >= struct.calcsize("@ll"):
            sec, nsec = struct.unpack_from("@ll", data)
            return sec * 1_000_000_000 + nsec
    return None


def serve(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    srv = BurstServer()
    print(f"PORT {srv.port} {'kernel' if srv.kernel else 'read'}", flush=True)
    try:
        srv.run(sys.stdin)  # until the parent closes our stdin (or dies)
    except KeyboardInterrupt:
        pass


class Server(ServerProcess):
    """The server subprocess, from the parent's side."""

    def __init__(self, cpu: int | None):
        argv = [sys.executable, str(Path(__file__).resolve()), "--serve"]
        if cpu is not None:
            argv += ["--cpu", str(cpu)]
        super().__init__(argv, "burst server")
        self.kernel_stamps = self.words[1:2] == ["kernel"]


# ------------------------------------------------------------------ worker (runs pinned, one client)

def make_one(client: str, port: int, size: int) -> tuple[Any, Any]:
    from client_ingest import request_fn

    if client != "draftbench-sdk-build":
        return request_fn(client, port, size)
    one, close = request_fn("draftbench", port, size)
    # The ReplayClient behind request_fn's draftbench. Without its http1 transport `_send` takes the
    # SDK's path for every request: the prepared head is never built nor used.
    from harness.client.stream import ReplayClient

    replay = close.__self__
    assert isinstance(replay, ReplayClient) and hasattr(replay, "_fast")
    replay._fast = None
    return one, close


async def bursts(client: str, port: int, size: int, waves: int) -> dict:
    from client_ingest import quiet_gc

    one, close = make_one(client, port, size)
    firsts: list[float] = []
    lasts: list[float] = []
    lasts_read: list[float] = []
    failed = bad_waves = 0
    cpu0 = 0.0
    for w in range(WARMUP_WAVES + waves):
        if w == WARMUP_WAVES:
            quiet_gc()
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        res = await asyncio.gather(*(one(1) for _ in range(size)))
        stamps: list[tuple[float, float]] = []
        for _, text, ok in res:
            try:
                arrival, read = (float(x) for x in text.split())
            except ValueError:
                ok = False
            if ok:
                stamps.append((arrival, read))
        if w < WARMUP_WAVES:
            await asyncio.sleep(GAP_S)
            continue
        failed += size - len(stamps)
        if len(stamps) == size:
            arrivals = sorted(a for a, _ in stamps)
            firsts.append((arrivals[0] - t0) * 1e3)
            lasts.append((arrivals[-1] - t0) * 1e3)
            lasts_read.append((max(r for _, r in stamps) - t0) * 1e3)
        else:
            bad_waves += 1
        await asyncio.sleep(GAP_S)
    cpu = time.process_time() - cpu0
    if close is not None:
        await close()
    out: dict[str, Any] = {"client": client, "size": size, "waves": len(firsts), "failed_requests": failed,
                           "failed_waves": bad_waves, "cpu_ms_per_request": cpu * 1e3 / (size * waves)}
    if firsts:
        spreads = [b - a for a, b in zip(firsts, lasts, strict=True)]
        out.update(first_ms=statistics.median(firsts), last_ms=statistics.median(lasts),
                   spread_ms=statistics.median(spreads), last_read_ms=statistics.median(lasts_read),
                   last_ms_min=min(lasts), last_ms_max=max(lasts))
    return out


def worker(args: argparse.Namespace) -> None:
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    print(json.dumps(asyncio.run(bursts(args.client, args.port, args.size, args.waves))), flush=True)


def run_worker(client: str, port: int, cpu: int | None, size: int, waves: int) -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--client", client, "--port",
            str(port), "--size", str(size), "--waves", str(waves)]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"worker {client} x{size} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ orchestration

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer waves (well under a minute)")
    ap.add_argument("--json", metavar="OUT", help="write the figures here")
    ap.add_argument("--clients", nargs="+", default=CLIENTS, choices=CLIENTS)
    ap.add_argument("--sizes", nargs="+", type=int, default=[8, 64, 256], help="requests per burst")
    ap.add_argument("--waves", type=int, default=None,
                    help=f"measured waves per client and size (default 30, --quick 8), after {WARMUP_WAVES} "
                         "warm-up waves")
    # internal modes
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.cpu)
        return
    if args.worker:
        worker(args)
        return

    from client_ingest import machine

    waves = args.waves or (8 if args.quick else 30)
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    if client_cpu is None:
        print("warning: fewer than 2 cores: client and server share one, arrivals are late for all clients",
              file=sys.stderr)
    result: dict[str, Any] = {"machine": machine(), "settings": {
        "quick": args.quick, "sizes": args.sizes, "waves": waves, "warmup_waves": WARMUP_WAVES,
        "gap_s": GAP_S, "server_cpu": server_cpu, "client_cpu": client_cpu}}
    runs: list[dict] = []
    srv = Server(server_cpu)
    result["settings"]["arrival_stamp"] = "kernel receive" if srv.kernel_stamps else "server read"
    try:
        for size in args.sizes:
            for client in args.clients:
                r = run_worker(client, srv.port, client_cpu, size, waves)
                runs.append(r)
                print(f"{client:>20} x{size:<4} first {r.get('first_ms', float('nan')):7.2f} ms  last "
                      f"{r.get('last_ms', float('nan')):7.2f} ms  spread "
                      f"{r.get('spread_ms', float('nan')):7.2f} ms  cpu {r['cpu_ms_per_request'] * 1e3:6.0f} "
                      f"us/request  ({r['waves']} waves, {r['failed_requests']} failed requests)",
                      file=sys.stderr)
    finally:
        srv.stop()
    result["runs"] = runs
    by = {(r["client"], r["size"]): r for r in runs}
    for size in args.sizes:
        mine = by.get(("draftbench", size), {}).get("last_ms")
        for other, name in (("sglang", "sglang"), ("vllm", "vllm"), ("draftbench-sdk-build", "sdk_build")):
            theirs = by.get((other, size), {}).get("last_ms")
            result[f"ratio_last_arrival_vs_{name}_{size}"] = theirs / mine if mine and theirs else None
    result["machine"]["loadavg_after"] = os.getloadavg()
    print_table(result, args.clients, args.sizes, by)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def print_table(result: dict, clients: list[str], sizes: list[int], by: dict) -> None:
    print(f"arrival after the wave starts, ms, median over waves ({result['settings']['arrival_stamp']} "
          "stamps); first / last (spread)")
    print("| client | " + " | ".join(f"{s} requests" for s in sizes) + " | client CPU µs/request, "
          + " / ".join(str(s) for s in sizes) + " |")
    print("|---|" + "---:|" * (len(sizes) + 1))
    for client in clients:
        cells, cpu = [], []
        for s in sizes:
            r = by.get((client, s), {})
            cells.append(f"{r['first_ms']:.2f} / {r['last_ms']:.2f} ({r['spread_ms']:.2f})" if "last_ms" in r
                         else "—")
            if r.get("failed_requests"):
                cells[-1] += f", {r['failed_requests']} failed"
            cpu.append(f"{r['cpu_ms_per_request'] * 1e3:.0f}" if r else "—")
        print(f"| {client} | " + " | ".join(cells) + " | " + " / ".join(cpu) + " |")
    for k in sorted((k for k in result if k.startswith("ratio_")), key=lambda k: (k.rsplit("_", 1)[0],
                                                                                  int(k.rsplit("_", 1)[1]))):
        if result[k] is not None:
            print(f"{k}: {result[k]:.2f}")


if __name__ == "__main__":
    main()
