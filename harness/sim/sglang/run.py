"""``python -m harness.sim <launch_server flags>``: parse like SGLang, boot with its log sequence, serve.

Sim-only knobs come from the environment: ``DRAFTBENCH_SIM_TIME_SCALE`` (default 1.0) multiplies every
simulated duration (steps, prefill, the health probe's 1 s poll, the warm-up's 1 s wait, the 5 s shutdown
pause); ``DRAFTBENCH_SIM_STARTUP_S`` (default 1.0) is the wall time from launch to ready; its last quarter
is the warm-up request's first forward, during which ``/health_generate`` answers 503 as on the real server.
``DRAFTBENCH_SIM_STEP_NOISE`` (default 0: off) is the relative standard deviation of every step's time
(model.StepNoise), drawn from ``DRAFTBENCH_SIM_NOISE_SEED`` (default 0) mixed with the server's
--random-seed and speculative shape: two variants draw different noise, a rerun of one draws the same.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
import warnings
from typing import Any

from aiohttp import web

from harness.sim.sglang import args, forced, resolve, startup
from harness.sim.sglang.app import make_app
from harness.sim.sglang.engine import Engine, EngineConfig, Req
from harness.sim.sglang.logs import SimLog, rank_prefix
from harness.sim.sglang.metrics import Metrics
from harness.sim.sglang.model import SpecShape, StepNoise, stable_hash, tokenize
from harness.sim.sglang.state import SimState

SPEC_ALGOS = ("EAGLE", "EAGLE3", "STANDALONE")


def _env_float(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def main(argv: list[str] | None = None) -> int:
    warnings.warn(
        "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the recommended "
        "entrypoint.\n  Example: sglang serve --model-path <model> [options]",
        UserWarning,
        stacklevel=1,
    )
    ns = args.parse_cli(sys.argv[1:] if argv is None else argv)
    early = SimLog(level=ns.log_level)  # logging.basicConfig of prepare_server_args: no rank prefix
    target = startup.read_config(ns.model_path, "model")
    draft = None
    if ns.speculative_algorithm and ns.speculative_draft_model_path:
        draft = startup.read_draft(ns.speculative_draft_model_path)
    arch = str((target.get("architectures") or ["LlamaForCausalLM"])[0])
    sa, notes = resolve.resolve(ns, arch)
    for note in notes:
        early.warning(note)
    log = SimLog(sched_prefix=rank_prefix(sa["tp_size"], sa["dp_size"]), level=sa["log_level"])
    log.info(f"server_args={resolve.server_args_repr(sa)}")
    try:
        asyncio.run(serve(sa, target, draft, log))
    except startup.SchedulerCrash as crash:
        log.error("Scheduler hit an exception: " + crash.text(startup.site_dir()))
        log.error("Received sigquit from a child process. It usually means the child failed.")
        log.info(
            f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}"
        )
        os.kill(os.getpid(), signal.SIGKILL)
    except KeyboardInterrupt:
        return 130
    return 0


class Boot:
    """The start-up sequence; sleeps are fractions of DRAFTBENCH_SIM_STARTUP_S."""

    def __init__(self, sa: dict[str, Any], target: dict[str, Any], draft: startup.Draft | None, log: SimLog):
        self.sa, self.target, self.draft, self.log = sa, target, draft, log
        self.startup_s = _env_float("DRAFTBENCH_SIM_STARTUP_S", 1.0)
        self.algo = sa["speculative_algorithm"] if sa["speculative_algorithm"] in SPEC_ALGOS else None
        self.cg = sa["cuda_graph_config"]
        self.graphs = self.cg["decode"]["backend"] != "disabled"
        draft_cfg = None
        if self.algo:
            draft_cfg = draft.config if draft else dict(target, num_hidden_layers=1)
        self.plan = startup.memory_plan(
            target, draft_cfg, sa["mem_fraction_static"], sa["tp_size"], self.graphs
        )
        self.context_len = int(sa["context_length"] or target.get("max_position_embeddings") or 8192)
        tokens = self.plan.max_total_tokens
        est = max(min(int(tokens / self.context_len * 512), 4096), 2048)
        self.max_running = min(sa["max_running_requests"] or est, tokens // 2)

    async def pause(self, fraction: float) -> None:
        await asyncio.sleep(self.startup_s * fraction)

    def sched(self, msg: str) -> None:
        self.log.info(msg, scheduler=True)

    async def load(self) -> None:
        p, sa = self.plan, self.sa
        self.log.info("Using default HuggingFace chat template with detected content format: string")
        await self.pause(0.15)
        if self.draft and (warning := startup.generation_config_warning(self.draft.path)):
            # the draft's ModelConfig is built before the target's weights load
            self.log.warning(warning, scheduler=True)
        self.sched("Init torch distributed begin.")
        self.sched("Init torch distributed ends. elapsed=0.27 s, mem usage=0.09 GB")
        self.sched(f"Load weight begin. avail mem={startup.GPU_TOTAL_GB:.2f} GB")
        await self.pause(0.1)
        self.sched(
            f"Load weight end. elapsed=0.25 s, type={self.target_arch}, "
            f"avail mem={startup.GPU_TOTAL_GB - p.weight_gb:.2f} GB, mem usage={p.weight_gb:.2f} GB."
        )
        avail = startup.GPU_TOTAL_GB - p.weight_gb
        if self.algo:
            if sa["speculative_draft_load_format"] is not None:
                self.sched(f"Using draft model load_format: '{sa['speculative_draft_load_format']}'")
            self.sched("SPECULATIVE_MOE_RUNNER_BACKEND is not initialized, using auto backend")
            self.sched("SPECULATIVE_MOE_A2A_BACKEND is not initialized, using none backend")
            self.sched("Init torch distributed begin.")
            self.sched("Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB")
            self.sched(f"Load weight begin. avail mem={avail:.2f} GB")
            await self.pause(0.05)
            self._check_draft()
            self.sched(
                f"Load weight end. elapsed=0.01 s, type={self.draft_arch}, avail mem="
                f"{avail - p.draft_weight_gb:.2f} GB, mem usage={p.draft_weight_gb:.2f} GB."
            )
            avail -= p.draft_weight_gb
            if self.algo == "EAGLE3" and sa["speculative_token_map"] is not None:
                self.sched(
                    "Speculative token map specified, but EAGLE3 models already have this. "
                    "Ignoring the specified token map."
                )
        dtype = self.torch_dtype
        self.sched(
            f"KV Cache is allocated. dtype: {dtype}, #tokens: {p.max_total_tokens}, K size: {p.k_gb:.2f} GB, "
            f"V size: {p.k_gb:.2f} GB"
        )
        avail -= 2 * p.k_gb + startup.POOL_OVERHEAD_GB
        self.sched(f"Memory pool end. avail mem={avail:.2f} GB")
        if self.algo:
            self.sched(
                f"KV Cache is allocated. dtype: {dtype}, #tokens: {p.max_total_tokens}, "
                f"K size: {p.draft_k_gb:.2f} GB, V size: {p.draft_k_gb:.2f} GB"
            )
            avail -= 2 * p.draft_k_gb
            self.sched(f"Memory pool end. avail mem={avail:.2f} GB")
        await self.pause(0.05)
        avail = await self._graphs(avail)
        self.sched(
            f"max_total_num_tokens={p.max_total_tokens}, chunked_prefill_size={sa['chunked_prefill_size']}, "
            f"max_prefill_tokens={sa['max_prefill_tokens']}, max_running_requests={self.max_running}, "
            f"context_len={self.context_len}, available_gpu_mem={avail:.2f} GB"
        )
        self.sched(
            "Tree cache initialized: source=default impl=RadixCache hybrid_swa=False hybrid_ssm=False "
            "hierarchical=False streaming_wrapped=False"
        )
        self.avail_final = avail

    @property
    def torch_dtype(self) -> str:
        dtype = self.sa["dtype"]
        if dtype == "auto":
            dtype = str(self.target.get("torch_dtype") or self.target.get("dtype") or "bfloat16")
        return "torch." + {"half": "float16", "float": "float32"}.get(dtype, dtype)

    @property
    def target_arch(self) -> str:
        return str((self.target.get("architectures") or ["LlamaForCausalLM"])[0])

    @property
    def draft_arch(self) -> str:
        if self.draft:
            return self.draft.arch
        # an MTP target's draft is its own NextN head; any other target is (wrongly) loaded whole
        return self.target_arch + ("NextN" if self.target_arch in resolve.MTP_TARGETS else "")

    def _check_draft(self) -> None:
        """Draft-model construction failures (an EAGLE-2 draft under EAGLE3 fails later, at its first
        forward)."""
        if self.draft is None and self.target_arch not in resolve.MTP_TARGETS:
            raise startup.target_as_draft(self.target_arch)
        if self.draft and "Eagle3" in self.draft.arch and "draft_vocab_size" not in self.draft.config:
            raise startup.no_draft_vocab_size()

    def fc_crash(self, tokens: int) -> startup.SchedulerCrash | None:
        if not self.algo or self.draft is None:
            return None
        bad = startup.fc_mismatch(self.algo, self.target, self.draft.config, self.draft.arch)
        if bad is None:
            return None
        return startup.fc_shape_error(tokens, *bad, "Eagle3" in self.draft.arch, capturing=self.graphs)

    async def _graphs(self, avail: float) -> float:
        """Each model runner (target, then draft) checks its prefill graph before capturing its decode
        graphs."""
        cg, sa = self.cg, self.sa
        phases = [("target decode", 1, True)]  # (graph, tokens per batch entry, first graph of its runner)
        if self.algo:
            phases = [
                ("target verify", sa["speculative_num_draft_tokens"], True),
                ("draft decode", sa["speculative_eagle_topk"], True),
                ("draft extend", sa["speculative_num_draft_tokens"], False),
            ]
        share = self.plan.graph_gb / len(phases)
        for name, per_bs, runner_start in phases:
            if runner_start and cg["prefill"]["backend"] == "disabled":
                self.sched(
                    "Disable prefill CUDA graph because cuda_graph_config resolved "
                    "prefill.backend='disabled' (e.g. via --cuda-graph-backend-prefill=disabled or "
                    "auto-disable rules)."
                )
            if not self.graphs:
                continue
            bs = cg["decode"]["bs"]
            if name == "draft extend" and (crash := self.fc_crash(max(bs) * per_bs)):
                raise crash
            self.sched(
                f"Capture {name} CUDA graph begin. backend=full, num_tokens_per_bs={per_bs}, bs={bs}, "
                f"avail mem={avail:.2f} GB"
            )
            await self.pause(0.4 / len(phases))
            self.log.raw(startup.tqdm_bar(bs, avail - share, self.startup_s * 0.4 / len(phases)))
            avail -= share
            self.sched(
                f"Capture {name} CUDA graph end. elapsed={self.startup_s * 0.4 / len(phases):.2f} s, "
                f"mem usage={share:.2f} GB, avail mem={avail:.2f} GB."
            )
        return avail


async def serve(sa: dict[str, Any], target: dict[str, Any], draft: startup.Draft | None, log: SimLog) -> None:
    scale = _env_float("DRAFTBENCH_SIM_TIME_SCALE", 1.0)
    boot = Boot(sa, target, draft, log)
    await boot.load()
    spec = None
    if boot.algo:
        spec = SpecShape(
            sa["speculative_num_steps"], sa["speculative_eagle_topk"], sa["speculative_num_draft_tokens"]
        )
    wrong_flag = boot.algo == "EAGLE" and draft is not None and "Eagle3" in draft.arch
    eos = target.get("eos_token_id", 2)
    cfg = EngineConfig(
        max_running=boot.max_running,
        max_total_tokens=boot.plan.max_total_tokens,
        context_len=boot.context_len,
        chunked_prefill_size=sa["chunked_prefill_size"],
        decode_log_interval=max(1, sa["decode_log_interval"]),
        graph_backend=boot.cg["decode"]["backend"],
        graph_max_bs=boot.cg["decode"]["max_bs"],
        vocab_size=int(target.get("vocab_size", 32000)),
        eos_token_id=int(eos[0] if isinstance(eos, list) else eos),
        seed=sa["random_seed"],
        time_scale=scale,
        noise=StepNoise(_env_float("DRAFTBENCH_SIM_STEP_NOISE", 0.0), stable_hash(
            os.environ.get("DRAFTBENCH_SIM_NOISE_SEED", "0"), sa["random_seed"], boot.algo, spec)),
        spec=spec,
        per_position=draft.per_position if draft else startup.DEFAULT_PROFILE,
        by_content=draft.by_content if draft else (),
        wrong_flag=wrong_flag,
        stream_interval=max(1, sa["stream_interval"]),
        mfu=_mfu_constants(sa, target) if sa["enable_mfu_metrics"] else None,
        forced=forced.from_env() if spec is not None else None,
    )
    metrics = Metrics(str(sa["served_model_name"]), spec=spec is not None) if sa["enable_metrics"] else None
    engine = Engine(cfg, log, metrics)
    if metrics:
        metrics.set_static(
            max_total_tokens=cfg.max_total_tokens,
            context_len=cfg.context_len,
            steps=spec.num_steps if spec else 0,
            draft_tokens=spec.num_draft_tokens if spec else 0,
        )
    state = SimState(
        sa=sa,
        engine=engine,
        log=log,
        metrics=metrics,
        target_config=target,
        max_total_num_tokens=cfg.max_total_tokens,
        context_len=cfg.context_len,
        effective_max_running=boot.max_running,
        memory_usage={
            "weight": boot.plan.weight_gb,
            "kvcache": round(2 * (boot.plan.k_gb + boot.plan.draft_k_gb), 2),
            "token_capacity": cfg.max_total_tokens,
            "graph": boot.plan.graph_gb,
        },
        time_scale=scale,
        internal_extra=_internal_extra(sa),
    )
    runner = web.AppRunner(make_app(state), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, sa["host"], sa["port"], reuse_address=True).start()
    except OSError as e:
        log.error(
            f"[Errno {e.errno}] error while attempting to bind on address ('{sa['host']}', {sa['port']}): "
            f"{(e.strerror or str(e)).lower()}"
        )
        raise SystemExit(1) from None
    log.info(f"INFO:     Started server process [{os.getpid()}]")
    log.info("INFO:     Waiting for application startup.")
    log.info("INFO:     Application startup complete.")
    log.info(f"INFO:     Uvicorn running on http://{sa['host']}:{sa['port']} (Press CTRL+C to quit)")
    engine_task = asyncio.create_task(engine.run())
    engine_task.add_done_callback(lambda t: _scheduler_died(t, log))
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[int] = loop.create_future()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda sig=sig: stopped.done() or stopped.set_result(sig))
    warm = asyncio.create_task(_warmup(state, boot))
    await asyncio.wait({warm, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if warm.done() and warm.exception():
        raise warm.exception()  # type: ignore[misc]  # a start-up crash: main() logs it and dies
    received = await stopped
    warm.cancel()
    state.status = "exiting"
    if received == signal.SIGINT:  # Ctrl+C in a terminal: uvicorn's quiet shutdown
        log.info("INFO:     Shutting down")
        engine_task.cancel()
        await runner.cleanup()
        return
    # SIGTERM to the process group (how draftbench stops servers) also kills SGLang's scheduler child
    log.warning("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    log.error(
        f"Subprocess scheduler_0 (pid={os.getpid() + 1}) crashed with exit code -15. Triggering SIGQUIT "
        "for cleanup..."
    )
    log.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    log.info("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
    await asyncio.sleep(5.0 * scale)
    engine_task.cancel()
    os.kill(os.getpid(), signal.SIGKILL)


def _scheduler_died(task: asyncio.Task, log: SimLog) -> None:
    """A bug in the scheduler loop: report it the way SGLang reports a scheduler crash, then die."""
    if task.cancelled() or task.exception() is None:
        return
    import traceback

    exc = task.exception()
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log.error("Scheduler hit an exception: " + text)
    log.error("Received sigquit from a child process. It usually means the child failed.")
    os.kill(os.getpid(), signal.SIGKILL)


async def _warmup(state: SimState, boot: Boot) -> None:
    """_execute_server_warmup: GET /model_info, then an 8-token greedy /generate; ready once it returned."""
    port = 40000 + os.getpid() % 20000
    await asyncio.sleep(1.0 * state.time_scale)  # the warm-up thread sleeps 1 s before its first probe
    state.log.access("127.0.0.1", port, "GET", "/model_info", 200)
    prompt = [1, *tokenize("The capital city of France is", state.engine.cfg.vocab_size)]
    if not boot.graphs and (crash := boot.fc_crash(len(prompt))):  # no capture: the first forward fails
        raise crash
    await boot.pause(0.25)  # the first forward JIT-compiles kernels while /health_generate answers 503
    req = state.engine.submit(Req(rid=uuid.uuid4().hex, prompt_ids=prompt, max_new_tokens=8, temperature=0.0))
    while not req.finished:
        await req.event.wait()
        req.event.clear()
    state.log.access("127.0.0.1", port + 2, "POST", "/generate", 200)
    state.status = "up"
    state.log.info("The server is fired up and ready to roll!")


def _internal_extra(sa: dict[str, Any]) -> dict[str, Any]:
    """Private ServerArgs attributes /server_info's internal_states carry (as in the captures)."""
    locked = []
    if sa["cuda_graph_max_bs_decode"] is not None:
        locked.append(["decode", "max_bs"])
    if sa["disable_prefill_cuda_graph"] or sa["disable_cuda_graph"]:
        locked.append(["prefill", "backend"])
    return {
        "_resolved_overrides": [
            ["_page_size_default", {"page_size": 1}],
            ["_data_parallelism_defaults", {"enable_dp_attention": False, "enable_dp_lm_head": False}],
            ["_speculative_moe_runner_default", {"speculative_moe_runner_backend": "auto"}],
        ],
        "enable_grpc": False,
        "grpc_port": 40000,
        "_quantization_explicitly_unset": False,
        "_cuda_graph_config_locked": locked,
        "_declarations_materialized": True,
        "_mx_config_cache": {},
    }


def _mfu_constants(sa: dict[str, Any], target: dict[str, Any]) -> tuple[float, float, float]:
    """Per-GPU FLOPs per token, weight bytes and KV bytes per token for the MFU estimates."""
    tp = max(1, sa["tp_size"])
    params = startup.param_count(target)
    return 2.0 * params / tp, params * 2.0 / tp, float(startup.kv_bytes_per_token(target, tp))
