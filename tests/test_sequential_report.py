"""How sequential submissions are reported, through a real scheduler and its CLI and dashboard:
the verdict and stop beside the counts, and no fixed-N interval or test where it is not valid (a
stopped or still-running sequential submission), while a sequential run that reached its end has
its fixed-N numbers back. Workers are played by the test (claim, then complete with chosen outcomes).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from dashboard_proc import call, start_with_dashboard
from procs import cli, one_line_refusal

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient, episode_result
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import sequential_report

pytestmark = pytest.mark.timeout(180)

SEED = 11


def run_to_the_end(client: SchedulerClient, succeeds: dict[str, bool]) -> None:
    """Claims and completes every task there is, each episode succeeding as its submission says."""
    while (lease := client.claim("w", ["synthetic"])) is not None:
        outcome = succeeds[lease.submission_id]
        client.complete(lease, episodes=[episode_result(i, outcome, steps=5) for i in lease.episodes])


def stopped_comparison(client: SchedulerClient) -> None:
    """A (always succeeds) and B (never) on 8 tasks x 10 episodes, paired: decided long before the end."""
    manifests = [build_synthetic(10, seed=s, task=f"t{s}") for s in range(8)]
    client.submit(manifests, "synthetic", batch_size=1, submission_id="A", sequential=pb.SequentialSettings(seed=SEED))
    paired = pb.SequentialSettings(paired_with="A")
    client.submit(manifests, "synthetic", batch_size=1, submission_id="B", sequential=paired)
    run_to_the_end(client, {"A": True, "B": False})


def test_a_stopped_comparison_reports_its_verdict_and_no_fixed_n_numbers(scheduler) -> None:
    client = scheduler.client()
    stopped_comparison(client)
    server = ("--server", scheduler.address)

    table = cli("compare", "A", "B", *server)
    assert table.returncode == 0, table.stderr
    assert "B - A, sequential: stopped: A better than B (sequential McNemar" in table.stdout, table.stdout
    assert f"fixed-N differences, intervals and tests below are {sequential_report.FIXED_N_NOT_VALID}" in " ".join(
        table.stdout.split()
    )
    assert "significant" in table.stdout and " yes" not in table.stdout and "pts" not in table.stdout

    only = cli("compare", "--sequential", "A", "B", *server)
    assert only.returncode == 0 and only.stdout.startswith("B - A, sequential: stopped: A better than B"), only
    document = json.loads(cli("compare", "A", "B", "--json", *server).stdout)
    assert document["fixed_n_valid"] is False and document["overall"]["difference"] is None
    assert document["overall"]["a"]["success_rate"] == 1.0 and document["overall"]["a"]["success_rate_low"] is None
    state = document["sequential"]
    assert state["verdict"] == "different" and state["settings"]["paired_with"] == "A" and state["stopped_at_utc"]
    assert state["p_value"] <= 0.01 and state["high"] < 0 and "B's rate minus A's" in state["interval"]

    swapped = one_line_refusal(cli("compare", "--sequential", "B", "A", *server))
    assert "name the partner first (scheduler compare --sequential A B)" in swapped
    shown = " ".join(cli("status", "A", *server).stdout.split())
    (a,) = client.status("A").submissions
    assert a.tasks.cancelled > 0 and a.tasks.cancelled == a.sequential.cancelled_tasks
    assert f"A: sequential: stopped with the comparison 'B' decided ({a.tasks.cancelled} tasks cancelled)" in shown


def test_a_stopped_submissions_summary_results_and_csv_leave_out_wilson_intervals(scheduler, tmp_path: Path) -> None:
    client = scheduler.client()
    manifests = [build_synthetic(10, seed=s, task=f"t{s}") for s in range(6)]
    client.submit(
        manifests,
        "synthetic",
        batch_size=1,
        submission_id="one",
        sequential=pb.SequentialSettings(seed=SEED, threshold=0.5),
    )
    run_to_the_end(client, {"one": True})
    server = ("--server", scheduler.address)
    results, rows = tmp_path / "RESULTS.json", tmp_path / "results.csv"

    table = cli("summary", "one", *server, "--out", str(results), "--csv", str(rows))
    assert table.returncode == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert "(STOPPED BY ITS SEQUENTIAL RULE)" in text and "NOTE sequential: stopped: rate at least 50.0%" in text
    assert f"95% intervals are {sequential_report.FIXED_N_NOT_VALID}: not shown" in text, text
    assert "[" not in text.split("NOTE")[0].split("mean s")[1], "no interval in the table's rows"

    document = json.loads(results.read_text())
    assert document["overall"]["success_rate"] == 1.0 and document["overall"]["success_rate_low"] is None
    assert all(task["success_rate_high"] is None for task in document["by_task"])
    assert document["sequential"]["verdict"] == "at_least" and document["sequential"]["settings"]["seed"] == SEED
    assert document["sequential"]["low"] >= 0.5 and "null: not valid" in document["intervals"]
    with rows.open() as file:
        assert {row["success_rate_low"] for row in csv.DictReader(file)} == {""}
    summary = json.loads(cli("summary", "one", "--json", *server).stdout)
    assert summary["success_rate_low"] is None and summary["sequential"]["verdict"] == "at_least"
    assert any(mark.startswith("95% intervals are not valid") for mark in summary["marks"])


def test_a_sequential_run_that_reached_its_end_has_its_fixed_n_numbers_back(scheduler) -> None:
    client = scheduler.client()
    manifest = build_synthetic(6, seed=3)
    client.submit([manifest], "synthetic", batch_size=2, submission_id="A", sequential=pb.SequentialSettings(seed=1))
    client.submit(
        [manifest], "synthetic", batch_size=2, submission_id="B", sequential=pb.SequentialSettings(paired_with="A")
    )
    run_to_the_end(client, {"A": True, "B": True})  # a tie: no stop before the end
    b = client.summary("B")
    assert b.complete and b.sequential.verdict == "final" and sequential_report.fixed_n_valid(b)
    table = " ".join(cli("compare", "A", "B", "--server", scheduler.address).stdout.split())
    assert "no difference shown (exact McNemar at the end" in table, table
    assert "decides at the end by the exact McNemar test at 0.04" in table and "+0.0 pts" in table
    assert sequential_report.marks(b)[1].startswith("its comparison with 'A' was decided at the end")


def test_the_dashboard_shows_the_statistic_and_leaves_out_intervals_while_it_runs(start_scheduler) -> None:
    proc, url = start_with_dashboard(start_scheduler)
    client = proc.client()
    client.submit(
        [build_synthetic(10, seed=1)],
        "synthetic",
        batch_size=1,
        submission_id="live",
        sequential=pb.SequentialSettings(seed=SEED, precision=0.05),
    )
    lease = client.claim("w", ["synthetic"])
    client.complete(lease, episodes=[episode_result(i, True, steps=5) for i in lease.episodes])
    status, overview = call(url + "api/overview")
    assert status == 200
    (sub,) = overview["submissions"]
    assert sub["success_rate"] == 1.0 and sub["success_rate_low"] is None
    assert sub["chart"]["overall"][0]["success_rate_high"] is None
    assert sub["sequential"]["line"].startswith("sequential: undecided after 1 of 10 episodes: rate in [")
    assert sub["sequential_marks"][1].startswith("95% intervals are not valid"), sub["sequential_marks"]
