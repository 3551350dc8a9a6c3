"""The plan and drafter files: typed models, drafter/suite name resolution, `load_plan`.

A plan says where SGLang runs (target), what it serves (model, server), which arms to compare
(variants: one baseline and speculative ones), which prompts (suites) and how to replay (run).
Values are never shell-checked here: paths and names may contain spaces or metacharacters, and
every command built from them is quoted where it is built.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

import harness
from harness.inputs.run_settings import RunSettings
from harness.inputs.suites import Suite, load_suite
from harness.inputs.yamlio import ArgStr, FieldProblem, StrictModel, load_yaml, validate

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH")
# SGLang loads the target itself as the draft without a path (EAGLE3 then crashes; DFLASH refuses).
NEEDS_DRAFTER = frozenset({"EAGLE3", "STANDALONE", "DFLASH"})
SPEC_PARAMS = ("num_steps", "eagle_topk", "num_draft_tokens")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # names that become file names: no "..", no "/"
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
VERSION_RE = re.compile(r"auto|\d+(\.\d+){1,3}([.-]?(post|rc|dev)\d*)?")
REPO_ROOT = Path(harness.__file__).resolve().parent.parent
PACKAGED_DATA = Path(harness.__file__).resolve().parent / "_data"  # plans/, suites/, drafters/ inside a wheel


def data_dir(kind: str) -> Path:
    """The built-in `kind` directory ("plans", "suites", "drafters"): a wheel's copy, else the checkout's."""
    packaged = PACKAGED_DATA / kind
    return packaged if packaged.is_dir() else REPO_ROOT / kind


def _algorithm(value: Any) -> Any:
    if isinstance(value, str):
        upper = value.strip().upper()
        if upper not in ALGORITHMS:
            raise ValueError(f"unknown speculative algorithm {value!r}; one of {', '.join(ALGORITHMS)}")
        return upper
    return value


def _port(value: Any) -> Any:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535):
        return value
    raise ValueError(f"must be a port number from 1 to 65535 or 'auto', got {value!r}")


def _file_name(value: Any) -> Any:
    if isinstance(value, str) and not NAME_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a valid name: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (it becomes a file name)"
        )
    return value


Algorithm = Annotated[str, BeforeValidator(_algorithm)]
Port = Annotated[int | Literal["auto"], BeforeValidator(_port)]
FileName = Annotated[str, BeforeValidator(_file_name)]
Engine = Literal["sglang", "vllm"]  # harness.engines.ENGINE_NAMES (a test keeps them equal)


class Drafter(StrictModel):
    """A draft checkpoint (one file in drafters/)."""

    name: str = Field(min_length=1, description="label in tables (defaults to the file name)")
    path: str = Field(
        min_length=1,
        description="checkpoint directory (or HF id) on the target; relative = under target.workdir",
    )
    algorithm: Algorithm = Field(
        default="EAGLE3", description="speculative algorithm the checkpoint is built for"
    )
    trained_for: str | None = Field(default=None, description="the target model it was trained against")
    training_data: str | None = Field(default=None, description="what it was trained on, for the record")
    notes: str | None = Field(default=None, description="anything else worth knowing")


class Target(StrictModel):
    """Where SGLang runs."""

    host: str = Field(
        default="local",
        min_length=1,
        description="'local' or an ssh destination as for `ssh` (alias, user@host)",
    )
    ssh_port: int | None = Field(
        default=None, ge=1, le=65535, description="overrides the port from ~/.ssh/config"
    )
    python: str = Field(default="python3", min_length=1, description="python interpreter on the target")
    launcher: list[ArgStr] | None = Field(
        default=None,
        min_length=1,
        description="argv prefix replacing [python, -m, sglang.launch_server]; '{python}' is substituted",
    )
    workdir: str = Field(
        default="~/draftbench", min_length=1, description="work directory on the target (created mode 0700)"
    )
    env: dict[str, ArgStr] = Field(default_factory=dict, description="environment for the server process")
    sglang_version: str = Field(
        default="auto", description="'auto' (asked on the target) or e.g. '0.5.15'; decides flag spellings"
    )
    simulated: bool = Field(default=False, description="true when the launcher is draftbench's stand-in")
    vllm_launcher: list[ArgStr] | None = Field(
        default=None,
        min_length=1,
        description="argv prefix replacing [vllm, serve] for vLLM variants; '{python}' is substituted",
    )
    vllm_version: str = Field(
        default="auto", description="'auto' (asked on the target) or e.g. '0.33.0'; decides vLLM flag spellings"
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not ENV_NAME_RE.fullmatch(name):
                raise FieldProblem(f"{name!r} is not an environment variable name", (name,))
        return env

    @field_validator("sglang_version", "vllm_version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not VERSION_RE.fullmatch(value):
            raise ValueError(
                f"expected 'auto' or a version such as '0.5.15' or '0.5.15.post1', got {value!r}"
            )
        return value

    @property
    def is_local(self) -> bool:
        return self.host == "local"


class Model(StrictModel):
    """The target model the server serves (same for every variant)."""

    path: str = Field(
        min_length=1, description="model directory (or HF id) on the target; relative = under workdir"
    )
    tp_size: int = Field(default=1, gt=0, description="tensor-parallel size (GPUs per server)")
    trust_remote_code: bool = Field(default=False, description="pass --trust-remote-code")
    served_model_name: str | None = Field(
        default=None, min_length=1, description="name the API serves it under"
    )
    extra_args: list[ArgStr] = Field(default_factory=list, description="launch_server argv items, verbatim")


class Server(StrictModel):
    """Server settings shared by every variant."""

    host: str = Field(default="127.0.0.1", min_length=1, description="bind address on the target")
    port: Port = Field(default="auto", description="a port number, or 'auto' for a free one")
    max_running_requests: int = Field(default=32, gt=0, description="explicit so both arms get the same cap")
    decode_log_interval: int = Field(default=10, ge=1, description="decode iterations per log window")
    mem_fraction_static: float | None = Field(
        default=None, gt=0, lt=1, description="KV-cache memory fraction"
    )
    cuda_graph_max_bs: int | None = Field(
        default=None, gt=0, description="largest batch captured in CUDA graphs"
    )
    startup_timeout_s: float = Field(default=1800, gt=0, description="how long to wait for /health")
    keep_running: bool = Field(default=False, description="leave servers up after the run")
    api_key_env: str | None = Field(
        default=None, description="environment variable (on this machine) holding the servers' API key: "
        "started servers get --api-key, every call sends it as a bearer token; never written to disk")

    @field_validator("api_key_env")
    @classmethod
    def _key_env(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value


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
        default=None, description="environment variable with this arm's API key (default: server.api_key_env)")
    extra_args: list[ArgStr] = Field(
        default_factory=list, description="launch_server argv items for this arm"
    )
    env: dict[str, ArgStr] = Field(
        default_factory=dict, description="environment for this arm's server process, over target.env"
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not ENV_NAME_RE.fullmatch(name):
                raise FieldProblem(f"{name!r} is not an environment variable name", (name,))
        return env

    @field_validator("drafter", mode="before")
    @classmethod
    def _resolve_drafter(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            return _resolver(info).drafter(value)
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        from harness.inputs.endpoints import parse_endpoint

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
        description="several nodes measured at once (each an ssh destination, 'local', or a target mapping whose "
        "unset fields come from `target`): variants are spread over them and every node measures its own baseline",
    )
    model: Model = Field(description="the served target model")
    server: Server = Field(default_factory=Server, description="server settings shared by all variants")
    variants: list[Variant] = Field(min_length=1, description="exactly one baseline plus speculative arms")
    suites: list[Suite] = Field(min_length=1, description="names in suites/ or paths to suite YAML files")
    run: RunSettings = Field(default_factory=RunSettings, description="replay settings")

    _source_path: Path | None = PrivateAttr(default=None)

    @field_validator("targets", mode="before")
    @classmethod
    def _node_destinations(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"host": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("suites", mode="before")
    @classmethod
    def _resolve_suites(cls, value: Any, info: ValidationInfo) -> Any:
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
        for engine in dict.fromkeys(v.engine for v in self.variants):  # one baseline per engine
            of = "" if len({v.engine for v in self.variants}) == 1 else f" for engine {engine}"
            baselines = [i for i, v in enumerate(self.variants) if v.is_baseline and v.engine == engine]
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
        return [Target.model_validate({**shared, **t.model_dump(exclude_unset=True)}) for t in self.targets]

    def baseline_of(self, variant: Variant) -> Variant:
        """The baseline a variant is compared with: the one of its own engine."""
        return next(v for v in self.variants if v.is_baseline and v.engine == variant.engine)

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


# ---------------------------------------------------------------- resolution of drafter / suite references


def user_dir(kind: str) -> Path:
    """The user's own `kind` directory ($XDG_CONFIG_HOME/draftbench/<kind>, default ~/.config/...): drafters
    the TUI registers for an evaluated checkpoint go there, never into the checkout."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "draftbench" / kind


@dataclass
class Resolver:
    """Finds drafters/ and suites/ files by name or path, in the documented order, loading each once."""

    plan_dir: Path | None = None
    _cache: dict[Path, Any] = field(default_factory=dict)

    def search_dirs(self, kind: str) -> list[Path]:
        """Directories searched for `kind` ("drafters" or "suites"), first match wins."""
        dirs = [self.plan_dir, self.plan_dir.parent / kind] if self.plan_dir is not None else []
        dirs += [Path.cwd() / kind, data_dir(kind)]
        dirs.insert(len(dirs) - 1, user_dir(kind))  # before the built-in ones
        return list(dict.fromkeys(d.resolve() for d in dirs))

    def find(self, ref: str, kind: str) -> Path:
        if not ref.strip():
            raise ValueError(f"empty {kind[:-1]} reference")
        names = [ref] if ref.endswith((".yaml", ".yml")) else [ref, f"{ref}.yaml", f"{ref}.yml"]
        given = Path(ref).expanduser()
        dirs = [Path("/")] if given.is_absolute() else self.search_dirs(kind)
        for d in dirs:
            for name in names:
                candidate = d / Path(name).expanduser()
                if candidate.is_file():
                    return candidate
        where = str(given) if given.is_absolute() else ", ".join(f"{d}/" for d in dirs)
        raise ValueError(f"{kind[:-1]} {ref!r} not found (looked for {' / '.join(names)} in {where})")

    def drafter(self, ref: str) -> Drafter:
        return self._load(self.find(ref, "drafters"), load_drafter)

    def suite(self, ref: str) -> Suite:
        return self._load(self.find(ref, "suites"), load_suite)

    def _load(self, path: Path, loader: Any) -> Any:
        key = path.resolve()
        if key not in self._cache:
            self._cache[key] = loader(path)
        return self._cache[key]


def _resolver(info: ValidationInfo) -> Resolver:
    found = (info.context or {}).get("resolver")
    return found if isinstance(found, Resolver) else Resolver()


def load_drafter(path: str | Path) -> Drafter:
    """Load one drafter YAML; `name` defaults to the file's stem."""
    data, lines = load_yaml(path)
    if isinstance(data, dict) and "name" not in data:
        data = {"name": Path(path).stem, **data}
    return validate(Drafter, data, path, lines)


def load_plan(path: str | Path) -> Plan:
    """Load a plan, resolving drafter and suite names (see `Resolver.search_dirs` for the order)."""
    source = Path(path)
    data, lines = load_yaml(source)
    resolver = Resolver(plan_dir=source.parent)
    plan = validate(Plan, data, source, lines, context={"resolver": resolver})
    plan._source_path = source
    return plan
