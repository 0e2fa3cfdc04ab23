"""`scheduler compare` names what differs between two paired submissions, and pairs the same
trials built under two simulator stacks, against a real scheduler.

A second simulator stack is not installed here, so the second stack's manifests are the first's
with ``versions`` edited and re-sealed by ``manifests.format.build``, the function every builder
seals with: that is all another stack's build of these (synthetic, stack-independent) trials
changes. LIBERO's stack-computed entry fields are pinned in
``tests/adapters/test_libero_trial_identity.py``. Expected p-values come from scipy's
``binomtest`` (the exact McNemar test is a binomial test on the discordant pairs), never from the
code under test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from procs import cli, one_line_refusal

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient
from manifests.format import Manifest, build, write

stats = pytest.importorskip("scipy.stats", reason="the reference values come from scipy (pip install evalfleet[test])")
pytestmark = pytest.mark.timeout(120)
CELLS = [("open_drawer", "clean"), ("stack_blocks", "clean")]
EPISODES = 10
STACK_A = {"mujoco": "2.3.7", "robosuite": "1.4.0", "python": "3.11.7"}
STACK_B = {"mujoco": "3.1.6", "robosuite": "1.4.0", "python": "3.11.7"}


def _manifests(seed: int = 0) -> list[Manifest]:
    return [build_synthetic(EPISODES, seed=seed + i, task=t, setting=s) for i, (t, s) in enumerate(CELLS)]


def _under(manifest: Manifest, versions: Mapping[str, Any], **edits: Any) -> Manifest:
    """``manifest`` re-sealed as a build under the stack ``versions`` (and with ``edits``) gives it."""
    data = manifest.data
    parts = {k: data[k] for k in ("benchmark", "task", "setting", "protocol", "source", "episodes")}
    return build(**{**parts, "versions": versions, **edits})


def _drain(client: SchedulerClient, submission_id: str, checkpoint: str, succeed: Callable[[int], bool]) -> None:
    """Runs the submission as a worker would, recording the actions per chunk its leases carry
    (the checkpoint's declared 5 when the submission does not override it)."""
    while (lease := client.claim("w1", ["synthetic"], [checkpoint])) is not None:
        assert lease.submission_id == submission_id
        steps = lease.execute_steps if lease.HasField("execute_steps") else 5
        for index in lease.episodes:
            client.report_episode(lease, index, succeed(index), wall_seconds=0.1, execute_steps=steps)
        client.complete(lease)


def _compare(env: dict[str, str], *args: str) -> dict[str, Any]:
    run = cli("compare", *args, "--json", env=env)
    assert run.returncode == 0, run.stderr
    data: dict[str, Any] = json.loads(run.stdout)
    return data


def test_compare_names_the_policy_side_factor_and_both_values(scheduler):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    runs = {  # submission: (checkpoint, execute_steps override, outcome of episode i)
        "chunk5": ("ckpt-a", 5, lambda i: i % 2 == 0),  # 5 of 10 per manifest
        "chunk10": ("ckpt-a", 10, lambda i: i % 2 == 0 or i in (1, 3, 5, 7)),  # + 4 discordant, all for B
        "default": ("ckpt-a", None, lambda i: i % 2 == 0),
        "other": ("ckpt-b", 10, lambda i: i % 2 == 0),
    }
    for submission_id, (checkpoint, steps, succeed) in runs.items():
        client.submit(_manifests(), "synthetic", batch_size=5, submission_id=submission_id, checkpoint=checkpoint,
                      execute_steps=steps)  # fmt: skip
        _drain(client, submission_id, checkpoint, succeed)

    data = _compare(env, "chunk5", "chunk10")
    assert (data["paired"], data["pairing"], data["stack_links"]) == (True, "same manifests", [])
    assert [(f["name"], f["a"], f["b"]) for f in data["factors"]] == [
        ("execute_steps", "5 (override)", "10 (override)")
    ]
    overall = data["overall"]["difference"]
    assert (overall["pairs"], overall["test"]) == (20, "exact McNemar")
    assert overall["estimate"] == pytest.approx(8 / 20, rel=1e-12)
    assert overall["p_value"] == pytest.approx(stats.binomtest(0, 8).pvalue, rel=1e-9)
    human = cli("compare", "chunk5", "chunk10", env=env).stdout
    assert "paired by trial (same manifests" in human and "exact McNemar" in human
    assert "differs: execute_steps 5 (override) vs 10 (override)" in human and "factors differ" not in human

    # The checkpoint's own value against an override of the same value is no factor; its source shows.
    same = _compare(env, "default", "chunk5")
    assert same["factors"] == [] and same["overall"]["difference"]["estimate"] == 0.0
    assert "differs: nothing recorded" in cli("compare", "default", "chunk5", env=env).stdout

    checkpoint = _compare(env, "chunk10", "other")
    assert [(f["name"], f["a"], f["b"]) for f in checkpoint["factors"]] == [("checkpoint", "ckpt-a", "ckpt-b")]

    both = cli("compare", "chunk5", "other", env=env).stdout
    assert "differs: checkpoint ckpt-a vs ckpt-b" in both and "differs: execute_steps 5 (override) vs 10" in both
    assert "NOTE 2 factors differ at once (checkpoint, execute_steps)" in both


def _shown(manifest: Manifest, tmp_path: Path) -> dict[str, str]:
    """`scheduler manifest show`'s trials and stack id lines."""
    run = cli("manifest", "show", str(write(manifest, tmp_path)))
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(None, 1) for line in run.stdout.splitlines() if line.startswith(("trials", "stack id")))
    return {key: value.removeprefix("id").strip() for key, value in lines.items()}


def test_the_same_trials_under_two_stacks_pair_by_trial_and_say_the_stack_differs(scheduler, tmp_path):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    under_a = [_under(m, STACK_A) for m in _manifests()]
    under_b = [_under(m, STACK_B) for m in _manifests()]
    assert {m.hash for m in under_a}.isdisjoint(m.hash for m in under_b)
    shown_a, shown_b = _shown(under_a[0], tmp_path), _shown(under_b[0], tmp_path)
    assert shown_a["trials"] == shown_b["trials"] and shown_a["stack"] != shown_b["stack"]
    assert shown_a["trials"] != _shown(under_a[1], tmp_path)["trials"]
    runs = {
        "stack-a": (under_a, lambda i: i < 6),
        "stack-b": (under_b, lambda i: i < 3),  # 3 discordant per manifest, all for A
    }
    for submission_id, (manifests, succeed) in runs.items():
        client.submit(manifests, "synthetic", batch_size=5, submission_id=submission_id, checkpoint="ckpt")
        _drain(client, submission_id, "ckpt", succeed)

    data = _compare(env, "stack-a", "stack-b")
    assert (data["paired"], data["pairing"]) == (True, "same trials, other stack")
    assert [(row["manifest_hash"], row["manifest_hash_b"]) for row in data["rows"]] == [
        (a.hash, b.hash) for a, b in zip(under_a, under_b, strict=True)
    ]
    assert [link["distributions"] for link in data["stack_links"]] == [["mujoco 2.3.7 vs 3.1.6"]] * 2
    (factor,) = data["factors"]
    assert factor["name"] == "simulator stack" and factor["details"] == ["mujoco 2.3.7 vs 3.1.6"]
    assert factor["a"] != factor["b"]
    overall = data["overall"]["difference"]
    assert (overall["pairs"], overall["estimate"]) == (20, pytest.approx(-6 / 20, rel=1e-12))
    assert overall["p_value"] == pytest.approx(stats.binomtest(0, 6).pvalue, rel=1e-9)
    human = cli("compare", "stack-a", "stack-b", env=env).stdout
    assert "paired by trial (same trials, other manifests): 2 of 2 manifests matched by trial identity" in human
    assert "differs: simulator stack" in human and "mujoco 2.3.7 vs 3.1.6" in human


def test_manifests_of_other_trials_never_pair_across_stacks(scheduler):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    base = _manifests()
    first = base[0].episodes
    reseeded = [{**first[0], "seed": first[0]["seed"] + 1}, *first[1:]]
    reordered = [first[1], first[0], *first[2:]]
    submissions = {
        "a": [_under(m, STACK_A) for m in base],
        "other-seed": [_under(base[0], STACK_B, episodes=reseeded), _under(base[1], STACK_B)],
        "other-order": [_under(base[0], STACK_B, episodes=reordered), _under(base[1], STACK_B)],
        "other-protocol": [_under(base[0], STACK_B, protocol={"success_rate": 0.9}), _under(base[1], STACK_B)],
        "twice": [*(_under(m, STACK_B) for m in base), _under(base[0], {"mujoco": "3.2.0"})],
        "one-less": [_under(base[0], STACK_B)],
    }
    for submission_id, manifests in submissions.items():
        client.submit(manifests, "synthetic", batch_size=10, submission_id=submission_id, checkpoint="ckpt")
        _drain(client, submission_id, "ckpt", lambda i: True)
    for other in ("other-seed", "other-order", "other-protocol", "twice", "one-less"):
        stderr = one_line_refusal(cli("compare", "a", other, env=env))
        assert "different manifests" in stderr and "not the same trials" in stderr and "--unpaired" in stderr
    assert "without a twin of the same trial identity: 1 and 1" in one_line_refusal(
        cli("compare", "a", "other-seed", env=env)
    )
    assert _compare(env, "a", "one-less", "--unpaired")["paired"] is False
