"""The parts of a plan below the variants: drafter, target, model and server models (typed, strict,
documented where declared) and the value types they share with config.py."""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from harness.inputs.drafter_record import LineageEntry, TrainedAgainst
from harness.inputs.engine_options import TARGET_ALIASES, SGLangOptions, VLLMOptions
from harness.inputs.yamlio import ArgStr, FieldProblem, StrictModel

ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH")
# SGLang loads the target itself as the draft without a path (EAGLE3 then crashes; DFLASH refuses).
NEEDS_DRAFTER = frozenset({"EAGLE3", "STANDALONE", "DFLASH"})
SPEC_PARAMS = ("num_steps", "eagle_topk", "num_draft_tokens")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # names that become file names: no "..", no "/"
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_names(cls: type, env: dict[str, str]) -> dict[str, str]:
    """The `env` validator of the target and of a variant: every key must be a variable name."""
    for name in env:
        if not ENV_NAME_RE.fullmatch(name):
            raise FieldProblem(f"{name!r} is not an environment variable name", (name,))
    return env


def _algorithm(value: object) -> object:
    if isinstance(value, str):
        upper = value.strip().upper()
        if upper not in ALGORITHMS:
            raise ValueError(f"unknown speculative algorithm {value!r}; one of {', '.join(ALGORITHMS)}")
        return upper
    return value


def _port(value: object) -> object:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535):
        return value
    raise ValueError(f"must be a port number from 1 to 65535 or 'auto', got {value!r}")


def _file_name(value: object) -> object:
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
    training_categories: list[str] = Field(
        default_factory=list, description="prompt categories it was trained on, where known: check warns "
        "when no suite category is among them (harness.checks.realism)")
    training_data_file: str | None = Field(
        default=None, description="its SpecForge training JSONL on this machine (relative: to the plan's "
        "directory): the rows' `category` values stand in for training_categories")
    training_accept_len: float | None = Field(
        default=None, gt=1, description="the accept length it reached at training time (e.g. 1 + the sum "
        "over positions of the products of SpecForge's acc_i): the run warns when it measures far from it")
    notes: str | None = Field(default=None, description="anything else worth knowing")
    trained_against: TrainedAgainst | None = Field(
        default=None, description="the target's config as it was at training (compared by `check`)")
    lineage: list[LineageEntry] = Field(
        default_factory=list, description="each promotion by `draftbench retrain`, oldest first")


class Target(StrictModel):
    """Where the servers run: the node, its interpreter and work directory, and each engine's own options."""

    host: str = Field(
        default="local",
        min_length=1,
        description="'local' or an ssh destination as for `ssh` (alias, user@host)",
    )
    ssh_port: int | None = Field(
        default=None, ge=1, le=65535, description="overrides the port from ~/.ssh/config"
    )
    python: str = Field(default="python3", min_length=1, description="python interpreter on the target")
    workdir: str = Field(
        default="~/draftbench", min_length=1, description="work directory on the target (created mode 0700)"
    )
    env: dict[str, ArgStr] = Field(default_factory=dict, description="environment for the server process")
    simulated: bool = Field(default=False, description="true when the launchers are draftbench's stand-ins")
    sglang: SGLangOptions = Field(
        default_factory=SGLangOptions, description="SGLang's options on this node: launcher, version"
    )
    vllm: VLLMOptions = Field(
        default_factory=VLLMOptions, description="vLLM's options on this node: launcher, version"
    )

    # keys of plans from before the engines owned their options, moved to where they live now (yamlio reports
    # a problem with their value at the key as written)
    moved_keys: ClassVar[dict[str, tuple[str, str]]] = TARGET_ALIASES

    _env_names = field_validator("env")(check_env_names)

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: object) -> object:
        return upgrade_target(data)

    @property
    def is_local(self) -> bool:
        return self.host == "local"


def upgrade_target(data: object) -> object:
    """A target mapping with its old engine keys (`launcher`, `sglang_version`, `vllm_launcher`,
    `vllm_version`) moved under the engine they belong to; anything else is returned as it is."""
    if not isinstance(data, dict) or not any(k in data for k in TARGET_ALIASES):
        return data
    data = dict(data)
    for old, (engine, name) in TARGET_ALIASES.items():
        if old not in data or not isinstance(data.get(engine, {}), dict):
            continue  # a non-mapping `sglang:` is reported as such; the old key then stays unknown
        options = dict(data.get(engine) or {})
        if name in options:
            raise FieldProblem(f"given twice: here and as {engine}.{name}; keep {engine}.{name}", (old,))
        options[name] = data.pop(old)
        data[engine] = options
    return data


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
