"""The inference server's Prometheus /metrics on --metrics-port, against a real process."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from inference_helpers import episode, free_port, images, make_checkpoint, state
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _samples(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels or sample.labels == {"le": "+Inf"}
    }


def test_sessions_steps_batch_size_queue_delay_and_latency(tmp_path: Path, start_server) -> None:
    make_checkpoint(tmp_path, "deterministic")
    metrics_port = free_port()
    server = start_server(tmp_path, "--metrics-port", str(metrics_port))
    before = _samples(metrics_port)
    assert (before["evalfleet_policy_sessions"], before["evalfleet_policy_steps_total"]) == (0, 0)
    with server.client() as client:
        with client.open_session(client.identity().digest, episode()) as session:
            for step in range(3):
                session.act(images(), state(float(step)), step=step, executed=4 if step else 0)
            during = _samples(metrics_port)
    assert (during["evalfleet_policy_sessions"], during["evalfleet_policy_streams"]) == (1, 1)
    assert during["evalfleet_policy_steps_total"] == 3
    assert during["evalfleet_policy_batches_total"] == 3
    assert during["evalfleet_policy_step_batch_size_sum"] == 3
    assert during["evalfleet_policy_step_latency_ms_count"] == 3
    assert during["evalfleet_policy_queue_delay_ms_count"] == 3
    assert during["evalfleet_policy_step_latency_ms_sum"] >= during["evalfleet_policy_model_ms_sum"] > 0


def test_metrics_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "inference_server.cli", "--epoch", "x", "--metrics-port", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "--metrics-port" in run.stderr
