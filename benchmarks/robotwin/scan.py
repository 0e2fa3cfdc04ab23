"""Upstream's seed scan, which decides which scenes are evaluated.

``eval_policy.py`` tries seeds from ``100000 * (1 + seed)`` upward, lets the scripted expert play
each scene and keeps a seed only when ``plan_success and check_success()``; unstable scenes and any
other failure are skipped. The i-th accepted seed is episode i. Upstream scans without end; a
bounded scan turns a task whose expert never succeeds (wrong assets, wrong working directory)
into an error that names the last failure instead of a process that never returns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from benchmarks.base import BenchmarkError
from benchmarks.robotwin.config import EvalSetup
from benchmarks.robotwin.runtime import ExpertCheck, RoboTwinRuntime


class ScanExhausted(BenchmarkError):
    """Fewer seeds than requested passed the expert check within the allowed number of candidates."""


@dataclass(frozen=True)
class ScanResult:
    """The accepted seeds in order, and how many candidates were rejected for which reason."""

    first_seed: int
    accepted: list[ExpertCheck]
    rejected: dict[str, int] = field(default_factory=dict)


def first_seed(seed: int) -> int:
    """Upstream's ``st_seed``: ``--seed 0`` starts the scan at 100000."""
    return 100000 * (1 + seed)


def scan(runtime: RoboTwinRuntime, setup: EvalSetup, *, seed: int, episodes: int, max_candidates: int) -> ScanResult:
    """Checks candidate seeds in order until ``episodes`` are accepted or ``max_candidates`` are spent."""
    if not 1 <= episodes <= max_candidates:
        raise BenchmarkError(f"need 1 <= episodes ({episodes}) <= max_candidates ({max_candidates})")
    start = first_seed(seed)
    accepted: list[ExpertCheck] = []
    rejected: Counter[str] = Counter()
    env = runtime.acquire(setup.task)
    try:
        for candidate in range(start, start + max_candidates):
            if len(accepted) == episodes:
                break
            check = runtime.expert_check(env, setup, candidate, len(accepted))
            if check.accepted:
                accepted.append(check)
            else:
                rejected[check.outcome] += 1
                last = check
    finally:
        runtime.release(setup.task, env)
    if len(accepted) < episodes:
        raise ScanExhausted(
            f"{setup.task}/{setup.task_config}: only {len(accepted)} of {episodes} seeds passed the expert check "
            f"among {max_candidates} candidates from {start} (rejected: {dict(rejected)}; "
            f"last: seed {last.seed} {last.outcome} {last.detail})"
        )
    return ScanResult(first_seed=start, accepted=accepted, rejected=dict(rejected))
