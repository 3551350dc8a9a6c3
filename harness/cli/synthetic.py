"""`draftbench import-suite --synthetic`: long-context prompts in the target's own tokens, labelled synthetic
(harness.inputs.synthetic)."""

from __future__ import annotations

import argparse

from harness.common.errors import EXIT_OK, InputError, say


def _token_counts(value: str) -> list[int]:
    try:
        counts = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected comma-separated token counts like "
                                         f"4096,16384, got {value!r}") \
            from None
    if not counts or any(n <= 0 for n in counts):
        raise argparse.ArgumentTypeError(f"expected positive token counts, got {value!r}")
    return counts


def add_synthetic_args(imp: argparse.ArgumentParser) -> None:
    syn = imp.add_argument_group("synthetic long-context prompts (the context-length "
                                 "axis; labelled synthetic)")
    syn.add_argument("--synthetic", action="store_true", help="generate prompts instead of importing a file")
    syn.add_argument("--tokens", type=_token_counts, help="prompt lengths in the target's tokens: 4096,16384")
    syn.add_argument("--tokenizer", metavar="PATH", help="the target's tokenizer.json or model directory")
    syn.add_argument("--count", type=int, default=4, help="prompts per length (default 4)")
    syn.add_argument("--source", metavar="TEXT_FILE", help="real prose to cut documents from (default: "
                     "generated sentences)")


def synthetic_suite_command(args: argparse.Namespace, name: str) -> int:
    from harness.inputs.suites import write_suite_yaml
    from harness.inputs.synthetic import synthetic_suite

    if args.jsonl:
        raise InputError(None, None, "--synthetic",
                         f"generates its prompts: drop the file argument ({args.jsonl})")
    for flag, value in (("--tokens", args.tokens), ("--tokenizer", args.tokenizer)):
        if not value:
            raise InputError(None, None, flag,
                             "is needed with --synthetic (e.g. --tokens 4096,16384 --tokenizer "
                             "MODEL_DIR)")
    suite = synthetic_suite(args.tokens, args.tokenizer, count=args.count, name=name, source=args.source,
                            seed=args.seed)
    write_suite_yaml(suite, args.out)
    say(f"SYNTHETIC: {len(suite.prompts)} prompts ({args.count} each of {', '.join(map(str, args.tokens))} "
        f"tokens) -> {args.out}; check and run will warn that the suite is synthetic")
    return EXIT_OK
