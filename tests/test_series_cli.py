"""`scheduler series` against a real scheduler: the learning curve, the paired differences from a
baseline with Holm's and Bonferroni's corrections, the honest choice on a recorded split, the chart,
and the refusals (exit 2, one line, no traceback).

Workers are played by the test (claim, then report the outcomes it chooses per manifest and
episode), so every count is known. Expected intervals and p-values come from scipy
(``binomtest``, ``norm``), the split from its definition restated here, never from the code
under test.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from procs import cli, one_line_refusal
from test_results_report import CELLS, PNG_MAGIC

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.v1 import scheduler_pb2 as pb
from manifests.format import Manifest

stats = pytest.importorskip("scipy.stats", reason="the reference values come from scipy (pip install evalfleet[test])")
pytestmark = pytest.mark.timeout(180)
EPISODES = 10
Outcome = Callable[[int, int], bool]  # (manifest position in CELLS, episode index) -> success

# The checkpoints of one run, in training order: step1 3/10 per manifest; step2 5/10; step3 8/10;
# step4 9/10 on the first two manifests and 2/10 on the last two.
RUNS: dict[str, Outcome] = {
    "step1": lambda k, i: i < 3,
    "step2": lambda k, i: i < 5,
    "step3": lambda k, i: i < 8,
    "step4": lambda k, i: i < 9 if k < 2 else i < 2,
}


def _manifests(seed: int = 0) -> list[Manifest]:
    return [build_synthetic(EPISODES, seed=seed + k, task=t, setting=s) for k, (t, s) in enumerate(CELLS)]


def _drain(
    client: SchedulerClient, checkpoint: str, position: dict[str, int], succeed: Outcome, tasks: int = -1
) -> None:
    """Plays a worker of ``checkpoint``: each episode's outcome by its manifest's position."""
    while tasks != 0 and (lease := client.claim("w1", ["synthetic"], [checkpoint])) is not None:
        for index in lease.episodes:
            client.report_episode(lease, index, succeed(position[lease.manifest_hash], index), wall_seconds=0.1)
        client.complete(lease)
        tasks -= 1


def _submit_series(client: SchedulerClient) -> list[Manifest]:
    manifests = _manifests()
    position = {m.hash: k for k, m in enumerate(manifests)}
    for name, succeed in RUNS.items():
        checkpoint = hashlib.sha256(name.encode()).hexdigest()
        client.submit(manifests, "synthetic", batch_size=5, submission_id=name, checkpoint=checkpoint)
        _drain(client, checkpoint, position, succeed)
    return manifests


def _series(env: dict[str, str], *args: str) -> dict[str, Any]:
    run = cli("series", *args, "--json", env=env)
    assert run.returncode == 0, run.stderr
    data: dict[str, Any] = json.loads(run.stdout)
    return data


def _discordant(a: Outcome, b: Outcome) -> tuple[int, int]:
    """(a only, b only) over every episode of every manifest."""
    cells = [(a(k, i), b(k, i)) for k in range(len(CELLS)) for i in range(EPISODES)]
    return cells.count((True, False)), cells.count((False, True))


def _holm(p_values: list[float]) -> list[float]:
    """Holm's adjusted p-values written out: sorted ascending, (m - j + 1) p_(j), running maximum."""
    m, adjusted, running = len(p_values), [0.0] * len(p_values), 0.0
    for step, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - step) * p_values[index]))
        adjusted[index] = running
    return adjusted


def test_the_curve_the_differences_and_their_corrections(scheduler, tmp_path):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    _submit_series(client)
    data = _series(env, *RUNS)
    assert data["baseline"] == "step1" and data["comparisons"] == 3 and data["pairing"] == "same manifests"
    multiplicity = data["multiplicity"]
    assert (multiplicity["p_adjustment"], multiplicity["intervals"]) == ("Holm step-down", "Bonferroni")
    assert multiplicity["interval_level"] == pytest.approx(1 - 0.05 / 3)
    assert multiplicity["z"] == pytest.approx(stats.norm.ppf(1 - 0.05 / 6), rel=1e-12)
    rows = data["submissions"]
    assert [r["submission_id"] for r in rows] == list(RUNS) and [r["baseline"] for r in rows] == [1, 0, 0, 0]
    checkpoint = hashlib.sha256(b"step3").hexdigest()
    assert rows[2]["label"] == f"step3 ({checkpoint[:12]})" and rows[2]["checkpoint"] == checkpoint
    succeeded = [sum(s(k, i) for k in range(4) for i in range(EPISODES)) for s in RUNS.values()]
    assert [r["succeeded"] for r in rows] == succeeded == [12, 20, 32, 22]
    for row in rows:
        wilson = stats.binomtest(row["succeeded"], 40).proportion_ci(method="wilson")
        assert (row["success_rate_low"], row["success_rate_high"]) == pytest.approx(
            (wilson.low, wilson.high), abs=1e-12
        )
    assert rows[0]["difference"] is None and rows[0]["factors"] == []
    raw = []
    for name, row in zip(list(RUNS)[1:], rows[1:], strict=True):
        a_only, b_only = _discordant(RUNS["step1"], RUNS[name])
        difference = row["difference"]
        assert (difference["baseline_only"], difference["submission_only"], difference["pairs"]) == (a_only, b_only, 40)
        assert difference["estimate"] == pytest.approx((b_only - a_only) / 40, rel=1e-12)
        raw.append(stats.binomtest(a_only, a_only + b_only).pvalue)
        assert difference["p_value"] == pytest.approx(raw[-1], rel=1e-9)
        assert [f["name"] for f in row["factors"]] == ["checkpoint"]
    holm = _holm(raw)
    assert [r["difference"]["p_holm"] for r in rows[1:]] == pytest.approx(holm, rel=1e-9)
    assert [r["difference"]["significant"] for r in rows[1:]] == [p < 0.05 for p in holm] == [True, True, True]
    # The simultaneous intervals are wider than compare's 95% one for the same pair.
    pair = json.loads(cli("compare", "step1", "step2", "--json", env=env).stdout)["overall"]["difference"]
    assert rows[1]["difference"]["low"] < pair["low"] and pair["high"] < rows[1]["difference"]["high"]
    assert rows[1]["difference"]["p_value"] == pytest.approx(pair["p_value"], rel=1e-12)

    human = cli("series", *RUNS, env=env)
    assert human.returncode == 0, human.stderr
    out = human.stdout
    assert "series of 4 submissions on 4 manifests, baseline step1" in out and f"step3 ({checkpoint[:12]})" in out
    assert "Holm's step-down" in out and "simultaneous by Bonferroni (each at 98.33%" in out
    assert "98.33% CI" in out and "baseline" in out and "not simultaneous" in out
    assert "+20.0 pts" in out and "+50.0 pts" in out and "NOTE" not in out

    other = _series(env, *RUNS, "--baseline", "step3")
    assert other["baseline"] == "step3" and [r["baseline"] for r in other["submissions"]] == [0, 0, 1, 0]
    assert other["submissions"][0]["difference"]["estimate"] == pytest.approx(-0.5, rel=1e-12)

    plot = tmp_path / "series.png"
    drawn = cli("series", *RUNS, "--plot", str(plot), "--select-fraction", "0.5", env=env)
    assert drawn.returncode == 0, drawn.stderr
    assert plot.read_bytes().startswith(PNG_MAGIC)


def test_the_best_is_chosen_on_the_selection_set_and_reported_held_out(scheduler):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    manifests = _submit_series(client)
    position = {m.hash: k for k, m in enumerate(manifests)}
    # Seeds whose split puts both of step4's good manifests in the selection set, and seeds that do not.
    good = {manifests[0].hash, manifests[1].hash}
    ranked = {s: sorted(position, key=lambda h: hashlib.sha256(f"{s}\n{h}".encode()).hexdigest()) for s in range(50)}
    lucky = next(s for s in ranked if set(ranked[s][:2]) == good)
    plain = [s for s in ranked if set(ranked[s][:2]) != good][:2]
    chosen_ever = set()
    for seed in (lucky, *plain):
        data = _series(env, *RUNS, "--select-fraction", "0.5", "--split-seed", str(seed))["selection"]
        assert (data["seed"], data["fraction"]) == (seed, 0.5)
        on = [m["manifest_hash"] for m in data["selection_manifests"]]
        held = [m["manifest_hash"] for m in data["held_out_manifests"]]
        assert len(on) == len(held) == 2 and set(on).isdisjoint(held) and set(on) | set(held) == set(position)
        assert set(on) == set(ranked[seed][:2])
        wins = {name: sum(s(position[h], i) for h in on for i in range(EPISODES)) for name, s in RUNS.items()}
        best = next(name for name in RUNS if wins[name] == max(wins.values()))
        assert data["chosen"] == best and data["chosen_on_selection"]["succeeded"] == wins[best]
        assert [r["succeeded"] for r in data["on_selection"]] == list(wins.values())
        succeeded = sum(RUNS[best](position[h], i) for h in held for i in range(EPISODES))
        reported = data["reported_held_out"]
        wilson = stats.binomtest(succeeded, 20).proportion_ci(method="wilson")
        assert (reported["succeeded"], reported["completed"]) == (succeeded, 20)
        assert (reported["success_rate_low"], reported["success_rate_high"]) == pytest.approx(
            (wilson.low, wilson.high), abs=1e-12
        )
        assert "optimistically biased" in data["words"]
        chosen_ever.add(best)
    assert chosen_ever == {"step3", "step4"}, "the split decides: step4 wins only with both its good manifests in"

    human = cli("series", *RUNS, "--select-fraction", "0.5", "--split-seed", str(lucky), env=env)
    assert human.returncode == 0, human.stderr
    text = " ".join(human.stdout.split())
    assert f"honest selection: split seed {lucky}, fraction 0.5: 2 of 4 manifests to choose on, 2 held out" in text
    assert "chosen on the selection set: step4 (" in text and "90.0% [" in text and "(18/20 episodes)" in text
    assert "REPORTED, held out: step4 (" in text and "20.0% [" in text and "(4/20 episodes) on 2 manifests" in text
    assert "REPORTED, held out:" in text and "optimistically biased" in text and "held out: synthetic" in text
    assert "--split-seed applies only with --select-fraction" in one_line_refusal(
        cli("series", *RUNS, "--split-seed", "2", env=env)
    )


def test_refusals(scheduler):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    manifests = _submit_series(client)
    position = {m.hash: k for k, m in enumerate(manifests)}
    refusals = {
        ("step1",): "submissions: a series needs at least 2 submissions, got 1",
        ("step1", "step2", "step1"): "submissions: step1 given more than once",
        ("step1", "step2", "--baseline", "step9"): "baseline: step9 is not one of the series' submissions",
        ("step1", "step2", "--select-fraction", "1"): "select_fraction: 1.0 is outside (0, 1)",
        ("step1", "step2", "--select-fraction", "0.1"): "0.1 of 4 manifests leaves the selection set empty",
        ("step1", "step2", "--select-fraction", "0.9"): "0.9 of 4 manifests leaves the held-out set empty",
        ("step1", "step2", "--select-fraction", "0.5", "--split-seed", "-1"): "split_seed: -1 must be >= 0",
        ("step1", "nope"): "submission_id",
    }
    for args, words in refusals.items():
        assert words in one_line_refusal(cli("series", *args, env=env)), args

    client.submit(_manifests(seed=10), "synthetic", batch_size=5, submission_id="elsewhere", checkpoint="c-else")
    _drain(client, "c-else", {m.hash: k for k, m in enumerate(_manifests(seed=10))}, RUNS["step2"])
    refused = one_line_refusal(cli("series", "step1", "elsewhere", "step2", env=env))
    assert "manifests: elsewhere (only there: 4, missing: 4) evaluate different manifests from the baseline step1" in (
        refused
    )

    client.submit(manifests, "synthetic", batch_size=5, submission_id="half", checkpoint="c-half")
    _drain(client, "c-half", position, RUNS["step3"], tasks=4)
    refused = one_line_refusal(cli("series", "step1", "half", env=env))
    assert "complete: half incomplete" in refused and "--allow-incomplete" in refused
    marked = cli("series", "step1", "half", "--allow-incomplete", env=env)
    assert marked.returncode == 0, marked.stderr
    assert "half (c-half) (INCOMPLETE)" in marked.stdout
    data = _series(env, "step1", "half", "--allow-incomplete")
    assert data["submissions"][1]["complete"] is False and data["submissions"][1]["completed"] == 20
    assert data["submissions"][1]["difference"]["pairs"] == 20  # episodes both completed

    # One a sequential rule stopped early, and one still running: neither is a fixed-N sample.
    stopped = [build_synthetic(25, seed=s, task=f"t{s}") for s in range(8)]
    settings = pb.SequentialSettings(seed=3, threshold=0.5)
    client.submit(stopped, "synthetic", batch_size=1, submission_id="seq-stopped", sequential=settings)
    while (lease := client.claim("w1", ["synthetic"])) is not None:
        for index in lease.episodes:
            client.report_episode(lease, index, True, wall_seconds=0.1)
        client.complete(lease)
    summary = client.summary("seq-stopped")
    assert summary.sequential.stopped_at > 0 and not summary.complete
    running = pb.SequentialSettings(seed=3)
    client.submit(manifests, "synthetic", batch_size=5, submission_id="seq-running", sequential=running)
    for name, standing in (("seq-running", "sequential, still running"), ("seq-stopped", "stopped early")):
        refused = one_line_refusal(cli("series", "step1", name, "--allow-incomplete", env=env))
        assert refused.startswith(f"scheduler: sequential: {name} ({standing}") and "not a fixed-size sample" in refused
