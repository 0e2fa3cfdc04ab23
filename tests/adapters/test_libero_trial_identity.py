"""The same LIBERO trials built under two stacks share a trial identity, and `scheduler compare`
pairs them; any change to what defines a trial breaks the identity.

Only one simulator stack is installed, so the second stack's manifest is a real build with what
another MuJoCo would record differently edited in: ``versions``, and the entry fields the scan
computes with the simulator (fixture poses, solver warm start, initial-observation digest), then
re-sealed by ``manifests.format.build``, the function the builder seals with. The registry's list of
those fields is checked against what the real build records, so it cannot fall behind the builder.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest
from libero_guard import LIBERO_MISSING, REASON
from procs import cli, one_line_refusal

from benchmarks import definition, stack_id, trial_identity
from manifests.format import Manifest, build

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

from benchmarks.libero.build import add_build_arguments, build_manifests

pytestmark = [pytest.mark.libero, pytest.mark.timeout(240)]
TRIALS = 2


@pytest.fixture(scope="module")
def built() -> Manifest:
    """libero_spatial task 0 (it has fixtures), scanned here with the observation digests."""
    parser = argparse.ArgumentParser()
    add_build_arguments(parser)
    argv = ["--suite", "libero_spatial", "--tasks", "0", "--trials", str(TRIALS), "--jobs", "1"]
    argv += ["--camera-size", "64", "--max-steps", "4", "--observation-digest"]
    (manifest,) = build_manifests(parser.parse_args(argv))
    return manifest


def _nudged(value: Any) -> Any:
    """``value`` with every float moved by 1e-6, as another solver's numbers would be."""
    if isinstance(value, float):
        return value + 1e-6
    if isinstance(value, list):
        return [_nudged(v) for v in value]
    if isinstance(value, dict):
        return {k: _nudged(v) for k, v in value.items()}
    return value


def _resealed(manifest: Manifest, **edits: Any) -> Manifest:
    data = manifest.data
    parts = {k: data[k] for k in ("benchmark", "task", "setting", "protocol", "versions", "source", "episodes")}
    return build(**{**parts, **edits})


def _other_stack(manifest: Manifest) -> Manifest:
    """What a build of the same trials under MuJoCo 3.1.6 changes: versions and what the scan reads
    back from the simulator (benchmarks/libero/build.py: the poses, the warm start, the render)."""
    episodes = [
        {**e, "fixture_poses": _nudged(e["fixture_poses"]), "qacc_warmstart": _nudged(e["qacc_warmstart"])}
        | {"initial_observation_digest": "0" * 64}
        for e in manifest.episodes
    ]
    return _resealed(manifest, versions={**manifest.data["versions"], "mujoco": "3.1.6"}, episodes=episodes)


def test_the_trial_identity_ignores_the_stack_and_nothing_else(built):
    computed = definition("libero").stack_computed
    assert all(set(computed) <= set(entry) for entry in built.episodes), "the registry names what the scan records"
    assert any(entry["fixture_poses"] for entry in built.episodes), "libero_spatial 0 places fixtures"
    other = _other_stack(built)
    assert other.hash != built.hash and trial_identity(other) == trial_identity(built)

    first = built.episodes[0]
    changed = {
        "init_state": [{**first, "init_state": _nudged(first["init_state"])}, *built.episodes[1:]],
        "instruction": [{**first, "instruction": "pick up the bowl"}, *built.episodes[1:]],
        "order": [*reversed(built.episodes)],
        "one trial less": built.episodes[:1],
    }
    for what, episodes in changed.items():
        assert trial_identity(_resealed(built, episodes=episodes)) != trial_identity(built), what
    protocol = {**built.data["protocol"], "max_steps": 5}
    assert trial_identity(_resealed(built, protocol=protocol)) != trial_identity(built)
    source = {**built.data["source"], "init_sha256": "0" * 64}
    assert trial_identity(_resealed(built, source=source)) != trial_identity(built)


def test_compare_pairs_libero_trials_across_stacks_and_names_what_differs(built, scheduler):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    other = _other_stack(built)
    moved = _resealed(other, episodes=[{**e, "init_state": _nudged(e["init_state"])} for e in other.episodes])
    for submission_id, manifest, won in (("here", built, {0, 1}), ("there", other, {0}), ("moved", moved, {0})):
        client.submit([manifest], "libero", batch_size=TRIALS, submission_id=submission_id, checkpoint="ckpt")
        # The scheduler hands a LIBERO task only to a worker on its manifest's stack.
        lease = client.claim("w1", ["libero"], ["ckpt"], [stack_id("libero", manifest.data["versions"])])
        assert lease is not None and lease.submission_id == submission_id
        for index in lease.episodes:
            client.report_episode(lease, index, index in won, wall_seconds=0.1)
        client.complete(lease)

    run = cli("compare", "here", "there", "--json", env=env)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert (data["pairing"], data["overall"]["difference"]["pairs"]) == ("same trials, other stack", TRIALS)
    (link,) = data["stack_links"]
    mujoco = f"mujoco {built.data['versions']['mujoco']} vs 3.1.6"
    assert (link["manifest_a"], link["manifest_b"], link["distributions"]) == (built.hash, other.hash, [mujoco])
    assert link["stack_computed_differences"] == {
        "fixture_poses": TRIALS,
        "initial_observation_digest": TRIALS,
        "qacc_warmstart": TRIALS,
    }
    human = cli("compare", "here", "there", env=env).stdout
    assert f"{mujoco}; fixture_poses recorded differently in 2 of 2 episodes" in human
    # Other init states are other trials, whatever else matches.
    assert "not the same trials" in one_line_refusal(cli("compare", "here", "moved", env=env))
