"""The scheduler's Prometheus /metrics against a real process: levels from the database, counted events."""

from __future__ import annotations

import time

import pytest
from dashboard_proc import call, start_with_dashboard
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.synthetic.manifest import build_synthetic

pytestmark = pytest.mark.timeout(120)


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = call(url + "metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_tasks_by_state_claims_retries_expiries_and_episodes(start_scheduler):
    proc, url = start_with_dashboard(start_scheduler, "--lease-seconds", "1")
    client = proc.client()
    client.submit([build_synthetic(6, seed=4)], "synthetic", batch_size=2, max_attempts=3, submission_id="m")
    first = client.claim("w1", ["synthetic"])
    for index in first.episodes:
        client.report_episode(first, index, True)
    client.complete(first)
    second = client.claim("w1", ["synthetic"])
    assert client.fail(second, "sim crashed", retryable=True) == "pending"
    assert client.claim("w1", ["other-route"]) is None
    lost = client.claim("w2", ["synthetic"])
    deadline = time.monotonic() + 30
    while client.task(lost.task_id).attempts[-1].outcome != "lost":
        assert time.monotonic() < deadline, "the reaper never reclaimed the lease"
        time.sleep(0.1)

    samples = _samples(url)
    tasks = {
        state: samples[("evalfleet_scheduler_tasks", (("state", state),))]
        for state in ("pending", "leased", "succeeded", "failed", "cancelled")
    }
    assert tasks == {"pending": 2, "leased": 0, "succeeded": 1, "failed": 0, "cancelled": 0}
    assert samples[("evalfleet_scheduler_claims_total", (("outcome", "leased"),))] == 3
    assert samples[("evalfleet_scheduler_claims_total", (("outcome", "empty"),))] == 1
    assert samples[("evalfleet_scheduler_claim_seconds_count", ())] == 4
    assert samples[("evalfleet_scheduler_retries_total", ())] == 1
    assert samples[("evalfleet_scheduler_lease_expiries_total", ())] == 1
    assert samples[("evalfleet_scheduler_episodes_total", ())] == 2
    assert samples[("evalfleet_scheduler_episodes_planned", ())] == 6
    assert (
        samples[("evalfleet_scheduler_workers", (("state", "lost"),))]
        + samples[("evalfleet_scheduler_workers", (("state", "idle"),))]
        == 2
    )
