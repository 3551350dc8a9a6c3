"""Import what `vllm serve` imports for a Llama target with an EAGLE-3 head on the Triton attention backend,
and say which distributions that loaded (docs/vllm.md, "Real vLLM on the H200").

  python import_check.py [--json FILE] [--parser FILE]

Run on the H200 machine by `vllm.sh install` (and here, without a GPU, against a copy of the image's
packages, to find the lean set). Exit 0 when every module imported; else 1, with each failure. --parser
writes `vllm serve`'s argument parser as JSON (every option string, dest, nargs, choices), the same capture
harness/engines/vllm/serve_args.py holds for the release.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from importlib import metadata

# the serve path: CLI and API server, engine core and its GPU worker, the model and its EAGLE-3 head, the
# EAGLE proposer, the Triton attention backend, sampling, structured output, metrics, the tokenizer layer
MODULES = (
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve",
    "vllm.entrypoints.openai.api_server",
    "vllm.entrypoints.openai.chat_completion.serving",
    "vllm.entrypoints.openai.completion.serving",
    "vllm.engine.arg_utils",
    "vllm.config.speculative",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.engine.core_client",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.model_executor.model_loader",
    "vllm.model_executor.model_loader.dummy_loader",
    "vllm.model_executor.models.llama",
    "vllm.model_executor.models.llama_eagle3",
    "vllm.v1.spec_decode.eagle",
    "vllm.v1.spec_decode.metrics",
    "vllm.v1.attention.backends.triton_attn",
    "vllm.v1.sample.sampler",
    "vllm.v1.sample.rejection_sampler",
    "vllm.v1.structured_output",
    "vllm.v1.metrics.loggers",
    "vllm.tokenizers",
    "vllm.transformers_utils.config",
    "vllm.compilation.backends",
    "vllm._custom_ops",
)


def distributions() -> dict[str, str]:
    """name -> version of every distribution whose top-level module is loaded now."""
    owners = metadata.packages_distributions()
    out: dict[str, str] = {}
    for mod in list(sys.modules):
        top = mod.split(".")[0]
        for dist in owners.get(top, []):
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                pass
    return dict(sorted(out.items(), key=lambda kv: kv[0].lower()))


def as_h200() -> None:
    """Without a GPU (here, finding the lean set): vLLM's CUDA platform, answering as one H200 does. Needs a
    libcuda.so.1 that loads (vllm.sh's rehearsal builds a stub) and torch's CUDA build."""
    import torch
    import vllm.platforms
    from vllm.platforms.cuda import CudaPlatform
    from vllm.platforms.interface import DeviceCapability

    CudaPlatform.get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(9, 0))
    CudaPlatform.get_device_name = classmethod(lambda cls, device_id=0: "NVIDIA H200")
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    vllm.platforms._current_platform = CudaPlatform()


def parser_capture() -> list[dict]:
    """`vllm serve`'s own parser, as data: one row per option."""
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    p = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    rows = []
    for a in p._actions:
        rows.append({"options": list(a.option_strings), "dest": a.dest, "nargs": a.nargs,
                     "action": type(a).__name__,
                     "choices": sorted(map(str, a.choices)) if a.choices else None,
                     "type": getattr(a.type, "__name__", repr(a.type)) if a.type else None,
                     "default": repr(a.default)[:200]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--parser", help="write vllm serve's parser here")
    ap.add_argument("--as-cuda", action="store_true",
                    help="without a GPU: take vLLM's CUDA platform anyway (what the H200 machine detects)")
    a = ap.parse_args(argv)
    failed: dict[str, str] = {}
    t0 = time.time()
    if a.as_cuda:
        as_h200()
    for m in MODULES:
        try:
            importlib.import_module(m)
        except BaseException as exc:  # a missing package, or an extension that will not load
            failed[m] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(limit=-3)
    if not failed:  # the routers build_app imports as it runs (dev mode's too), as `vllm serve` builds it
        try:
            os.environ.setdefault("VLLM_SERVER_DEV_MODE", "1")
            from vllm.entrypoints.openai.api_server import build_app
            from vllm.entrypoints.openai.cli_args import make_arg_parser
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(["tiny-target"])
            build_app(args, ("generate",))
        except BaseException as exc:
            failed["build_app"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(limit=-3)
    seconds = round(time.time() - t0, 1)
    report = {"seconds": seconds, "failed": failed, "distributions": distributions()}
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(report, fh, indent=1)
    if a.parser and "vllm.engine.arg_utils" not in failed:
        with open(a.parser, "w") as fh:
            json.dump(parser_capture(), fh, indent=1)
    print(f"[import_check] {len(MODULES) + 1 - len(failed)}/{len(MODULES) + 1} modules and build_app "
          f"in {seconds}s; "
          f"{len(report['distributions'])} distributions loaded")
    for m, err in failed.items():
        print(f"[import_check] FAILED {m}: {err}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
