"""draftbench regen / train / jobs: the retrain loop from the command line (thin shells over
harness.retrain)."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from pathlib import Path

from harness.cli.gate import add_no_check, gate
from harness.common.errors import EXIT_FAILURES, EXIT_INTERRUPTED, EXIT_OK, InputError, say

PROGRESS_EVERY_S = 2.0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    rg = sub.add_parser("regen",
                        help="regenerate training data: every user turn answered by the target itself")
    rg.add_argument("plan")
    rg.add_argument("--input", required=True, help="prompts: SpecForge {id, conversations} or ShareGPT JSONL")
    rg.add_argument("--output", required=True,
                    help="SpecForge JSONL to write (resumable; errors go to *_error.jsonl)")
    rg.add_argument("--concurrency", type=int, default=64)
    rg.add_argument("--endpoint", action="append", help="existing server or sglang-router URL (repeatable); "
                    "default: start the plan's baseline server")
    rg.add_argument("--workers", type=int, default=1, help="data-parallel servers of the target behind "
                    "sglang-router (each with its own GPUs from target.env CUDA_VISIBLE_DEVICES)")
    rg.add_argument("--max-tokens", type=int, default=2048)
    rg.add_argument("--temperature", type=float, default=0.7)
    rg.add_argument("--model")
    rg.add_argument("--reasoning", choices=["none", "save", "disable"], default="none")
    rg.add_argument("--retry-errors", action="store_true", help="try rows recorded as errors again")
    rg.add_argument("--request-timeout", type=float)
    rg.add_argument("--results-dir", default="results")
    add_no_check(rg)

    tr = sub.add_parser("train", help="launch a SpecForge EAGLE-3 training job on the plan's target")
    tr.add_argument("plan")
    tr.add_argument("--data", required=True, help="training JSONL on the target")
    tr.add_argument("--output-dir", required=True, help="checkpoint directory on the target")
    for flag, kind in (("--epochs", int), ("--lr", float), ("--max-length", int), ("--ttt-length", int),
                       ("--tp-size", int), ("--batch-size", int), ("--save-interval", int),
                       ("--log-interval", int), ("--max-steps", int), ("--nnodes", int), ("--node-rank", int),
                       ("--master-port", int)):
        tr.add_argument(flag, type=kind)
    for flag in ("--chat-template", "--draft-model-config", "--eval-data", "--report-to", "--specforge-dir",
                 "--python", "--run-id", "--gpus", "--master-addr"):
        tr.add_argument(flag)
    tr.add_argument("--launcher", help="command replacing torchrun + train script (split like a shell would; "
                    "{python} is substituted), e.g. for a cluster wrapper")
    tr.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="trainer environment")
    tr.add_argument("--era", choices=["auto", "script", "script-v0.1", "cli"], default="auto")
    tr.add_argument("--follow", action="store_true", help="stay and show progress until the job ends")
    tr.add_argument("--results-dir", default="results")

    jb = sub.add_parser("jobs", help="training jobs: list, follow, cancel, resume, checkpoints")
    jb.add_argument("action", nargs="?", default="list",
                    choices=["list", "follow", "cancel", "resume", "checkpoints"])
    jb.add_argument("job", nargs="?", help="job id (or a unique prefix)")
    jb.add_argument("--results-dir", default="results")


def handlers() -> dict:
    return {"regen": _regen, "train": _train, "jobs": _jobs}


def _plan(path: str, results_dir: str = "results"):
    from harness.cli.demo import load_ready_plan

    if not Path(path).exists():
        raise InputError(path, None, None, "plan file not found")
    return load_ready_plan(path, results_dir)


def _regen(args: argparse.Namespace) -> int:
    plan = _plan(args.plan, args.results_dir)
    if not Path(args.input).exists():
        raise InputError(args.input, None, None, "input file not found")
    from harness.retrain.regen import regen

    if not args.endpoint:  # it starts the plan's baseline server(s): their preflight first
        gate(plan, args.plan, args, variants=[plan.baseline.name])

    async def go() -> int:
        import signal

        task = asyncio.current_task()
        for sig in (signal.SIGTERM, signal.SIGHUP):  # a clean stop: the server started here is stopped
            asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
        last, final = 0.0, None
        async for p in regen(plan, args.input, args.output, concurrency=args.concurrency,
                             endpoints=args.endpoint, max_tokens=args.max_tokens,
                             temperature=args.temperature, model=args.model, reasoning=args.reasoning,
                             retry_errors=args.retry_errors, request_timeout_s=args.request_timeout,
                             results_dir=args.results_dir, workers=args.workers):
            final = p
            now = time.monotonic()
            if p.state != "running" or now - last >= PROGRESS_EVERY_S:
                last = now
                say(p.note())
        print(args.output)
        return EXIT_OK if final is None or not final.errors else EXIT_FAILURES

    try:
        return asyncio.run(go())
    except (KeyboardInterrupt, asyncio.CancelledError):
        say(f"interrupted: rows written so far are kept in {args.output}; run the same command to resume")
        return EXIT_INTERRUPTED


def _train(args: argparse.Namespace) -> int:
    from harness.retrain.jobs import launch_training
    from harness.retrain.train import parse_gpus, spec_from_plan
    from harness.targets import open_target

    plan = _plan(args.plan, args.results_dir)
    fields = {"data_path": args.data, "output_dir": args.output_dir, "era": args.era}
    for name, value in (("epochs", args.epochs), ("learning_rate", args.lr), ("max_length", args.max_length),
                        ("ttt_length", args.ttt_length), ("tp_size", args.tp_size),
                        ("batch_size", args.batch_size), ("save_interval", args.save_interval),
                        ("log_interval", args.log_interval), ("max_steps", args.max_steps),
                        ("chat_template", args.chat_template),
                        ("draft_model_config", args.draft_model_config), ("eval_data_path", args.eval_data),
                        ("report_to", args.report_to), ("specforge_dir", args.specforge_dir),
                        ("python", args.python), ("run_id", args.run_id), ("nnodes", args.nnodes),
                        ("node_rank", args.node_rank), ("master_addr", args.master_addr),
                        ("master_port", args.master_port)):
        if value is not None:
            fields[name] = value
    if args.gpus:
        fields["gpus"] = parse_gpus(args.gpus)
    if args.launcher:
        fields["launcher"] = shlex.split(args.launcher)
    if args.env:
        bad = [e for e in args.env if "=" not in e]
        if bad:
            raise InputError(None, None, "--env", f"expected KEY=VALUE, got {bad[0]!r}")
        fields["env"] = dict(e.split("=", 1) for e in args.env)
    spec = spec_from_plan(plan, **fields)

    async def go() -> int:
        target = open_target(plan.target.host, ssh_port=plan.target.ssh_port)
        await target.connect()
        try:
            job = await launch_training(target, spec, workdir=plan.target.workdir,
                                        results_dir=args.results_dir, ssh_port=plan.target.ssh_port)
            say(f"job {job.job_id} started ({job.era} era), pgid {job.pgid}, log {job.log_path}")
            print(job.job_id)
            if args.follow:
                return await _follow(target, job, args.results_dir)
            return EXIT_OK
        finally:
            await target.close()

    return asyncio.run(go())


async def _follow(target, job, results_dir: str) -> int:
    from harness.retrain.jobs import follow_job

    last, state = 0.0, None
    async for p in follow_job(target, job, results_dir=results_dir):
        state = p
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S or p.state != "running":
            last = now
            say(_progress_line(p))
    return EXIT_OK if state is None or state.state in ("finished", "running") else EXIT_FAILURES


def _progress_line(p) -> str:
    def f(v, spec):
        return "-" if v is None else spec.format(v)

    eta = "-" if p.eta_s is None else time.strftime("%H:%M:%S", time.gmtime(p.eta_s))
    return (f"[{p.job_id}] {p.state} epoch {f(p.epoch, '{}')}/{f(p.num_epochs, '{}')} step "
            f"{f(p.global_step, '{}')}/{f(p.total_steps, '{}')} loss {f(p.loss, '{:.3f}')} acc "
            f"{f(p.acc, '{:.3f}')} accept rate {f(p.acceptance_rate, '{:.3f}')} eta {eta} "
            f"checkpoints {len(p.checkpoints)}")


def _jobs(args: argparse.Namespace) -> int:
    from harness.retrain import jobs as J

    if args.action == "list":
        rows = asyncio.run(J.refresh_jobs(args.results_dir))
        for j in rows:
            print(f"{j.job_id}\t{j.state}\t{j.era}\t{j.target}\t{j.output_dir}\t{j.created_at}")
        if not rows:
            say(f"no training jobs under {args.results_dir}/jobs")
        return EXIT_OK
    if not args.job:
        raise InputError(None, None, "job", f"`draftbench jobs {args.action}` needs a job id")
    job = J.load_job(args.job, args.results_dir)

    async def go() -> int:
        target = J.open_job_target(job)
        await target.connect()
        try:
            if args.action == "follow":
                return await _follow(target, job, args.results_dir)
            if args.action == "cancel":
                done = await J.cancel_job(target, job, args.results_dir)
                say(f"job {done.job_id}: {done.state}")
                return EXIT_OK
            if args.action == "resume":
                again = await J.resume_job(target, job, args.results_dir)
                say(f"job {again.job_id} resumed, pgid {again.pgid}")
                return EXIT_OK
            from harness.retrain.checkpoints import discover_checkpoints

            for c in await discover_checkpoints(target, job.output_dir):
                print(f"{c.label}\t{c.path}" + ("\t(needs export)" if c.needs_export else ""))
            return EXIT_OK
        finally:
            await target.close()

    return asyncio.run(go())
