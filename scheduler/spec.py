"""An evaluation as a file: the YAML spec that `scheduler run` and `scheduler submit --spec` read.

A lab versions the spec with its code: which checkpoint, which benchmark episodes under which
protocol, how the policy's chunks are executed, how the work is cut into tasks, and (for
`scheduler run` only) the local fleet. docs/specs.md describes every key; examples/ holds specs.

The schema is pydantic models that forbid unknown keys and coerce nothing (a quoted ``"5"`` is
not a number), so a typo is refused instead of silently ignored. YAML's own leniency is closed
too: a key given twice is refused (PyYAML keeps the last one). Every refusal is one ``SpecError``
line naming the file and the key (``benchmark.NAME.trials: must be >= 1``). What a benchmark
builder checks itself (a task id beyond the suite, a preset's seed range) it still checks when
the manifests are built, and its field is mapped back onto the spec's key (each benchmark's
definition knows its keys: ``BenchmarkDefinition.spec_key``). The ``benchmark`` section's keys are
the registered benchmarks' names, each with the section model its definition gives.

Relative paths in a spec are relative to the spec file's folder, as in a compose file, so that a
spec means the same wherever it is run from. The canonical form (``canonical_json``: every key,
defaults filled in, sorted) is what is stored with the submission.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, create_model, field_validator, model_validator
from pydantic_core import ErrorDetails

import benchmarks
from benchmarks.definition import SpecSection
from evalfleet.scheduler_api.limits import (
    MAX_ATTEMPTS,
    MAX_BATCH_EPISODES,
    MAX_CANARY_TASKS,
    MAX_EXECUTE_STEPS,
    MAX_LEASED_TASKS,
    MAX_PRIORITY,
)

SPEC_VERSION = 1
# The submission id a spec names ([A-Za-z0-9._-], 1..64; evalfleet.scheduler_api.request_checks.ID_RE).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
# A Hugging Face Hub repository id, ORG/NAME (inference_server.hub.REPO_ID, which checks it again).
HUB_REPO_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$"
# Each CPU renderer worker (one episode process and its MuJoCo simulator) needs about this much.
DEFAULT_WORKER_MEMORY_GB = 2.0


class SpecError(Exception):
    """A spec that cannot be used, in one line: the file, the key, what is wrong."""

    def __init__(self, source: str, key: str, message: str) -> None:
        super().__init__(f"{source}: {key}: {message}" if key else f"{source}: {message}")
        self.source = source
        self.key = key
        self.message = message


# Every section refuses unknown keys and coerces nothing, as a benchmark's own does.
_Section = SpecSection


class CheckpointSpec(_Section):
    """What serves the policy: exactly one of ``path`` (a checkpoint folder), ``hub`` (a Hugging
    Face Hub repository at ``revision``, linked from the Hub's cache into a folder under the output
    and sealed there with its commit), ``remote`` (the settings of the ``remote`` backend, sealed
    under the output folder) or ``server`` (an inference server that is already running, whose
    identity is read once at submission)."""

    path: str | None = None
    hub: str | None = Field(default=None, pattern=HUB_REPO_PATTERN)
    # A branch, a tag or a commit of `hub` (default: main); the commit it resolves to is sealed.
    revision: str | None = Field(default=None, min_length=1)
    # Given: `path` is sealed with this backend and settings unless it already is (and refused if
    # it is sealed otherwise). Absent: `path` must already be sealed.
    backend: str | None = None
    settings: dict[str, Any] | None = None
    remote: dict[str, Any] | None = None
    server: str | None = None
    # The interpreter that runs the inference server (the lerobot backend: .venv-lerobot/bin/python).
    python: str | None = None
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"

    @model_validator(mode="after")
    def _one_source(self) -> CheckpointSpec:
        given = [name for name in ("path", "hub", "remote", "server") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of path, hub, remote or server (got {', '.join(given) or 'none'})")
        if self.path is None and self.hub is None and (self.backend is not None or self.settings is not None):
            raise ValueError("backend and settings seal a checkpoint folder: they need path or hub")
        if self.hub is not None and self.backend is None:
            raise ValueError("hub needs backend: the repository's files are sealed with it at run")
        if self.revision is not None and self.hub is None:
            raise ValueError("revision is a revision of hub: it needs hub")
        if self.settings is not None and self.backend is None:
            raise ValueError("settings need the backend they are for")
        if self.server is not None and self.python is not None:
            raise ValueError("python starts an inference server; server names one already running")
        return self


class _BenchmarkChoice(_Section):
    """Exactly one benchmark per spec, under its name (``benchmark.NAME``); its episodes go to one
    worker route, the benchmark's name. The fields are the registry's (``benchmarks``): each
    benchmark's section model, from its definition."""

    @model_validator(mode="after")
    def _exactly_one(self) -> _BenchmarkChoice:
        if len(self.chosen()) != 1:
            raise ValueError(f"give exactly one of {', '.join(benchmarks.names())}")
        return self

    def chosen(self) -> list[str]:
        return [name for name in type(self).model_fields if getattr(self, name) is not None]

    @property
    def route(self) -> str:
        """The chosen benchmark's name (the worker route its episodes go to)."""
        return self.chosen()[0]

    @property
    def definition(self) -> benchmarks.AnyDefinition:
        return benchmarks.definition(self.route)

    @property
    def section(self) -> SpecSection:
        """The chosen benchmark's section."""
        section: SpecSection = getattr(self, self.route)
        return section


def _benchmark_choice() -> type[_BenchmarkChoice]:
    fields: dict[str, Any] = {each.name: (each.section | None, None) for each in benchmarks.definitions()}
    return create_model("BenchmarkSpec", __base__=_BenchmarkChoice, __module__=__name__, **fields)


if TYPE_CHECKING:
    BenchmarkSpec = _BenchmarkChoice
else:
    BenchmarkSpec = _benchmark_choice()


class FleetSpec(_Section):
    """The processes `scheduler run` starts on this machine (`scheduler submit --spec` ignores it:
    a running fleet is what it is). Unset: sized to the machine."""

    # Renderer workers: one per GPU where NVIDIA GPUs are present, else one per core within memory.
    workers: int | None = Field(default=None, ge=1)
    # GPUs to render on, by UUID (`nvidia-smi -L`); [] renders on the CPU even where GPUs are present.
    gpus: list[str] | None = None
    # Episodes in flight per worker, one process each.
    concurrency: int = Field(default=1, ge=1)
    worker_memory_gb: float = Field(default=DEFAULT_WORKER_MEMORY_GB, gt=0)
    lease_seconds: float = Field(default=60.0, gt=0)
    # The simulator stack the workers run on (`make stacks`); unset: the one installed with evalfleet.
    stack: str | None = None

    @field_validator("workers", "gpus", mode="before")
    @classmethod
    def _auto(cls, value: Any) -> Any:
        return None if value == "auto" else value


class CanarySpec(_Section):
    """The broken-setup canary (``scheduler.canary``): the first task of each of ``tasks`` manifests,
    spread over them, runs first; if every one of their episodes shows a broken setup's signature,
    the run says so with the evidence and, with ``pause``, the submission waits for
    `scheduler resume` or `scheduler cancel`."""

    tasks: int = Field(default=4, ge=0, le=MAX_CANARY_TASKS)
    pause: bool = False


class SequentialSpec(_Section):
    """A sequential evaluation (docs/sequential.md): tasks claimed in the random order ``seed``
    draws, and the submission stopped once its rate is decided to be at least or below
    ``threshold``, or known to +-``precision``; neither: it runs to the end, its anytime-valid
    interval reported as it narrows. With ``paired_with`` (`scheduler submit --spec` to a fleet
    that holds that sequential submission): compared with it on the same episodes, side by side,
    and both stopped once the difference is decided, or found within +-``margin``.
    ``cancel_leased``: the stop cancels running tasks too."""

    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    threshold: float | None = Field(default=None, gt=0, lt=1)
    precision: float | None = Field(default=None, gt=0, lt=0.5)
    paired_with: str | None = Field(default=None, pattern=ID_PATTERN)
    margin: float | None = Field(default=None, gt=0, lt=1)
    cancel_leased: bool = False

    @model_validator(mode="after")
    def _one_rule(self) -> SequentialSpec:
        if self.paired_with is not None and (self.threshold is not None or self.precision is not None):
            raise ValueError("a paired evaluation stops on the comparison: give threshold or precision, or paired_with")
        if self.margin is not None and self.paired_with is None:
            raise ValueError("margin is the equivalence margin of a paired evaluation: it needs paired_with")
        return self


class SubmissionOptions(_Section):
    """How a submission is executed, cut into tasks, tried and claimed: the spec's keys that
    `scheduler submit` also takes as flags of the same names (``submission``), with their one set
    of defaults, whether a spec or the flags alone describe the submission."""

    # Actions of each policy chunk executed before the policy is asked again (0: the whole chunk);
    # unset: what the checkpoint declares. Part of the submission's definition.
    actions_per_chunk: int | None = Field(default=None, ge=0, le=MAX_EXECUTE_STEPS)
    # Episodes per task: the unit that is leased, retried and resumed.
    batch_size: int = Field(default=5, ge=1, le=MAX_BATCH_EPISODES)
    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS)
    # At most this many of its tasks leased at once (unset: no cap); not part of the definition.
    max_leased_tasks: int | None = Field(default=None, ge=1, le=MAX_LEASED_TASKS)
    priority: int = Field(default=0, ge=0, le=MAX_PRIORITY)
    order: Literal["longest-first", "given"] = "longest-first"
    labels: dict[str, str] = Field(default_factory=dict)
    sequential: SequentialSpec | None = None


class _SpecHead(_Section):
    """The keys a spec leads with: what is evaluated, on what, and where its run keeps its files."""

    version: Literal[1] = 1
    id: str = Field(pattern=ID_PATTERN)
    # Where `scheduler run` keeps its database, logs, manifests and results (default runs/<id>).
    output: str | None = None
    checkpoint: CheckpointSpec
    benchmark: BenchmarkSpec


class Spec(SubmissionOptions, _SpecHead):
    """One evaluation: a checkpoint on a benchmark's episodes, how it is executed and recorded."""

    # Which episodes keep their video: workers `scheduler run` starts record accordingly.
    video: Literal["none", "failures", "all"] = "failures"
    canary: CanarySpec = Field(default_factory=CanarySpec)
    fleet: FleetSpec = Field(default_factory=FleetSpec)

    @property
    def stack(self) -> str | None:
        """The simulator stack the workers run on and the manifests are built under: `fleet.stack`,
        else the benchmark's own overlay (its definition's ``stack``), else None (the environment's)."""
        return self.fleet.stack if self.fleet.stack is not None else self.benchmark.definition.stack


@dataclass(frozen=True)
class LoadedSpec:
    """A valid spec and the file it came from (relative paths resolve against its folder)."""

    spec: Spec
    source: Path

    def resolve(self, path: str) -> Path:
        """Absolute, links kept: a virtualenv's python is a link that must not be followed."""
        return Path(os.path.abspath(self.source.parent / Path(path).expanduser()))

    @property
    def output(self) -> Path:
        return self.resolve(self.spec.output) if self.spec.output else Path(os.path.abspath("runs")) / self.spec.id

    def error(self, key: str, message: str) -> SpecError:
        return SpecError(str(self.source), key, message)


def load(path: Path) -> LoadedSpec:
    """Reads and validates a spec file; SpecError names the first problem."""
    source = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(source, "", f"cannot read: {exc.strerror or exc}") from None
    return LoadedSpec(parse(text, source), Path(os.path.abspath(path)))


def parse(text: str, source: str = "<spec>") -> Spec:
    try:
        document = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError(source, "", f"not valid YAML: {where}{exc.problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(source, "", f"not valid YAML: {exc}") from None
    if not isinstance(document, dict):
        raise SpecError(source, "", "must be a mapping of keys (id, checkpoint, benchmark, ...)")
    try:
        return Spec.model_validate(document)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        key, message = describe_error(errors[0])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SpecError(source, key, message + more) from None


def describe_error(error: ErrorDetails) -> tuple[str, str]:
    """pydantic's error as the spec's dotted key and one plain sentence."""
    key = ".".join(str(part) for part in error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        parent, _, name = key.rpartition(".")
        return key, f"unknown key {name!r}{_expected_keys(parent)}"
    if kind == "missing":
        return key, "required"
    if kind == "value_error":
        return key, str(error["ctx"]["error"]) if "ctx" in error else error["msg"]
    if kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") == HUB_REPO_PATTERN:
        return key, f"must be a Hugging Face Hub repository id ORG/NAME, got {error['input']!r}"
    if kind == "string_pattern_mismatch":
        return key, f"must be 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit), got {error['input']!r}"
    return key, f"{error['msg'].replace('Input should be', 'must be')}, got {error['input']!r}"


def _expected_keys(parent: str) -> str:
    model: type[BaseModel] | None = Spec
    for part in filter(None, parent.split(".")):
        field = model.model_fields.get(part) if model else None
        model = _section_type(field.annotation) if field else None
    if model is None:
        return ""
    return f" (expected one of: {', '.join(model.model_fields)})"


def _section_type(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def canonical_json(spec: Spec) -> str:
    """Every key with defaults filled in, sorted, compact: the form stored with the submission."""
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def definition_key(definition: Mapping[str, Any]) -> str:
    """A short stable name for a JSON definition (manifests are cached under it)."""
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:16]


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
