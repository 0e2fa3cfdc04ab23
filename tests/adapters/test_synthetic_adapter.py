"""The synthetic adapter and the adapter registry: exact outcomes, determinism, pacing, bad input."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks import adapter_class, names
from benchmarks.base import BenchmarkError
from benchmarks.synthetic.adapter import SyntheticBenchmark
from benchmarks.synthetic.manifest import build_synthetic
from manifests.format import ManifestError, build

pytestmark = pytest.mark.timeout(30)


def _run(adapter: SyntheticBenchmark, manifest, index: int):
    episode = adapter.open_episode(manifest, index)
    observations = [episode.reset()]
    while not episode.done:
        observations.append(episode.step(np.zeros(episode.action_dim)))
    return episode.result(), observations


def _manifest(entries: list[dict]):
    return build(benchmark="synthetic", task="t", setting="s", episodes=entries)


def test_steps_and_success_follow_the_manifest() -> None:
    manifest = build_synthetic(20, seed=3, mean_seconds=0.5)
    adapter = SyntheticBenchmark(time_scale=0.0, steps_per_second=10.0)
    for index, entry in enumerate(manifest.episodes):
        result, observations = _run(adapter, manifest, index)
        assert result.steps == max(1, round(entry["duration_s"] * 10.0))
        assert len(observations) == result.steps + 1
        assert result.success is entry["success"]
    assert {e["success"] for e in manifest.episodes} == {True, False}


def test_episodes_are_deterministic_and_distinct() -> None:
    manifest = build_synthetic(4, seed=5, mean_seconds=0.4)
    adapter = SyntheticBenchmark(time_scale=0.0)
    forward = [_run(adapter, manifest, i)[0].trace_digest for i in range(4)]
    backward = [_run(SyntheticBenchmark(time_scale=0.0), manifest, i)[0].trace_digest for i in reversed(range(4))]
    assert forward == backward[::-1]
    assert len(set(forward)) == 4
    _, first = _run(adapter, manifest, 0)
    _, again = _run(adapter, manifest, 0)
    assert first[0].images["camera"].shape == (8, 8, 3) and first[0].images["camera"].dtype == np.uint8
    assert all(np.array_equal(a.images["camera"], b.images["camera"]) for a, b in zip(first, again, strict=True))


def test_time_scale_paces_wall_time() -> None:
    manifest = _manifest([{"episode_id": "e", "duration_s": 0.4, "success": True, "seed": 1}])
    started = time.monotonic()
    real, _ = _run(SyntheticBenchmark(time_scale=1.0), manifest, 0)
    real_s = time.monotonic() - started
    started = time.monotonic()
    half, _ = _run(SyntheticBenchmark(time_scale=0.5), manifest, 0)
    half_s = time.monotonic() - started
    assert real.steps == half.steps == 4
    assert real.trace_digest == half.trace_digest
    assert 0.4 <= real_s < 1.5
    assert 0.2 <= half_s < real_s


def test_unfinished_episode_reports_no_success() -> None:
    manifest = _manifest([{"episode_id": "e", "duration_s": 1.0, "success": True, "seed": 1}])
    episode = SyntheticBenchmark(time_scale=0.0).open_episode(manifest, 0)
    episode.reset()
    episode.step(np.zeros(7))
    assert not episode.done
    assert episode.result().success is False and episode.result().steps == 1


def test_invalid_actions_and_steps_past_the_end_are_refused() -> None:
    manifest = _manifest([{"episode_id": "e", "duration_s": 0.0, "success": False, "seed": 1}])
    episode = SyntheticBenchmark(time_scale=0.0).open_episode(manifest, 0)
    episode.reset()
    with pytest.raises(ValueError, match="7 finite numbers"):
        episode.step(np.zeros(6))
    with pytest.raises(ValueError, match="7 finite numbers"):
        episode.step(np.full(7, np.nan))
    episode.step(np.zeros(7))
    assert episode.done and episode.result().steps == 1
    with pytest.raises(RuntimeError, match="is done"):
        episode.step(np.zeros(7))


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"duration_s": -1.0, "success": True, "seed": 1}, "episodes[0].duration_s"),
        ({"duration_s": 1.0, "success": 1, "seed": 1}, "episodes[0].success"),
        ({"duration_s": 1.0, "success": True, "seed": "7"}, "episodes[0].seed"),
    ],
)
def test_malformed_entries_name_their_field(entry: dict, field: str) -> None:
    manifest = _manifest([{"episode_id": "e", **entry}])
    with pytest.raises(BenchmarkError) as raised:
        SyntheticBenchmark().open_episode(manifest, 0)
    assert raised.value.field == field


def test_wrong_manifest_is_refused_before_running() -> None:
    adapter = SyntheticBenchmark(time_scale=0.0)
    manifest = build_synthetic(2)
    with pytest.raises(BenchmarkError) as raised:
        adapter.open_episode(manifest, 2)
    assert raised.value.field == "index"
    other = build(benchmark="libero", task="t", setting="s", episodes=[{"episode_id": "x"}])
    with pytest.raises(BenchmarkError) as raised:
        adapter.open_episode(other, 0)
    assert raised.value.field == "benchmark"
    tampered = dataclasses.replace(manifest, hash=build_synthetic(2, seed=1).hash)
    with pytest.raises(ManifestError) as raised:
        adapter.open_episode(tampered, 0)
    assert raised.value.field == "hash"


def test_registry_resolves_names_and_refuses_unknown_ones() -> None:
    assert {"libero", "synthetic"} <= set(names())
    assert adapter_class("synthetic") is SyntheticBenchmark
    with pytest.raises(BenchmarkError) as raised:
        adapter_class("mujoco-soccer")
    assert raised.value.field == "benchmark" and "synthetic" in str(raised.value)


def test_registry_imports_no_simulator_until_asked() -> None:
    code = (
        "import sys; import benchmarks as b; b.adapter_class('synthetic'); "
        "print(sorted(m for m in ('libero', 'robosuite', 'mujoco') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=25)
    assert out.stdout.strip() == "[]"


def test_artifact_bytes_writes_one_file_per_episode_that_differs_between_attempts(tmp_path):
    manifest = build_synthetic(1, seed=2)
    assert _run(SyntheticBenchmark(time_scale=0.0), manifest, 0)[0].artifacts == ()
    adapter = SyntheticBenchmark(time_scale=0.0, artifact_bytes=500, artifact_dir=str(tmp_path))
    first, second = (_run(adapter, manifest, 0)[0].artifacts for _ in range(2))
    assert len(first) == len(second) == 1 and first[0].kind == "synthetic"
    data = [Path(artifact.path).read_bytes() for artifact in (*first, *second)]
    assert [len(d) for d in data] == [500, 500] and data[0] != data[1]
    assert data[0].startswith(f"synthetic artifact {manifest.episodes[0]['episode_id']} ".encode())
    with pytest.raises(ValueError, match="artifact_bytes"):
        SyntheticBenchmark(artifact_bytes=-1)
