"""The plan file: typed models, `load_plan` (drafter and suite names resolved by harness.inputs.resolver).

A plan says where SGLang runs (target), what it serves (model, server), which arms to compare
(variants: one baseline and speculative ones), which prompts (suites) and how to replay (run).
Values are never shell-checked here: paths and names may contain spaces or metacharacters, and
every command built from them is quoted where it is built.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from harness.inputs.endpoints import parse_endpoint
from harness.inputs.engine_options import ENGINE_OPTIONS
from harness.inputs.plan_parts import (
    ENV_NAME_RE,
    NEEDS_DRAFTER,
    SPEC_PARAMS,
    Algorithm,
    Drafter,
    Engine,
    FileName,
    Model,
    Server,
    Target,
    check_env_names,
    upgrade_target,
)
from harness.inputs.resolver import (  # noqa: F401  (all but Resolver: read from here by others)
    REPO_ROOT,
    Resolver,
    data_dir,
    load_drafter,
    user_dir,
)
from harness.inputs.run_settings import RunSettings
from harness.inputs.sampling import SamplingArm, expand
from harness.inputs.suites import Suite
from harness.inputs.yamlio import ArgStr, FieldProblem, StrictModel, load_yaml, refuse_nul, validate

EXPECT_CODE_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


class Variant(StrictModel):
    """One arm of the comparison: the baseline (no speculation) or a speculative configuration."""

    name: FileName = Field(description="unique; becomes part of file names")
    engine: Engine | None = Field(
        default=None, description="serving engine of this arm (default: the plan's `engine`)"
    )
    baseline: bool | None = Field(
        default=None, description="mark the baseline when several arms do not speculate"
    )
    drafter: Drafter | None = Field(
        default=None, description="a name from drafters/ or a path to a drafter YAML (resolved on load)"
    )
    algorithm: Algorithm | None = Field(
        default=None, description="speculative algorithm (default: the drafter's)"
    )
    num_steps: int | None = Field(default=None, gt=0, description="--speculative-num-steps")
    eagle_topk: int | None = Field(default=None, gt=0, description="--speculative-eagle-topk")
    num_draft_tokens: int | None = Field(default=None, gt=0, description="--speculative-num-draft-tokens")
    cuda_graph: bool = Field(default=True, description="false adds --disable-cuda-graph")
    endpoint: str | None = Field(
        default=None, description="an already running server (http://host:port, as seen from the target) to "
        "measure instead of starting one; its settings are read from /get_server_info; never stopped")
    api_key_env: str | None = Field(
        default=None,
        description="environment variable with this arm's API key (default: server.api_key_env)")
    extra_args: list[ArgStr] = Field(
        default_factory=list, description="launch_server argv items for this arm"
    )
    env: dict[str, ArgStr] = Field(
        default_factory=dict, description="environment for this arm's server process, over target.env"
    )
    sampling: SamplingArm | None = Field(
        default=None, description="the sampler this arm is measured at (run.sampling gives every variant one "
        "per arm, named <name>-<arm>); unset: run.temperature")
    expect: list[str] = Field(
        default_factory=list, description="findings this arm is meant to show (a deliberately wrong arm, as "
        "in the demo): a preflight finding's code or the live alarm it leads to (`drafter-inert`); "
        "`draftbench check` and the preflight of `run` report such a finding as a note, not an error, and "
        "the arm runs")

    _env_names = field_validator("env")(check_env_names)

    @field_validator("expect", mode="before")
    @classmethod
    def _expect_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("expect")
    @classmethod
    def _expect_codes(cls, value: list[str]) -> list[str]:
        for code in value:
            if not EXPECT_CODE_RE.fullmatch(code):
                raise ValueError(f"{code!r} is not a finding or alarm code (lowercase words joined by '-')")
        return value

    @field_validator("drafter", mode="before")
    @classmethod
    def _resolve_drafter(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            return _resolver(info).drafter(value)
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            parse_endpoint(value)  # ValueError names the problem
        return value

    @field_validator("api_key_env")
    @classmethod
    def _key_env(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Variant:
        given = [p for p in SPEC_PARAMS if getattr(self, p) is not None]
        if not self.is_speculative:
            if given:
                raise FieldProblem(
                    f"{given[0]} is set but the variant has no drafter or algorithm", (given[0],)
                )
            return self
        if self.baseline:
            raise FieldProblem(
                "a baseline cannot speculate (it has a drafter or an algorithm)", ("baseline",)
            )
        if given and len(given) < len(SPEC_PARAMS):
            missing = [p for p in SPEC_PARAMS if p not in given]
            raise FieldProblem(
                f"set all of {', '.join(SPEC_PARAMS)} or none; missing {', '.join(missing)} "
                "(SGLang asserts the others are unset when it chooses them itself)",
                (given[0],),
            )
        if self.drafter is None and self.spec_algorithm in NEEDS_DRAFTER and self.endpoint is None:
            raise FieldProblem(f"{self.spec_algorithm} needs a drafter", ("algorithm",))
        return self

    @property
    def is_speculative(self) -> bool:
        return self.drafter is not None or self.algorithm is not None

    @property
    def is_existing(self) -> bool:
        """True when the arm is a server draftbench did not start (`endpoint`)."""
        return self.endpoint is not None

    @property
    def is_baseline(self) -> bool:
        return self.baseline if self.baseline is not None else not self.is_speculative

    @property
    def spec_algorithm(self) -> str | None:
        """The --speculative-algorithm value (upper case), None for a non-speculative arm."""
        if self.algorithm is not None:
            return self.algorithm
        return self.drafter.algorithm if self.drafter is not None else None


class Plan(StrictModel):
    """A whole comparison. Load with `load_plan`; drafters and suites arrive resolved."""

    name: str = Field(min_length=1, description="names the run (slugged into the run directory's name)")
    description: str = Field(default="", description="free text shown with the results")
    engine: Engine = Field(default="sglang", description="serving engine of every variant without its own")
    target: Target = Field(default_factory=Target, description="where SGLang runs")
    targets: list[Target] = Field(
        default_factory=list,
        description="several nodes measured at once (each an ssh destination, 'local', or a target mapping "
        "whose unset fields come from `target`): variants are spread over them and every node measures its "
        "own baseline",
    )
    model: Model = Field(description="the served target model")
    server: Server = Field(default_factory=Server, description="server settings shared by all variants")
    variants: list[Variant] = Field(min_length=1, description="exactly one baseline plus speculative arms")
    suites: list[Suite] = Field(min_length=1, description="names in suites/ or paths to suite YAML files")
    run: RunSettings = Field(default_factory=RunSettings, description="replay settings")

    _source_path: Path | None = PrivateAttr(default=None)

    @field_validator("targets", mode="before")
    @classmethod
    def _node_destinations(cls, value: object) -> object:
        if isinstance(value, list):
            return [{"host": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("suites", mode="before")
    @classmethod
    def _resolve_suites(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, list):
            return value
        out = []
        for i, item in enumerate(value):
            if isinstance(item, str):
                try:
                    item = _resolver(info).suite(item)
                except ValueError as exc:
                    raise FieldProblem(str(exc), (i,)) from None
            out.append(item)
        return out

    @model_validator(mode="after")
    def _cross_checks(self) -> Plan:
        arms = self.run.sampling
        if arms and any(v.sampling is None for v in self.variants):
            self.variants = expand(self.variants, arms)  # one variant per (variant, arm): idempotent
            names = [v.name.lower() for v in self.variants]
            twice = next((n for n in names if names.count(n) > 1), None)
            if twice is not None:
                raise FieldProblem(f"variant name {twice!r} twice once every variant has one per arm: rename "
                                   "the variant or name the arm", ("run", "sampling"))
        seen: dict[str, int] = {}
        for i, variant in enumerate(self.variants):
            key = variant.name.lower()  # case-insensitive: they become file names on any file system
            if key in seen:
                raise FieldProblem(
                    f"duplicate variant name {variant.name!r} (also variants[{seen[key]}])",
                    ("variants", i, "name"),
                )
            seen[key] = i
        for variant in self.variants:
            if variant.engine is None:
                variant.engine = self.engine  # each arm names its engine from here on
        # one baseline per engine (and sampling arm: each arm is paired with the baseline at its sampler)
        for engine, arm in dict.fromkeys((v.engine, _arm(v)) for v in self.variants):
            of = "" if len({v.engine for v in self.variants}) == 1 else f" for engine {engine}"
            of += f" at sampling {arm}" if arm else ""
            baselines = [i for i, v in enumerate(self.variants)
                         if v.is_baseline and v.engine == engine and _arm(v) == arm]
            if not baselines:
                raise FieldProblem(
                    f"no baseline{of}: add a variant without drafter or algorithm (e.g. '- name: baseline')",
                    ("variants",),
                )
            if len(baselines) > 1:
                names = ", ".join(repr(self.variants[i].name) for i in baselines)
                raise FieldProblem(
                    f"more than one baseline{of} ({names}); mark the reference with 'baseline: true' "
                    "and the others with 'baseline: false'",
                    ("variants", baselines[1]),
                )
        suite_seen: dict[str, int] = {}
        for i, suite in enumerate(self.suites):
            if suite.name in suite_seen:
                raise FieldProblem(f"suite {suite.name!r} is listed twice", ("suites", i))
            suite_seen[suite.name] = i
        node_seen: dict[str, int] = {}
        for i, node in enumerate(self.targets):
            key = f"{node.host}:{node.ssh_port or ''}"
            if key in node_seen:
                raise FieldProblem(f"target {node.host!r} is listed twice (also targets[{node_seen[key]}])",
                                   ("targets", i))
            node_seen[key] = i
        return self

    @property
    def baseline(self) -> Variant:
        """The baseline of the plan's own engine (the first baseline when no variant uses it)."""
        base = [v for v in self.variants if v.is_baseline]
        return next((v for v in base if v.engine == self.engine), base[0])

    def node_targets(self) -> list[Target]:
        """The nodes of the plan: `targets` with `target`'s settings filled in, or just `target`."""
        if not self.targets:
            return [self.target]
        shared = self.target.model_dump()
        out = []
        for t in self.targets:
            own = t.model_dump(exclude_unset=True)
            for engine in ENGINE_OPTIONS:  # a node's engine options fill in field by field
                if engine in own:
                    own[engine] = {**shared[engine], **own[engine]}
            out.append(Target.model_validate({**shared, **own}))
        return out

    def baseline_of(self, variant: Variant) -> Variant:
        """The baseline a variant is compared with: the one of its own engine."""
        return next(v for v in self.variants if v.is_baseline and v.engine == variant.engine
                    and _arm(v) == _arm(variant))

    @property
    def source_path(self) -> Path | None:
        """The plan file this was loaded from (None when built in code)."""
        return self._source_path

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def resolved_dict(self) -> dict[str, Any]:
        """The plan with drafters and suites inlined; `Plan.model_validate` reads it back as is."""
        return self.model_dump(mode="json")


def _arm(variant: Variant) -> str | None:
    return variant.sampling.label if variant.sampling is not None else None


def upgraded_plan(data: dict[str, Any]) -> dict[str, Any]:
    """A plan dict (a run's plan.resolved.json) with the target's old engine keys moved where they live now,
    so that it compares key by key with a plan loaded today; validation does the same by itself."""
    def upgraded(target: object) -> object:
        try:
            return upgrade_target(target)
        except FieldProblem:  # old and new key both given: left for validation to report
            return target

    data = dict(data)
    if "target" in data:
        data["target"] = upgraded(data["target"])
    if isinstance(data.get("targets"), list):
        data["targets"] = [upgraded(t) for t in data["targets"]]
    return data


def _resolver(info: ValidationInfo) -> Resolver:
    found = (info.context or {}).get("resolver")
    return found if isinstance(found, Resolver) else Resolver()


def load_plan(path: str | Path) -> Plan:
    """Load a plan, resolving drafter and suite names (see `Resolver.search_dirs` for the order)."""
    source = Path(path)
    data, lines = load_yaml(source)
    refuse_nul(data, lines, str(source))
    resolver = Resolver(plan_dir=source.parent)
    plan = validate(Plan, data, source, lines, context={"resolver": resolver})
    plan._source_path = source
    return plan
