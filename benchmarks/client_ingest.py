"""How fast can each client ingest an SGLang chat stream, and how much timestamp jitter does it add?

A local fast server (`_fastserver.py`, SGLang 0.5.15's framing: content chunks, the final
`"choices": []` usage chunk, `data: [DONE]`) runs on one core; each client runs alone, in a fresh
process pinned to the other core:

* throughput: the server writes every response back to back (one write, pre-encoded); each of 1, 64 and
  256 streams issues requests of `--tokens` content chunks until `--duration` is up; chunks/s is content
  chunks of the completed requests over the wall time (and over the client's CPU time, the fair figure
  when other work shares the core). The `null` client reads the bytes and parses nothing: it shows the
  server and loopback deliver more than any client consumes.
* jitter: a paced server sends one chunk per stream every 2 ms to 64 streams, spread evenly over the
  2 ms ("staggered") or all in the same instant ("aligned", like one decode step), each chunk's content
  being its send time; added jitter is the client's timestamp minus the send time, less the smallest
  such delay of the run (loopback and wake-up), p50/p99, once all streams are flowing.
* scheduling floor: right before each jitter run, a loop on the client's core (same priority) reads
  perf_counter for as long as one jitter run (0.5 s with --quick); its gaps (the vCPU not running: steal,
  interrupts, other tasks) give the delay an ideal zero-cost client would add to events arriving at
  random (`floor_p99_us`, `_floor.py`), with the time lost in gaps > 1 ms and /proc/stat's steal ticks.
  Jitter at the floor is the machine's; above it, the client's own work (or the server core's gaps).

Clients: draftbench (harness.client.stream.ReplayClient: openai SDK request, harness.client.http1 raw read,
orjson, kernel receive timestamps), draftbench-callback (the same, kernel timestamps off: perf_counter in the
read callback), draftbench-aiohttp (over the SDK's DefaultAioHttpClient), SGLang's and vLLM's bench request
functions (reproduced in `_reference_clients.py`), and the openai SDK's own parsed stream. docs/performance.md
explains the figures.

    python benchmarks/client_ingest.py --quick --json out.json   # < 1 minute
    python benchmarks/client_ingest.py --rt                       # 3 repeats, longer runs (median kept)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

CLIENTS = ["draftbench", "draftbench-callback", "sglang", "vllm", "openai", "null"]
EXTRA_CLIENTS = ["draftbench-aiohttp"]  # ReplayClient over the SDK's DefaultAioHttpClient, for comparison
JITTER_CLIENTS = ["draftbench", "draftbench-callback", "sglang", "vllm"]
PHASES = ["staggered", "aligned"]
JITTER_TOKENS = 500  # mean chunks per paced request: 1 s at 2 ms per chunk
STAMP = 20  # _fastserver.STAMP_WIDTH
PROMPT = "Explain speculative decoding in one paragraph."


# ------------------------------------------------------------------ worker (runs pinned, one client)

def request_fn(client: str, port: int, streams: int) -> tuple[Any, Any]:
    """(one, close): `one()` sends one request and returns (content chunk times, text, ok)."""
    base = f"http://127.0.0.1:{port}"
    if client in ("draftbench", "draftbench-aiohttp", "draftbench-callback"):
        import httpx2
        import openai

        from harness.client import rxstamp
        from harness.client.stream import ReplayClient, ReplayRequest

        if client == "draftbench-callback":
            rxstamp.KERNEL_STAMPS = False  # the asyncio-protocol connection, stamped in its read callback

        http_client = None
        if client == "draftbench-aiohttp":
            http_client = openai.DefaultAioHttpClient(
                limits=httpx2.Limits(max_connections=max(streams, 1),
                                     max_keepalive_connections=max(streams, 1)),
                timeout=httpx2.Timeout(600, read=None))
        c = ReplayClient(base + "/v1", "default", max_connections=max(streams, 1), timeout_s=600,
                         http_client=http_client)

        async def one(n: int) -> tuple[list[float], str, bool]:
            r = await c.stream(ReplayRequest("bench", None, PROMPT, n))
            return r.chunk_times, r.text, r.ok

        return one, c.aclose
    if client == "sglang":
        from _reference_clients import sglang_chat

        async def one(n: int) -> tuple[list[float], str, bool]:
            o = await sglang_chat(base + "/v1/chat/completions", "default", PROMPT, n)
            return o.chunk_times(), o.generated_text, o.success

        return one, None
    if client == "vllm":
        from _reference_clients import vllm_chat, vllm_session

        session = vllm_session(streams)

        async def one(n: int) -> tuple[list[float], str, bool]:
            o = await vllm_chat(session, base + "/v1/chat/completions", "default", PROMPT, n)
            return o.chunk_times()[1:-1], o.generated_text, o.success  # drop the role and finish chunks

        return one, session.close
    if client == "openai":
        import openai
        from _reference_clients import openai_parsed

        oc = openai.AsyncOpenAI(base_url=base + "/v1", api_key="EMPTY", max_retries=0)

        async def one(n: int) -> tuple[list[float], str, bool]:
            times, text = await openai_parsed(oc, "default", PROMPT, n)
            return times, text, True

        return one, oc.close
    raise SystemExit(f"unknown client {client}")


def quiet_gc() -> None:
    """What vLLM's bench does before measuring: move everything alive now out of the collector's
    reach, so that a full collection does not stop the loop for tens of milliseconds."""
    gc.collect()
    gc.freeze()


async def throughput(client: str, port: int, streams: int, duration: float, n: int) -> dict:
    counts = {"requests": 0, "failed": 0}
    if client == "null":
        from _reference_clients import null_stream

        cpu0, t0 = time.process_time(), time.perf_counter()
        done = await asyncio.gather(*(null_stream("127.0.0.1", port, n, t0 + duration)
                                      for _ in range(streams)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        counts["requests"] = sum(done)
    else:
        one, close = request_fn(client, port, streams)
        await one(n)  # warm-up: imports, first connection, the SDK's platform probe
        quiet_gc()
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + duration

        async def slot() -> None:
            while time.perf_counter() < deadline:
                times, _, ok = await one(n)
                ok = ok and len(times) == n
                counts["requests" if ok else "failed"] += 1

        await asyncio.gather(*(slot() for _ in range(streams)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if close is not None:
            await close()
    chunks = counts["requests"] * n
    # chunks per CPU-second is what one uncontended core would do: robust when other work shares it.
    return {"client": client, "streams": streams, "chunks": chunks, **counts, "elapsed_s": elapsed,
            "cpu_s": cpu, "chunks_per_s": chunks / elapsed, "chunks_per_cpu_s": chunks / max(cpu, 1e-9)}


async def jitter(client: str, port: int, streams: int, rounds: int, n: int) -> dict:
    """Paced streams; each stream sends `rounds` requests of 0.5-1.5 x `n` chunks (seeded: 0.5-1.5 s at
    500 chunks/request and 2 ms/chunk), so that request starts spread out as in a real replay. Counts
    chunks sent once every stream is flowing."""
    one, close = request_fn(client, port, streams)
    await one(4)
    quiet_gc()
    pairs: list[tuple[float, float]] = []  # (server send stamp, client timestamp)
    firsts: list[float] = []
    bad = 0
    shared = 0  # chunks that came in the same read as the previous chunk of their stream
    cpu0, wall0 = time.process_time(), time.perf_counter()

    async def slot(i: int) -> None:
        nonlocal bad, shared
        rng = random.Random(i)
        for r in range(rounds):
            times, text, ok = await one(want := rng.randint(n // 2, n * 3 // 2))
            stamps = [float(text[k:k + STAMP]) for k in range(0, len(text), STAMP)]
            if not ok or len(stamps) != len(times) or len(times) != want:
                bad += 1
                continue
            if r == 0:
                firsts.append(stamps[0])
            pairs.extend(zip(stamps, times, strict=True))
            shared += sum(1 for k in range(1, len(times)) if times[k] == times[k - 1])

    await asyncio.gather(*(slot(i) for i in range(streams)))
    busy = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    if close is not None:
        await close()
    steady = max(firsts) if len(firsts) == streams else float("inf")
    delays = [t - s for s, t in pairs if s >= steady]
    if not delays:
        return {"client": client, "failed": bad}
    base = min(t - s for s, t in pairs)
    added = sorted((d - base) * 1e6 for d in delays)
    q = statistics.quantiles(added, n=100, method="inclusive")
    # A read that brought several chunks of one stream (the client did not get to the socket for a whole
    # interval) stamps them all with its one time: with kernel stamps, that is the tail. (SGLang's and
    # vLLM's clients stamp each chunk after parsing it: no two are equal.)
    return {"client": client, "streams": streams, "chunks": len(delays), "failed": bad,
            "base_delay_us": base * 1e6, "p50_us": q[49], "p95_us": q[94], "p99_us": q[98],
            "max_us": added[-1], "client_cpu_busy": busy, "shared_read_pct": 100 * shared / len(pairs)}


def worker(args: argparse.Namespace) -> None:
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.rt:
        from _fastserver import realtime

        realtime()
    if args.kind == "throughput":
        out = asyncio.run(throughput(args.client, args.port, args.streams, args.duration, args.tokens))
    else:
        out = asyncio.run(jitter(args.client, args.port, args.streams, args.rounds, args.tokens))
    print(json.dumps(out), flush=True)


# ------------------------------------------------------------------ orchestration

class ServerProcess:
    """A server subprocess that prints `PORT <port> ...` once it listens and stops when its stdin closes."""

    def __init__(self, argv: list[str], what: str):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise SystemExit(f"{what} did not start (said {line!r})")
        self.words = line.split()[1:]
        self.port = int(self.words[0])

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class FastServer(ServerProcess):
    def __init__(self, mode: str, cpu: int | None, interval_ms: float = 2.0, phase: str = "staggered",
                 rt: bool = False):
        argv = [sys.executable, str(HERE / "_fastserver.py"), "--mode", mode,
                "--interval-ms", str(interval_ms), "--phase", phase] + (["--rt"] if rt else [])
        if cpu is not None:
            argv += ["--cpu", str(cpu)]
        super().__init__(argv, "fast server")


def run_worker(kind: str, client: str, port: int, cpu: int | None, rt: bool = False, **kw: Any) -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--client", client,
            "--port", str(port)] + (["--rt"] if rt else [])
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    for k, v in kw.items():
        argv += [f"--{k}", str(v)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"worker {kind}/{client} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def jitter_span_s(rounds: int, streams: int = 64, n: int = JITTER_TOKENS, interval_ms: float = 2.0) -> float:
    """How long `jitter` paces chunks: its slowest stream's seeded request lengths, end to end."""
    def span(rng: random.Random) -> int:
        return sum(rng.randint(n // 2, n * 3 // 2) for _ in range(rounds))

    return max(span(random.Random(i)) for i in range(streams)) * interval_ms / 1e3


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from harness.client import rxstamp

    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "platform": platform.platform(), "loadavg_before": os.getloadavg(),
            "kernel_receive_stamps": rxstamp.kernel_stamps()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one repeat, short runs (under a minute)")
    ap.add_argument("--json", metavar="OUT", help="write the figures here")
    ap.add_argument("--clients", nargs="+", default=CLIENTS, choices=CLIENTS + EXTRA_CLIENTS)
    ap.add_argument("--streams-list", nargs="+", type=int, default=[1, 64, 256])
    ap.add_argument("--tokens", type=int, default=256, help="content chunks per request (throughput)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--duration", type=float, default=None, help="seconds per throughput run")
    ap.add_argument("--floor-s", type=float, default=None,
                    help="seconds of scheduling-floor loop before each jitter run (default: as long as one "
                         "jitter run, 0.5 with --quick; 0: none)")
    ap.add_argument("--rt", action="store_true",
                    help="jitter runs (client and paced server) at real-time priority (SCHED_FIFO, root): on "
                         "a shared machine, keeps other work from preempting them")
    # worker mode (internal)
    ap.add_argument("--worker", choices=["throughput", "jitter"], help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--streams", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.kind = args.worker
        worker(args)
        return
    import _floor

    repeats = args.repeats or (1 if args.quick else 3)
    duration = args.duration or (0.5 if args.quick else 3.0)
    rounds = 2 if args.quick else 6
    floor_s = args.floor_s if args.floor_s is not None else (0.5 if args.quick else jitter_span_s(rounds))
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    if client_cpu is None:
        print("warning: fewer than 2 cores: client and server share one, figures are pessimistic",
              file=sys.stderr)
    result: dict[str, Any] = {"machine": machine(), "settings": {
        "quick": args.quick, "repeats": repeats, "duration_s": duration, "tokens_per_request": args.tokens,
        "client_cpu": client_cpu, "server_cpu": server_cpu, "jitter_streams": 64, "jitter_interval_ms": 2.0,
        "jitter_tokens_per_request": f"{JITTER_TOKENS // 2}-{JITTER_TOKENS * 3 // 2}",
        "jitter_rounds": rounds, "realtime_jitter": args.rt, "floor_s": floor_s,
        "proc_stat_ticks_per_s": _clock_ticks()}}

    runs: list[dict] = []
    srv = FastServer("burst", server_cpu)
    try:
        for _ in range(repeats):  # clients interleaved, so that outside load hits them alike
            for streams in args.streams_list:
                for client in args.clients:
                    if args.quick and (client == "null" or (client == "openai" and streams > 64)):
                        continue  # ~20 s for one round of 256 parsed streams: too slow for --quick
                    r = run_worker("throughput", client, srv.port, client_cpu, streams=streams,
                                   duration=duration, tokens=args.tokens)
                    runs.append(r)
                    print(f"throughput {client:>18} x{streams:<4} {r['chunks_per_s']:>10,.0f} chunks/s"
                          f" {r['chunks_per_cpu_s']:>10,.0f} per cpu-s  ({r['requests']} requests,"
                          f" {r['failed']} failed)", file=sys.stderr)
    finally:
        srv.stop()
    table: dict[str, dict[str, float]] = {}
    cpu_table: dict[str, dict[str, float]] = {}
    for client in args.clients:
        for streams in args.streams_list:
            mine = [r for r in runs if r["client"] == client and r["streams"] == streams]
            if not mine:
                continue
            table.setdefault(client, {})[str(streams)] = statistics.median(r["chunks_per_s"] for r in mine)
            cpu_table.setdefault(client, {})[str(streams)] = statistics.median(
                r["chunks_per_cpu_s"] for r in mine)
    result["throughput_chunks_per_s"] = table
    result["throughput_chunks_per_cpu_s"] = cpu_table
    result["throughput_runs"] = runs

    jit: dict[str, dict[str, dict]] = {}
    for phase in PHASES:
        srv = FastServer("paced", server_cpu, 2.0, phase, rt=args.rt)
        try:
            for client in [c for c in JITTER_CLIENTS if c in args.clients]:
                if phase != "staggered" and args.quick and not client.startswith("draftbench"):
                    continue
                fl = _floor.run(client_cpu, floor_s, rt=args.rt) if floor_s > 0 else {}
                if fl:
                    print(f"floor  {phase:>9} {client:>19} cpu{client_cpu}  p50 {fl['floor_p50_us']:6.0f} us"
                          f"  p99 {fl['floor_p99_us']:6.0f} us  max gap {fl['floor_max_gap_us'] / 1e3:5.1f} "
                          f"ms  {fl['floor_gaps_over_1ms_per_s']:5.1f} gaps > 1 ms/s,"
                          f" {fl['floor_lost_pct_over_1ms']:.2f}% lost in them  steal"
                          f" {_num(fl['floor_steal_ticks_per_s'])} ticks/s (cpu{client_cpu}:"
                          f" {_num(fl['floor_cpu_steal_ticks_per_s'])})", file=sys.stderr)
                j = run_worker("jitter", client, srv.port, client_cpu, rt=args.rt, streams=64, rounds=rounds,
                               tokens=JITTER_TOKENS)
                j.update(fl)
                jit.setdefault(phase, {})[client] = j
                print(f"jitter {phase:>9} {client:>19} x64  p50 {j.get('p50_us', float('nan')):8.0f} us"
                      f"  p99 {j.get('p99_us', float('nan')):8.0f} us  ({j.get('chunks', 0)} chunks,"
                      f" {j.get('shared_read_pct', float('nan')):.2f}% stamped like the one before)",
                      file=sys.stderr)
        finally:
            srv.stop()
    result["jitter_64"] = jit

    def ratio(t: dict[str, dict[str, float]], other: str, s: str) -> float | None:
        if "draftbench" in t and other in t and t[other].get(s):
            return t["draftbench"][s] / t[other][s]
        return None

    for s in ("64", "256"):
        for other in ("sglang", "vllm", "draftbench-callback"):
            result[f"ratio_vs_{other}_{s}"] = ratio(table, other, s)
            result[f"ratio_vs_{other}_{s}_cpu"] = ratio(cpu_table, other, s)
    result["machine"]["loadavg_after"] = os.getloadavg()
    for phase, key in (("staggered", "jitter"), ("aligned", "jitter_aligned")):
        mine = jit.get(phase, {}).get("draftbench", {})
        result[f"{key}_p50_us_64"], result[f"{key}_p99_us_64"] = mine.get("p50_us"), mine.get("p99_us")
        # the machine's own floor, measured on the client's core right before that run
        result[f"{key.replace('jitter', 'floor')}_p99_us_64"] = mine.get("floor_p99_us")
    # The *_cpu ratios divide by the client's CPU time instead of wall time: on a machine where other
    # work competes for the client's core they are the fair comparison (see docs/performance.md).
    result["targets"] = {f"{k} >= 2.0": (result.get(k) or 0) >= 2.0 for k in (
        "ratio_vs_sglang_64", "ratio_vs_sglang_256", "ratio_vs_sglang_64_cpu", "ratio_vs_sglang_256_cpu")}
    result["targets"]["jitter_p99_us_64 <= 1000"] = (result.get("jitter_p99_us_64") or float("inf")) <= 1000.0
    print_table(result, args.streams_list)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


def print_table(result: dict, streams_list: list[int]) -> None:
    table = result["throughput_chunks_per_s"]
    print("| client | " + " | ".join(f"chunks/s, {s} streams" for s in streams_list)
          + " | jitter p50 / p99 µs, staggered | jitter p50 / p99 µs, aligned"
          + " | floor p99 µs, staggered | floor p99 µs, aligned |")
    print("|---|" + "---:|" * (len(streams_list) + 4))
    for client, row in table.items():
        jts = []
        for phase in PHASES:
            j = result["jitter_64"].get(phase, {}).get(client)
            jts.append(f"{j['p50_us']:.0f} / {j['p99_us']:.0f}" if j and "p50_us" in j else "")
        for phase in PHASES:
            j = result["jitter_64"].get(phase, {}).get(client)
            jts.append(f"{j['floor_p99_us']:.0f}" if j and "floor_p99_us" in j else "")
        print(f"| {client} | " + " | ".join(_cell(row, s) for s in streams_list) + " | "
              + " | ".join(jts) + " |")
    cpu = result["throughput_chunks_per_cpu_s"]
    print("\nper CPU-second of the client:")
    for client, row in cpu.items():
        print(f"| {client} | " + " | ".join(_cell(row, s) for s in streams_list) + " |")
    for k in sorted(k for k in result if k.startswith("ratio_vs_")):
        if result.get(k) is not None:
            print(f"{k}: {result[k]:.2f}")
    for k, ok in result["targets"].items():
        print(f"target {k}: {_verdict(k, ok, result)}")


def _verdict(target: str, ok: bool, result: dict) -> str:
    """A jitter target below this machine's own scheduling floor is out of any client's reach here."""
    floor = result.get("floor_p99_us_64")
    if not target.startswith("jitter_p99_us_64 <=") or floor is None:
        return "met" if ok else "MISSED"
    measured = f"(scheduling floor p99 {floor:.0f} us on the client's core)"
    if ok:
        return f"met {measured}"
    if floor > float(target.rsplit("<=", 1)[1]):
        return f"not met on this machine {measured}"
    return f"MISSED {measured}"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _clock_ticks() -> int | None:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return None


def _cell(row: dict[str, float], streams: int) -> str:
    return f"{row[str(streams)]:,.0f}" if str(streams) in row else "—"


if __name__ == "__main__":
    main()
