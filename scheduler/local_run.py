"""`scheduler run SPEC`: what one evaluation on this machine needs, planned and then carried out.

``make_plan`` reads the machine (NVIDIA GPUs by UUID, else cores and available memory) and the
spec, and says everything that will happen without starting anything (``--dry-run`` prints it).
The pieces ``scheduler.cli.run`` carries out are here: the manifests, built once per definition
and reused (``prepare_manifests``); the checkpoint, sealed unless it already is as the spec says
(``seal_checkpoint``, through ``inference-server checkpoint seal --reuse``, since only the
inference server may read a checkpoint; a Hub checkpoint is made there too, from the Hub's cache
into ``<output>/checkpoints/ORG--NAME``, since the shared cache is never sealed in place); and the
record of the processes a run started (``FleetRecord``), so that a run killed with SIGKILL, whose
children outlive it, is cleaned up by the next one before that one resumes.

Resuming needs nothing else: the database lives in the output folder and the submission id is
the spec's, so submitting again creates no task, stored episode results are never run again, and
a task its killed worker held is leased anew once the lease expires or is handed back.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks import manifest_builder
from benchmarks.base import BenchmarkError
from evalfleet.scheduler_api.client import SchedulerClient, selector
from evalfleet.v1 import scheduler_pb2 as pb
from manifests import format as manifest_format
from manifests import overlays
from scheduler import submission
from scheduler.eval_info import FILE_NAME as EVAL_INFO_FILE
from scheduler.eval_info import EpisodeKey
from scheduler.results import write_text_atomically
from scheduler.spec import (
    LoadedSpec,
    SpecError,
    definition_key,
)

# The file in the output folder that lists the processes a run started (pid and start time).
FLEET_RECORD = "fleet.json"
LOCK_FILE = "run.lock"
BUILT_LIST = "BUILT.json"
GIB = 1024**3


@dataclass(frozen=True)
class WorkerPlan:
    worker_id: str
    gpu_uuid: str | None  # None: renders on the CPU


@dataclass(frozen=True)
class CheckpointPlan:
    """The inference server to start (``folder`` under ``python``), or the one already running."""

    folder: Path | None
    python: str
    seal_backend: str | None  # sealed first, unless already sealed so
    seal_settings: dict[str, Any]
    hub: str | None  # the folder is made from this Hub repository at `revision`, then sealed
    revision: str | None
    server: str | None
    device: str
    dtype: str


@dataclass(frozen=True)
class Plan:
    loaded: LoadedSpec
    output: Path
    database: Path
    manifests: Path  # the folder the manifests are (or will be) in
    manifests_built: bool
    episodes: int  # planned episodes (from the built manifests, else from the spec)
    checkpoint: CheckpointPlan
    workers: tuple[WorkerPlan, ...]
    sizing: str  # why this many workers

    @property
    def spec_id(self) -> str:
        return self.loaded.spec.id


# -- the machine ---------------------------------------------------------------------------------


def nvidia_gpus() -> list[str]:
    """The UUIDs `nvidia-smi` lists; none where it is absent or finds no GPU."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        run = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if run.returncode != 0:
        return []
    return [line.strip() for line in run.stdout.splitlines() if line.strip().startswith("GPU-")]


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux); None elsewhere."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def size_workers(loaded: LoadedSpec) -> tuple[tuple[WorkerPlan, ...], str]:
    """One worker per GPU where there are GPUs (or the spec's), else CPU workers by cores and memory."""
    fleet, spec_id = loaded.spec.fleet, loaded.spec.id
    gpus = fleet.gpus if fleet.gpus is not None else nvidia_gpus()
    if gpus:
        count = fleet.workers or len(gpus)
        why = "fleet.workers" if fleet.workers else f"one per GPU ({len(gpus)} found)"
        return tuple(WorkerPlan(f"{spec_id}-worker-{n}", gpus[n % len(gpus)]) for n in range(count)), why
    if fleet.workers:
        count, why = fleet.workers, "fleet.workers"
    else:
        cores = os.cpu_count() or 1
        memory = available_memory_bytes()
        by_memory = int(memory / (fleet.worker_memory_gb * GIB)) if memory else cores
        count = max(1, min(cores, by_memory))
        why = f"CPU rendering: {cores} cores, room for {by_memory} at {fleet.worker_memory_gb:g} GiB each"
    return tuple(WorkerPlan(f"{spec_id}-worker-{n}", None) for n in range(count)), why


# -- the plan ------------------------------------------------------------------------------------


def make_plan(loaded: LoadedSpec, output: Path | None = None) -> Plan:
    """Everything a run will do, read from the spec and the machine; starts nothing."""
    sequential = loaded.spec.sequential
    if sequential is not None and sequential.paired_with is not None:
        raise loaded.error(
            "sequential.paired_with",
            "a run's scheduler holds its own submission only: submit both evaluations to one fleet "
            "with `scheduler submit --spec`",
        )
    if loaded.spec.stack is not None:
        try:
            overlays.overlay(loaded.spec.stack)
        except overlays.StackError as exc:
            raise loaded.error("fleet.stack", str(exc)) from None
    out = Path(os.path.abspath(output or loaded.output))
    manifests = out / "manifests" / definition_key(_manifest_definition(loaded))
    built = _built_manifests(manifests)
    episodes = sum(len(manifest) for manifest in built) if built is not None else planned_episodes(loaded)
    workers, sizing = size_workers(loaded)
    return Plan(
        loaded=loaded,
        output=out,
        database=out / "scheduler.sqlite",
        manifests=manifests,
        manifests_built=built is not None,
        episodes=episodes,
        checkpoint=_checkpoint_plan(loaded, out),
        workers=workers,
        sizing=sizing,
    )


def _checkpoint_plan(loaded: LoadedSpec, output: Path) -> CheckpointPlan:
    checkpoint = loaded.spec.checkpoint
    python = str(loaded.resolve(checkpoint.python)) if checkpoint.python else sys.executable
    if checkpoint.python and not Path(python).exists():
        raise loaded.error("checkpoint.python", f"{python} does not exist")
    folder: Path | None = None
    backend, settings = checkpoint.backend, checkpoint.settings or {}
    if checkpoint.remote is not None:
        folder, backend, settings = output / "checkpoints" / f"{loaded.spec.id}-remote", "remote", checkpoint.remote
    elif checkpoint.hub is not None:
        # The Hub's cache is shared and never written into: the files are linked into a folder of the run's.
        folder = output / "checkpoints" / checkpoint.hub.replace("/", "--")
    elif checkpoint.path is not None:
        folder = loaded.resolve(checkpoint.path)
        # A folder to seal may be created empty (a backend that loads no files, such as the oracle).
        if not folder.is_dir() and (backend is None or folder.exists()):
            raise loaded.error("checkpoint.path", f"{folder} is not a folder")
    return CheckpointPlan(
        folder=folder,
        python=python,
        seal_backend=backend,
        seal_settings=settings,
        hub=checkpoint.hub,
        revision=checkpoint.revision,
        server=checkpoint.server,
        device=checkpoint.device,
        dtype=checkpoint.dtype,
    )


def planned_episodes(loaded: LoadedSpec) -> int:
    """Episodes the spec asks for, before its manifests are built (0 where only a scan can say)."""
    benchmark = loaded.spec.benchmark
    try:
        return benchmark.definition.planned_episodes(benchmark.section)
    except BenchmarkError as exc:
        raise loaded.error(benchmark.definition.spec_key(exc.field), exc.message) from None
    except ImportError as exc:
        raise _unavailable(loaded, exc) from None


def describe(plan: Plan) -> list[str]:
    """The plan in lines, as ``--dry-run`` prints it."""
    spec = plan.loaded.spec
    checkpoint = plan.checkpoint
    lines = [
        f"spec        {plan.loaded.source} (submission {spec.id}, route {spec.benchmark.route})",
        f"output      {plan.output}",
        f"scheduler   {plan.database} (SQLite; reused: a run resumes where the last one stopped), "
        f"free port on 127.0.0.1, leases of {spec.fleet.lease_seconds:g}s",
    ]
    if checkpoint.server:
        lines.append(f"policy      the inference server at {checkpoint.server} (already running)")
    else:
        seal = f", sealed first as backend {checkpoint.seal_backend} unless it is" if checkpoint.seal_backend else ""
        if checkpoint.hub:
            revision = checkpoint.revision or "main"
            seal = f" (made from {checkpoint.hub} at {revision} through the Hugging Face cache){seal}"
        lines.append(
            f"policy      inference-server for {checkpoint.folder}{seal}; {checkpoint.python}, "
            f"{checkpoint.device}, {checkpoint.dtype}, free port on 127.0.0.1"
        )
    state = "built, reused" if plan.manifests_built else "to build"
    lines.append(f"manifests   {plan.manifests} ({state}); {plan.episodes or 'unknown until scanned'} episodes")
    chunk = "the checkpoint's" if spec.actions_per_chunk is None else str(spec.actions_per_chunk)
    lines.append(
        f"submission  batches of {spec.batch_size} episodes, {spec.max_attempts} attempts, priority "
        f"{spec.priority}, order {spec.order}, actions per chunk {chunk}"
    )
    lines.append(
        f"workers     {len(plan.workers)} ({plan.sizing}), {spec.fleet.concurrency} episode(s) each, video {spec.video}"
    )
    software = CPU_RENDERING[spec.benchmark.definition.gpu_renderer]
    for worker in plan.workers:
        where = f"GPU {worker.gpu_uuid}" if worker.gpu_uuid else f"CPU ({software})"
        stack = f", stack {spec.stack}" if spec.stack else ""
        lines.append(f"  {worker.worker_id:<24} {where}{stack}")
    return lines


# -- manifests -----------------------------------------------------------------------------------


def _manifest_definition(loaded: LoadedSpec) -> dict[str, Any]:
    """What the manifests depend on: the benchmark section and the stack they are built under."""
    return {"benchmark": loaded.spec.benchmark.model_dump(mode="json"), "stack": loaded.spec.stack}


def _built_manifests(folder: Path) -> list[manifest_format.Manifest] | None:
    listing = folder / BUILT_LIST
    if not listing.is_file():
        return None
    hashes = json.loads(listing.read_text())
    return [manifest_format.read(folder / f"{digest}.json", expected_hash=digest) for digest in hashes]


def prepare_manifests(plan: Plan) -> list[manifest_format.Manifest]:
    """The spec's manifests: built now (then listed in BUILT.json) or read back as built before.
    Imported ones (a published subset) are imported every time (it is quick): the package
    is verified against its checksums on each run, and a changed package changes the manifests,
    which the submission refuses."""
    imported = _imported(plan.loaded)
    if imported is not None:
        return imported
    built = _built_manifests(plan.manifests)
    if built is not None:
        return built
    manifests = _build(plan)
    plan.manifests.mkdir(parents=True, exist_ok=True)
    for manifest in manifests:
        manifest_format.write(manifest, plan.manifests)
    # Written last: a build cut short leaves no listing, so the next run builds again.
    write_text_atomically(plan.manifests / BUILT_LIST, json.dumps([m.hash for m in manifests], indent=1) + "\n")
    return manifests


def _imported(loaded: LoadedSpec) -> list[manifest_format.Manifest] | None:
    benchmark = loaded.spec.benchmark
    try:
        return benchmark.definition.imported(benchmark.section, loaded.resolve)
    except BenchmarkError as exc:
        raise loaded.error(benchmark.definition.spec_key(exc.field), exc.message) from None


def _build(plan: Plan) -> list[manifest_format.Manifest]:
    loaded = plan.loaded
    benchmark = loaded.spec.benchmark
    stack = loaded.spec.stack
    try:
        arguments = benchmark.definition.builder_arguments(benchmark.section, loaded.resolve)
    except BenchmarkError as exc:
        raise loaded.error(benchmark.definition.spec_key(exc.field), exc.message) from None
    if benchmark.definition.pins is not None and stack is not None:
        return _build_on_stack(plan, stack, arguments)
    manifests: list[manifest_format.Manifest] = []
    module = _builder(loaded)
    for args in arguments:
        try:
            manifests.extend(module.build_manifests(args))
        except BenchmarkError as exc:
            raise loaded.error(benchmark.definition.spec_key(exc.field), exc.message) from None
    return manifests


def _build_on_stack(plan: Plan, stack: str, arguments: Sequence[argparse.Namespace]) -> list[manifest_format.Manifest]:
    """Manifests of a benchmark that pins its stack, built under the stack the workers run
    (``Spec.stack``): a manifest pins the stack it was built under and is claimed only by workers
    on that stack, so the build runs as `scheduler manifest build NAME` in a process on the stack's
    overlay (``manifests.overlays``)."""
    try:
        env = {**os.environ, "PYTHONPATH": overlays.python_path(stack, os.environ)}
    except overlays.StackError as exc:
        raise plan.loaded.error("fleet.stack", str(exc)) from None
    route = plan.loaded.spec.benchmark.route
    manifests: list[manifest_format.Manifest] = []
    with tempfile.TemporaryDirectory(prefix="evalfleet-stack-build-") as folder:
        for number, args in enumerate(arguments):
            out = Path(folder) / str(number)
            argv = [sys.executable, "-m", "scheduler.cli", "manifest", "build", route, "--out", str(out)]
            run = subprocess.run([*argv, *_flags(args)], env=env, capture_output=True, text=True)
            if run.returncode != 0:
                said = (run.stderr.strip().splitlines() or ["no output"])[-1]
                raise plan.loaded.error("fleet.stack", f"building the manifests on it failed: {said}")
            # One line per manifest, in the builder's order: "<hash>  <path>  (...)".
            paths = [line.split()[1] for line in run.stdout.splitlines() if line.strip()]
            manifests.extend(manifest_format.read(path) for path in paths)
    return manifests


def _flags(args: argparse.Namespace) -> list[str]:
    """The command line that parses to ``args`` (``--name value``; a true boolean is ``--name``)."""
    flags: list[str] = []
    for name, value in vars(args).items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        flags += [flag] if value is True else [flag, str(value)]
    return flags


def _builder(loaded: LoadedSpec) -> ModuleType:
    route = loaded.spec.benchmark.route
    try:
        return manifest_builder(route)
    except ImportError as exc:
        raise _unavailable(loaded, exc) from None


def _unavailable(loaded: LoadedSpec, exc: ImportError) -> SpecError:
    route = loaded.spec.benchmark.route
    return loaded.error(f"benchmark.{route}", f"its builder is unavailable ({exc}); install evalfleet[{route}]")


# -- the checkpoint ------------------------------------------------------------------------------


def seal_checkpoint(plan: Plan, manifests: Sequence[manifest_format.Manifest]) -> None:
    """Seals the spec's folder with its backend and settings, or verifies that it already is.

    The seal is told the spec's benchmark and the camera size its manifests record, so a backend
    that derives settings left out (the lerobot backend's cameras) follows the benchmark's convention."""
    checkpoint = plan.checkpoint
    if checkpoint.folder is None or checkpoint.seal_backend is None:
        return
    plan.output.mkdir(parents=True, exist_ok=True)
    key = "checkpoint.remote" if plan.loaded.spec.checkpoint.remote is not None else "checkpoint.settings"
    benchmark = plan.loaded.spec.benchmark
    context = ["--benchmark", benchmark.route]
    if checkpoint.hub is not None:
        # A Hub folder is made by the seal (the folder must be missing or empty for it).
        key = "checkpoint.hub"
        context += ["--hub", checkpoint.hub, *(["--revision", checkpoint.revision] if checkpoint.revision else [])]
    else:
        checkpoint.folder.mkdir(parents=True, exist_ok=True)
    sizes = {benchmark.definition.camera_size(manifest) for manifest in manifests}
    if len(sizes) == 1 and (size := sizes.pop()) is not None:
        context += ["--camera-size", f"{size[0]}x{size[1]}"]
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=plan.output, delete=False) as handle:
        json.dump(checkpoint.seal_settings, handle)
    try:
        _checkpoint_command(
            plan, key, "seal", "--backend", checkpoint.seal_backend, "--settings-file", handle.name, "--reuse", *context
        )
    finally:
        Path(handle.name).unlink(missing_ok=True)


def _checkpoint_command(plan: Plan, key: str, action: str, *options: str) -> str:
    """`inference-server checkpoint ACTION FOLDER OPTIONS` on the checkpoint's interpreter (only the
    inference server reads checkpoints); its stdout, or its one-line refusal as the spec's ``key``."""
    checkpoint = plan.checkpoint
    assert checkpoint.folder is not None
    run = subprocess.run(
        [checkpoint.python, "-m", "inference_server.cli", "checkpoint", action, str(checkpoint.folder), *options],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        message = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"
        raise plan.loaded.error(key, message.removeprefix(f"inference-server checkpoint {action}: "))
    return run.stdout


def policy_argv(plan: Plan) -> list[str]:
    checkpoint = plan.checkpoint
    assert checkpoint.folder is not None
    return [
        checkpoint.python,
        "-m",
        "inference_server.cli",
        "--epoch",
        checkpoint.folder.name,
        "--checkpoint-root",
        str(checkpoint.folder.parent),
        "--port",
        "0",
        "--device",
        checkpoint.device,
        "--dtype",
        checkpoint.dtype,
    ]


def worker_argv(plan: Plan, worker: WorkerPlan, scheduler: str, policy: str) -> list[str]:
    spec = plan.loaded.spec
    where = ["--gpu-uuid", worker.gpu_uuid] if worker.gpu_uuid else ["--cpu"]
    stack = ["--stack", spec.stack] if spec.stack else []
    benchmark = spec.benchmark
    options = benchmark.definition.worker_options(benchmark.section, plan.loaded.resolve)
    adapter_options = [f"--adapter-option={benchmark.route}.{key}={value}" for key, value in options.items()]
    return [
        sys.executable,
        "-m",
        "renderer_worker.cli",
        "--scheduler",
        scheduler,
        "--policy",
        policy,
        *where,
        *stack,
        "--routes",
        spec.benchmark.route,
        "--worker-id",
        worker.worker_id,
        "--concurrency",
        str(spec.fleet.concurrency),
        "--output",
        str(plan.output / "episodes"),
        "--video",
        spec.video,
        *adapter_options,
    ]


# -- processes of an earlier run -----------------------------------------------------------------


@contextlib.contextmanager
def exclusive(output: Path, source: str) -> Iterator[None]:
    """One run per output folder at a time (the lock goes with the process, also on SIGKILL)."""
    output.mkdir(parents=True, exist_ok=True)
    with open(output / LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise SpecError(source, "output", f"{output} is in use by a run still going ({holder})") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        yield


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc/PID/stat field 22): a pid with another is
    another process, so a recycled pid is never signalled."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


class FleetRecord:
    """The processes a run started, kept in the output folder while they run."""

    def __init__(self, output: Path) -> None:
        self.path = output / FLEET_RECORD

    def add(self, name: str, pid: int) -> None:
        entries = self._read()
        entries.append({"name": name, "pid": pid, "start": _start_time(pid)})
        write_text_atomically(self.path, json.dumps(entries, indent=1) + "\n")

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def stop_leftovers(self, grace_s: float, say: Any) -> None:
        """SIGTERM to the process groups of a killed run that are still alive, last started first
        (workers hand their tasks back while the scheduler still runs), SIGKILL after ``grace_s``."""
        alive = [e for e in reversed(self._read()) if e["start"] is not None and _start_time(e["pid"]) == e["start"]]
        for entry in alive:
            say(f"stopping {entry['name']} (pid {entry['pid']}) left running by an earlier run")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(entry["pid"], signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while _start_time(entry["pid"]) == entry["start"] and time.monotonic() < deadline:
                time.sleep(0.2)
            if _start_time(entry["pid"]) == entry["start"]:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(entry["pid"], signal.SIGKILL)
        self.clear()

    def _read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        entries: list[dict[str, Any]] = json.loads(self.path.read_text())
        return entries


# How a worker without a GPU renders, by how the benchmark renders on one (`GpuRenderer`).
CPU_RENDERING = {"egl": "OSMesa", "vulkan": "Mesa lavapipe", "none": "no rendering"}


# What a run leaves in its output folder besides manifests, checkpoints and the lock (`--fresh`).
RESULT_FILES = ("RESULTS.json", EVAL_INFO_FILE, "results.csv", "success.png")


def discard_results(plan: Plan) -> None:
    """An earlier run's database (and its artifact store), results, videos, logs and episode files."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{plan.database}{suffix}").unlink(missing_ok=True)
    for folder in (
        Path(f"{plan.database}.artifacts"),
        plan.output / "videos",
        plan.output / "logs",
        plan.output / "episodes",
    ):
        shutil.rmtree(folder, ignore_errors=True)
    for name in RESULT_FILES:
        (plan.output / name).unlink(missing_ok=True)


def order_manifests(plan: Plan, manifests: Sequence[manifest_format.Manifest]) -> list[manifest_format.Manifest]:
    from manifests.expected import longest_first

    return longest_first(list(manifests)) if plan.loaded.spec.order == "longest-first" else list(manifests)


def download_videos(client: SchedulerClient, submission_id: str, folder: Path) -> dict[EpisodeKey, Path]:
    """Each kept episode video of the submission as ``folder/<task>-<episode>.mp4``, by episode
    (files already there with the right size are kept: a resumed run downloads only what is new)."""
    videos: dict[EpisodeKey, Path] = {}
    for task in client.tasks(selector(submission_id)).tasks:
        for episode in client.task(task.task_id).episodes:
            for artifact in episode.artifacts:
                if artifact.kind != "video" or artifact.collected_at:
                    continue
                target = folder / f"{task.task_id}-{episode.result.episode_index:04d}.mp4"
                videos[EpisodeKey(task.manifest_hash, episode.result.episode_index)] = target
                if target.is_file() and target.stat().st_size == artifact.size_bytes:
                    continue
                folder.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f".{target.name}.partial")
                with open(partial, "wb") as out:
                    client.download_artifact(artifact.sha256, out)
                os.replace(partial, target)
    return videos


def checkpoint_digest(plan: Plan) -> str:
    """The identity digest the spec's sealed folder is served under (with its device and dtype),
    as `inference-server checkpoint show` computes it: how `submit --spec` pins the checkpoint
    without a server running."""
    checkpoint = plan.checkpoint
    key = "checkpoint.hub" if checkpoint.hub else "checkpoint.path"
    shown = _checkpoint_command(plan, key, "show", "--json", "--device", checkpoint.device, "--dtype", checkpoint.dtype)
    digest: str = json.loads(shown)["digest"]
    return digest


def submit(
    client: SchedulerClient,
    plan: Plan,
    manifests: Sequence[manifest_format.Manifest],
    checkpoint: str,
    labels: Mapping[str, str],
) -> pb.SubmitResponse:
    """The spec's submission, as `scheduler run` and `scheduler submit --spec` both make it."""
    spec = plan.loaded.spec
    return submission.submit(
        client, spec, manifests, spec.benchmark.route, submission_id=spec.id, checkpoint=checkpoint, labels=labels
    )
