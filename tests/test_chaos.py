"""The chaos run (scripts.chaos.synthetic) at CI size: 300 episodes, each of worker, scheduler and
inference server killed twice at seeded moments; every episode once, same results as without faults.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.chaos.synthetic import TARGETS, chaos_run, fault_plan, report

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_faults_cost_time_never_results(tmp_path: Path, checkpoint_root: Path) -> None:
    chaotic, calm, problems = chaos_run(tmp_path, checkpoint_root, episodes=300, seed=7, faults_per_target=2)
    print(report(chaotic, calm, problems))
    assert len(chaotic.fault_log) == 6 and not calm.fault_log
    assert not problems, problems
    assert chaotic.results == calm.results and len(calm.results) == 300


def test_fault_plan_is_seeded_and_covers_every_target() -> None:
    plan = fault_plan(7, 2)
    assert plan == fault_plan(7, 2) != fault_plan(8, 2)
    assert sorted(f.target for f in plan) == sorted(TARGETS * 2)
    assert [f.at for f in plan] == sorted(f.at for f in plan)
