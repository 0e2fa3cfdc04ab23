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


# -- policy-decided entries (outcomes="policy"): the benchmarking device for comparing checkpoints --


def _answer(shift: float, own_draw: float) -> np.ndarray:
    """What a `synthetic-skill` checkpoint answers: [shift, its own draw, 0, ...]."""
    return np.array([shift, own_draw, 0, 0, 0, 0, 0], dtype=np.float64)


def _decided(adapter: SyntheticBenchmark, manifest, index: int, shift: float, own_draw: float):
    episode = adapter.open_episode(manifest, index)
    episode.reset()
    while not episode.done:
        episode.step(_answer(shift, own_draw))
    return episode.result(), episode.max_steps


def test_the_default_builds_the_same_manifests_as_before_the_option() -> None:
    # Pinned from the builder as it was before `outcomes` existed: fixed manifests keep their hashes.
    assert build_synthetic(5, seed=7, mean_seconds=2.0).hash == (
        "43547c47723065448122116fdc73c6ab94acfa4975e13b5d5d3fbda2d2be3780"
    )
    fixed = build_synthetic(20, seed=3, outcomes="fixed", shared_fraction=0.9)
    assert fixed.hash == build_synthetic(20, seed=3).hash
    assert all(set(e) == {"episode_id", "seed", "duration_s", "success"} for e in fixed.episodes)
    assert set(fixed.data["protocol"]) == {"mean_seconds", "success_rate", "sigma"}


def test_a_policy_decided_manifest_holds_draws_instead_of_a_success() -> None:
    manifest = build_synthetic(400, seed=3, success_rate=0.3, outcomes="policy", shared_fraction=0.25)
    assert manifest.hash != build_synthetic(400, seed=3, success_rate=0.3).hash
    assert manifest.data["protocol"]["outcomes"] == "policy"
    entries = manifest.episodes
    assert all("success" not in e and e["base_rate"] == 0.3 for e in entries)
    assert all(0 <= e["draw"] < 1 and 0.25 <= e["success_at"] <= 0.75 for e in entries)
    shared = sum(e["draw_shared"] for e in entries)
    assert 60 < shared < 140, shared  # 25% of 400, binomial sd 8.7
    assert build_synthetic(400, seed=3, success_rate=0.3, outcomes="policy", shared_fraction=0.25) == manifest
    with pytest.raises(ValueError, match="outcomes must be one of fixed, policy"):
        build_synthetic(2, outcomes="skill")
    with pytest.raises(ValueError, match="shared_fraction"):
        build_synthetic(2, outcomes="policy", shared_fraction=1.5)


def test_the_outcome_follows_the_shared_draw_or_the_policys_own_and_its_declared_shift() -> None:
    manifest = build_synthetic(60, seed=4, success_rate=0.5, outcomes="policy", shared_fraction=0.5)
    adapter = SyntheticBenchmark(time_scale=0.0)
    entries = manifest.episodes
    assert {e["draw_shared"] for e in entries} == {True, False}
    for index, entry in enumerate(entries):
        for shift in (-0.3, 0.0, 0.25):
            for own in (0.05, 0.6, 0.95):
                result, _ = _decided(adapter, manifest, index, shift, own)
                deciding = entry["draw"] if entry["draw_shared"] else own
                assert result.success is (deciding < min(1.0, max(0.0, 0.5 + shift))), (entry, shift, own)
                assert result.info["success_probability"] == pytest.approx(0.5 + shift)
        # A shift of +-1 decides every episode whatever the draws.
        assert _decided(adapter, manifest, index, 1.0, 0.99)[0].success is True
        assert _decided(adapter, manifest, index, -1.0, 0.0)[0].success is False
    # Two checkpoints of equal skill agree on every shared episode, not on every other one.
    a = [_decided(adapter, manifest, i, 0.0, 0.2)[0].success for i in range(60)]
    b = [_decided(adapter, manifest, i, 0.0, 0.8)[0].success for i in range(60)]
    assert all(x == y for x, y, e in zip(a, b, entries, strict=True) if e["draw_shared"])
    assert any(x != y for x, y, e in zip(a, b, entries, strict=True) if not e["draw_shared"])


def test_a_success_ends_at_its_fraction_of_the_steps_and_a_failure_takes_them_all() -> None:
    manifest = build_synthetic(30, seed=5, mean_seconds=2.0, outcomes="policy")
    adapter = SyntheticBenchmark(time_scale=0.0, steps_per_second=10.0)
    for index, entry in enumerate(manifest.episodes):
        success, total = _decided(adapter, manifest, index, 1.0, 0.5)
        failure, same_total = _decided(adapter, manifest, index, -1.0, 0.5)
        assert total == same_total == max(1, round(entry["duration_s"] * 10.0))
        assert success.success and not failure.success
        assert success.steps == max(1, round(total * entry["success_at"])) and failure.steps == total
        assert success.steps < failure.steps or total == 1
    # Paced in wall time, the episode's length follows its steps: a success ends early in wall time too.
    entry = {"episode_id": "e", "duration_s": 0.4, "seed": 1, "base_rate": 0.5, "draw": 0.1}
    one = _manifest([{**entry, "draw_shared": True, "success_at": 0.25}])
    paced = SyntheticBenchmark(time_scale=1.0)
    episode = paced.open_episode(one, 0)
    episode.reset()
    episode.step(_answer(0.0, 0.9))
    assert episode.done and episode.result().success and episode.result().steps == 1


def test_an_answer_that_declares_no_skill_is_refused_naming_the_component() -> None:
    manifest = build_synthetic(1, seed=6, outcomes="policy")
    adapter = SyntheticBenchmark(time_scale=0.0)
    for action, field in (
        (_answer(1.5, 0.5), "action[0]"),
        (_answer(0.0, 1.0), "action[1]"),
        (_answer(0.0, -0.1), "action[1]"),
    ):
        episode = adapter.open_episode(manifest, 0)
        episode.reset()
        with pytest.raises(BenchmarkError) as raised:
            episode.step(action)
        assert raised.value.field == field
    with pytest.raises(BenchmarkError) as raised:
        SyntheticBenchmark(action_dim=1).open_episode(manifest, 0)
    assert raised.value.field == "action_dim"
    # A fixed manifest reads nothing from the actions: any finite answer runs it.
    assert _run(adapter, build_synthetic(1, seed=6), 0)[0].steps >= 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"draw": 1.0}, "episodes[0].draw"),
        ({"draw": "0.5"}, "episodes[0].draw"),
        ({"base_rate": 1.2}, "episodes[0].base_rate"),
        ({"draw_shared": 1}, "episodes[0].draw_shared"),
        ({"success_at": 0.0}, "episodes[0].success_at"),
        ({"success": True}, "episodes[0].success"),
    ],
)
def test_malformed_policy_decided_entries_name_their_field(changes: dict, field: str) -> None:
    entry = {
        "episode_id": "e",
        "duration_s": 1.0,
        "seed": 1,
        "base_rate": 0.5,
        "draw": 0.3,
        "draw_shared": False,
        "success_at": 0.5,
    }
    with pytest.raises(BenchmarkError) as raised:
        SyntheticBenchmark().open_episode(_manifest([{**entry, **changes}]), 0)
    assert raised.value.field == field
