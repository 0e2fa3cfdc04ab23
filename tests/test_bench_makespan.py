"""The makespan benchmark's model (scripts.bench.makespan): its lower bound and its list scheduling.

The benchmark's verdict is a ratio of a measured makespan to the bound, and its `sim` column splits
that ratio into the claim order and the machinery; both are only as good as these two functions.
The tests pin them on workloads small enough to schedule by hand (sigma 0: every episode lasts its
task's mean), check that no simulated schedule ever beats the bound, and that the uniform fleet
still gives the figures BENCHMARKS.md published before real fleets were added. No process runs.
"""

from __future__ import annotations

import pytest

from benchmarks.synthetic.manifest import build_synthetic
from scripts.bench.makespan import (
    STRATEGIES,
    Fleet,
    bound_seconds,
    capacity_seconds,
    real_fleet,
    simulated_makespan,
    uniform_fleet,
    workload,
)


def flat(episodes: int, seconds: float, task: str) -> list:
    return [build_synthetic(episodes, seed=0, mean_seconds=seconds, sigma=0.0, task=task)]


@pytest.mark.timeout(30)
def test_capacity_counts_a_killed_worker_only_until_its_kill() -> None:
    # Speeds 1 and 2 do 6 units in the first 2 s; the speed-2 worker dies then; 4 units are left at speed 1.
    assert capacity_seconds(10.0, [1.0, 2.0], {1: 2.0}) == pytest.approx(6.0)
    assert capacity_seconds(10.0, [1.0, 2.0], {}) == pytest.approx(10 / 3)
    with pytest.raises(ValueError, match="every worker is killed"):
        capacity_seconds(10.0, [1.0], {0: 1.0})


@pytest.mark.timeout(30)
def test_a_faster_worker_finishes_its_task_sooner() -> None:
    # One task of 4 x 1 s episodes on a worker of speed 2: 2 s; bound max(4 / 2, 1 / 2) = 2.
    fleet = Fleet((2.0,), (), lease_seconds=5.0)
    manifests = flat(4, 1.0, "one")
    assert simulated_makespan(manifests, 4, fleet, 1.0) == (pytest.approx(2.0), [])
    assert bound_seconds(manifests, fleet, 1.0) == pytest.approx(2.0)


@pytest.mark.timeout(30)
def test_a_killed_workers_task_keeps_its_finished_episodes_and_waits_for_the_lease() -> None:
    # Two 4 x 1 s tasks on speeds 1 and 1; worker 0 dies at 2.5 s in its task's third episode. Its
    # two unfinished episodes are pending again at 2.5 + 1 = 3.5 s, when worker 1 is idle (since 4 s:
    # it takes them at 4 s) and end at 6 s.
    fleet = Fleet((1.0, 1.0), ((0, 2.5),), lease_seconds=1.0)
    manifests = flat(8, 1.0, "two")
    makespan, lost = simulated_makespan(manifests, 4, fleet, 1.0)
    assert makespan == pytest.approx(6.0)
    assert lost == [(2.5, 1.0)]
    # Capacity: 2.5 s of worker 0 + T of worker 1 >= 8 -> 5.5 s; the lost task: 2.5 + 2/3 + 1 s.
    assert bound_seconds(manifests, fleet, 1.0) == pytest.approx(5.5)
    assert bound_seconds(manifests, fleet, 1.0, lost) == pytest.approx(5.5)
    assert bound_seconds(manifests, Fleet((1.0, 1.0), ((0, 2.5),), 6.0), 1.0, lost) == pytest.approx(7.5)


@pytest.mark.timeout(30)
def test_an_idle_worker_waits_for_a_task_a_later_kill_loses() -> None:
    # Worker 1 has nothing left at 1 s; worker 0 dies at 3 s in a 4 s episode; worker 1 must still
    # be there to take it at 3 + 2 = 5 s (and end at 9 s) instead of having left the run.
    fleet = Fleet((1.0, 1.0), ((0, 3.0),), lease_seconds=2.0)
    manifests = [*flat(1, 4.0, "long"), *flat(1, 1.0, "short")]
    makespan, lost = simulated_makespan(manifests, 1, fleet, 1.0)
    assert makespan == pytest.approx(9.0)
    assert lost == [(3.0, 4.0)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kills", [0, 2])
def test_no_simulated_schedule_beats_the_bound(kills: int) -> None:
    for seed in range(10):
        manifests = workload(seed, 50, 20, 20.0, 5.0, 0.5)
        fleet = real_fleet(manifests, 16, 2.0, kills, seed, 0.02, 3.0)
        assert len(fleet.kills) == kills
        for strategy in STRATEGIES:
            sim, lost = simulated_makespan(strategy.order(manifests), strategy.batch_size, fleet, 0.02)
            assert len(lost) <= kills
            assert sim >= bound_seconds(manifests, fleet, 0.02, lost) - 1e-9, (seed, strategy.name)


@pytest.mark.timeout(30)
def test_the_uniform_fleet_keeps_the_published_order_only_ratios() -> None:
    # BENCHMARKS.md, seed 7 on 16 identical workers: sim ratios 1.292, 1.087 and 1.018.
    manifests = workload(7, 50, 20, 20.0, 5.0, 0.5)
    fleet = uniform_fleet(16, 60.0)
    bound = bound_seconds(manifests, fleet, 0.02)
    assert bound == pytest.approx(64.9, abs=0.05)
    ratios = [simulated_makespan(s.order(manifests), s.batch_size, fleet, 0.02)[0] / bound for s in STRATEGIES]
    assert [round(r, 3) for r in ratios] == [1.292, 1.087, 1.018]
