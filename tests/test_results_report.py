"""`scheduler summary --csv --plot` and `scheduler compare` against a real server."""

from __future__ import annotations

import csv
import json

import pytest
from procs import cli

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient

pytestmark = pytest.mark.timeout(120)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CELLS = [
    ("open_drawer", "clean"),
    ("open_drawer", "randomized"),
    ("stack_blocks", "clean"),
    ("stack_blocks", "randomized"),
]


def _manifests(seed: int = 0):
    return [build_synthetic(6, seed=seed + i, task=task, setting=setting) for i, (task, setting) in enumerate(CELLS)]


def _drain(client: SchedulerClient, submission_id: str, checkpoint: str, succeed, tasks: int | None = None) -> None:
    done = 0
    while tasks is None or done < tasks:
        lease = client.claim("w1", ["synthetic"], [checkpoint])
        if lease is None:
            return
        assert lease.submission_id == submission_id
        for index in lease.episodes:
            client.report_episode(lease, index, succeed(index), wall_seconds=0.2)
        client.complete(lease)
        done += 1


def test_summary_csv_and_plot(scheduler, tmp_path):
    client = scheduler.client()
    client.submit(_manifests(), "synthetic", batch_size=3, submission_id="base", checkpoint="ckpt-a")
    _drain(client, "base", "ckpt-a", lambda i: i % 2 == 0)
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    run = cli(
        "summary",
        "base",
        "--csv",
        str(tmp_path / "out" / "results.csv"),
        "--plot",
        str(tmp_path / "out" / "success.png"),
        env=env,
    )
    assert run.returncode == 0, run.stderr
    with (tmp_path / "out" / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["task"], r["setting"], r["completed"], r["succeeded"], r["success_rate"]) for r in rows] == [
        (task, setting, "6", "3", "0.500000") for task, setting in CELLS
    ]
    png = (tmp_path / "out" / "success.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_compare_same_manifests_refuses_incomplete_unless_asked_and_marks_it(scheduler, tmp_path):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    client.submit(_manifests(), "synthetic", batch_size=3, submission_id="ckA", checkpoint="ckpt-a")
    _drain(client, "ckA", "ckpt-a", lambda i: i % 2 == 0)
    client.submit(_manifests(), "synthetic", batch_size=3, submission_id="ckB", checkpoint="ckpt-b")
    _drain(client, "ckB", "ckpt-b", lambda i: True, tasks=4)

    refused = cli("compare", "ckA", "ckB", env=env)
    assert refused.returncode == 2 and "ckB incomplete" in refused.stderr and "--allow-incomplete" in refused.stderr
    marked = cli("compare", "ckA", "ckB", "--allow-incomplete", env=env)
    assert marked.returncode == 0, marked.stderr
    assert "ckB (INCOMPLETE)" in marked.stdout and "(of 6)" in marked.stdout
    data = json.loads(cli("compare", "ckA", "ckB", "--allow-incomplete", "--json", env=env).stdout)
    assert (data["a"]["complete"], data["b"]["complete"]) == (True, False)
    assert [row["delta"] for row in data["rows"]] == [0.5, 0.5, None, None]

    _drain(client, "ckB", "ckpt-b", lambda i: True)
    plot = tmp_path / "compare.png"
    full = cli("compare", "ckA", "ckB", "--plot", str(plot), env=env)
    assert full.returncode == 0, full.stderr
    assert "INCOMPLETE" not in full.stdout and full.stdout.count("+50.0 pts") == 4
    assert plot.read_bytes().startswith(PNG_MAGIC)
    data = json.loads(cli("compare", "ckA", "ckB", "--json", env=env).stdout)
    assert [(r["task"], r["setting"], r["a"]["success_rate"], r["b"]["success_rate"]) for r in data["rows"]] == [
        (task, setting, 0.5, 1.0) for task, setting in CELLS
    ]


def test_compare_refuses_different_manifests_and_unknown_submissions(scheduler):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    client.submit(_manifests(), "synthetic", batch_size=6, submission_id="one")
    client.submit(_manifests(seed=10), "synthetic", batch_size=6, submission_id="two")
    run = cli("compare", "one", "two", "--allow-incomplete", env=env)
    assert run.returncode == 2 and "different manifests" in run.stderr
    run = cli("compare", "one", "nope", env=env)
    assert run.returncode == 2 and "submission_id" in run.stderr
