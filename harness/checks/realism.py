"""Prompt-realism guards: what makes a measured accept length unlike the one the deployment will see.

Before the run (`draftbench check`, and the run's own start as alarms):
  prompts-without-chat-template  run.endpoint is completions: every prompt goes out as raw text, never through
                                 the model's chat template (sglang PR #4247: accept length 5.36 raw against
                                 6.13 templated; vllm #25916);
  synthetic-suite                a suite of generated prompts (marked `synthetic`, or random tokens, or filler
                                 that repeats itself): acceptance on it is not real traffic's (InferenceX
                                 #1230/#1630: random prompts regress the accept rate; SPEED-Bench: synthetic
                                 inputs overestimate throughput);
  categories-not-in-training     none of the suites' categories is among those the drafter was trained on
                                 (the drafter's `training_categories`, or the categories of its SpecForge data
                                 file `training_data_file`, when known); some missing: a note;
  sampling-suggested             the model's generation_config.json recommends a sampler no arm measures.
After it (the run's end, from summary.csv; `check`: from the newest earlier run in its results directory):
  accept-far-from-training       a drafter's measured accept length more than 25 % away from the accept length
                                 it reached at training time (`training_accept_len`), either way.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common.events import Alarm
from harness.common.findings import PLAN_WIDE, Finding, info, warning
from harness.inputs.sampling import SamplingArm, arm_yaml, suggested_arm

if TYPE_CHECKING:
    import pandas as pd

    from harness.inputs.config import Plan
    from harness.inputs.plan_parts import Drafter
    from harness.inputs.suites import Suite

FAR_FROM_TRAINING = 0.25  # measured accept length off the training-time one by more than this share
FILLER_RATIO = 0.12  # zlib output / input below this on a long prompt: it repeats itself
MIN_WORDS = 200  # heuristics only judge prompts at least this long
COMMON_WORDS = frozenset(
    # function words of English, French, German, Spanish, Italian and Portuguese, and common code keywords:
    # real text in these languages or code has several percent of them; random tokens have almost none
    "the of and to a in is that for it as with was on be by this are or from at an not but have you "
    "le la les de des et un une est que qui dans pour pas sur du au "
    "der die das und ist nicht ein eine zu den mit von sich auf "
    "el los las y en que por con para una es del "
    "il di che e per non con una sono "
    "o os as um uma do da em para com não "
    "def return if else for while import from class function const let var int self public void end "
    "true false null none".split())
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def synthetic_reason(suite: Suite) -> str | None:
    """Why a suite looks synthetic, or None: marked so, random tokens, or generated filler."""
    if suite.synthetic:
        return "it is marked synthetic (generated prompts, e.g. draftbench import-suite --synthetic)"
    for prompt in suite.prompts:
        text = "\n".join(m["content"] for m in prompt.chat_messages() if m["role"] == "user")
        words = _WORD.findall(text.lower())
        if len(words) < MIN_WORDS:
            continue
        raw = text.encode("utf-8")
        if len(zlib.compress(raw, 6)) / len(raw) < FILLER_RATIO:
            return f"prompt {prompt.id!r} repeats itself (generated filler: it compresses to under " \
                   f"{FILLER_RATIO:.0%} of its size)"
        common = sum(w in COMMON_WORDS for w in words) / len(words)
        if common < 0.02:
            return f"prompt {prompt.id!r} reads as random tokens ({common:.1%} of its words are common " \
                   "function words, against several percent in real text or code)"
    return None


def training_categories(drafter: Drafter, base: Path | None = None) -> set[str] | None:
    """The categories a drafter was trained on, where known: its `training_categories`, else the `category`
    values of its `training_data_file` (SpecForge JSONL, on this machine); None when unknown."""
    named = drafter.training_categories
    if named:
        return set(named)
    path = drafter.training_data_file
    if not path:
        return None
    p = Path(path).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    cats: set[str] = set()
    try:
        with p.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("category"), str) and row["category"]:
                    cats.add(row["category"])
    except OSError:
        return None
    return cats or None


def plan_findings(plan: Plan, generation_config: dict[str, Any] | None = None) -> list[Finding]:
    """The realism findings of a plan (module doc), before anything runs."""
    out: list[Finding] = []
    if plan.run.endpoint == "completions":
        chats = sum(p.messages is not None for s in plan.suites for p in s.prompts)
        flat = f"; {chats} chat prompts are flattened to their text" if chats else ""
        out.append(warning(
            PLAN_WIDE, "prompts-without-chat-template", "prompts go out without the model's chat template",
            "run.endpoint is completions: every prompt is sent as raw text and the server applies no chat "
            f"template{flat}; drafters are trained on templated chats and accept less on raw text (sglang PR "
            "#4247: accept length 5.36 raw against 6.13 templated)",
            "run.endpoint: chat (the default), unless raw completions are what the deployment serves"))
    for suite in plan.suites:
        why = synthetic_reason(suite)
        if why:
            out.append(warning(
                PLAN_WIDE, "synthetic-suite", f"suite '{suite.name}' is synthetic", why + "; acceptance and "
                "throughput on generated prompts are not real traffic's (random prompts regress the accept "
                "rate: InferenceX #1230; synthetic inputs overestimate throughput: SPEED-Bench)",
                "measure accept length and speedup on real prompts (import-suite: SPEED-Bench, ShareGPT, "
                "MT-bench); keep synthetic suites for the context-length axis, labelled as they are"))
    out += _category_findings(plan)
    arm = suggested_arm(generation_config)
    measured = {_sampler(v.sampling, plan.run.temperature) for v in plan.variants}
    if arm is not None and _sampler(arm, 0.0) not in measured:
        arms = list(plan.run.sampling)
        listed = ", ".join(arm_yaml(a) for a in arms) if arms \
            else f"{{temperature: {plan.run.temperature:g}}}"
        out.append(info(
            PLAN_WIDE, "sampling-suggested", f"the model recommends sampling at {arm_yaml(arm)}",
            "its generation_config.json; acceptance at the sampler the deployment uses differs from greedy's",
            f"measure it as an arm: run.sampling: [{listed}, {arm_yaml(arm)}]"))
    return out


def _sampler(arm: SamplingArm | None, temperature: float) -> tuple[float, float]:
    """What an arm samples with, whatever its label: (temperature, top_p)."""
    if arm is None:
        return float(temperature), 1.0
    return float(arm.temperature), float(arm.top_p if arm.top_p is not None else 1.0)


def _category_findings(plan: Plan) -> list[Finding]:
    out: list[Finding] = []
    suite_cats = {p.category for s in plan.suites for p in s.prompts}
    base = plan.source_path.parent if plan.source_path is not None else None
    seen: set[str] = set()
    for v in plan.variants:
        d = v.drafter
        if d is None or not v.spec_algorithm or d.name in seen:
            continue
        seen.add(d.name)
        trained = training_categories(d, base)
        if not trained:
            continue
        both, missing = suite_cats & trained, sorted(suite_cats - trained)
        if not both:
            out.append(warning(
                v.name, "categories-not-in-training", f"no suite category is one drafter '{d.name}' was "
                "trained on", f"suites: {', '.join(sorted(suite_cats))}; trained on: "
                f"{', '.join(sorted(trained))}; a drafter accepts less on what it never saw, so this accept "
                "length says little about the traffic it was trained for", "add prompts of the trained "
                "categories, or retrain the drafter on this traffic (draftbench regen and train)"))
        elif missing:
            out.append(info(
                v.name, "categories-not-in-training", f"drafter '{d.name}' was not trained on "
                f"{', '.join(missing)}", f"trained on: {', '.join(sorted(trained))}; expect lower acceptance "
                "in those categories (summary_by_category.csv)"))
    return out


def realism_alarms(plan: Plan) -> list[Alarm]:
    """The pre-run guards (no target facts) as the run's alarms at its start, so the run warns too."""
    return [Alarm("" if f.variant == PLAN_WIDE else f.variant, f.severity, f.code, f"{f.what}: {f.why}")
            for f in plan_findings(plan) if f.severity in ("warning", "error")]


def training_gap(trained: float, got: float) -> str | None:
    """`got` against the training-time accept length, in words, where it is more than FAR_FROM_TRAINING
    off."""
    if abs(got / float(trained) - 1.0) <= FAR_FROM_TRAINING:
        return None
    way = "below" if got < trained else "above"
    return f"accept length {got:.2f} is {abs(got / trained - 1):.0%} {way} the {trained:.2f}"


def training_findings(plan: Plan, measured: dict[str, tuple[str, str, float]]) -> list[Finding]:
    """`check`'s accept-far-from-training: a drafter's accept length in the newest earlier run that measured
    it (`measured`: drafter name -> (run id, variant, accept length)) far from its training-time one."""
    out: list[Finding] = []
    for v in plan.variants:
        d = v.drafter
        if d is None or not d.training_accept_len or d.name not in measured:
            continue
        run_id, variant, got = measured.pop(d.name)
        gap = training_gap(d.training_accept_len, got)
        if gap:
            out.append(warning(v.name, "accept-far-from-training", f"drafter '{d.name}': {gap} it reached at "
                               "training time", f"measured in run {run_id} ({variant}); " + _GAP_WHY,
                               "compare the prompts, chat template and sampler with the training data's, and "
                               "the serving flags (draftbench check's other findings)"))
    return out


_GAP_WHY = ("the prompts, their template or sampler, or the serving setup differ from training (a wrong flag "
            "or aux layers read near 1.0)")


def training_alarms(plan: Plan, summary: pd.DataFrame | None) -> list[Alarm]:
    """accept-far-from-training: a speculative row whose accept length is more than FAR_FROM_TRAINING off
    its drafter's training-time accept length (once per variant)."""
    import pandas as pd

    if summary is None or len(summary) == 0 or "accept_len" not in summary:
        return []
    out: list[Alarm] = []
    fired: set[str] = set()
    for v in plan.variants:
        trained = v.drafter.training_accept_len if v.drafter is not None else None
        if not trained or v.name in fired:
            continue
        rows = summary[summary["variant"].astype(str) == v.name]
        al = pd.to_numeric(rows["accept_len"], errors="coerce").dropna()
        if al.empty:
            continue
        gap = training_gap(trained, float(al.mean()))
        if gap:
            fired.add(v.name)
            out.append(Alarm(v.name, "warning", "accept-far-from-training",
                             f"{gap} drafter '{v.drafter.name}' reached at training time: {_GAP_WHY}"))
    return out
