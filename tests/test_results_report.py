"""`scheduler summary --csv --plot` and `scheduler compare` against a real server.

Expected intervals and p-values come from scipy (``binomtest``, ``fisher_exact``), never from the
code under test.
"""

from __future__ import annotations

import csv
import json

import pytest
from procs import cli

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient

stats = pytest.importorskip("scipy.stats", reason="the reference values come from scipy (pip install evalfleet[test])")
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
    wilson = stats.binomtest(3, 6).proportion_ci(method="wilson")
    bounds = {(r["success_rate_low"], r["success_rate_high"]) for r in rows}
    assert bounds == {(f"{wilson.low:.6f}", f"{wilson.high:.6f}")}
    human = cli("summary", "base", env=env).stdout
    assert f"[{100 * wilson.low:.1f}, {100 * wilson.high:.1f}]" in human and "95% CI" in human
    data = json.loads(cli("summary", "base", "--json", env=env).stdout)
    overall = stats.binomtest(12, 24).proportion_ci(method="wilson")
    assert (data["success_rate"], data["success_rate_low"], data["success_rate_high"]) == pytest.approx(
        (0.5, overall.low, overall.high), abs=1e-12
    )
    assert [m["success_rate_low"] for m in data["manifests"]] == pytest.approx([wilson.low] * 4, abs=1e-12)
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
    assert "INCOMPLETE" not in full.stdout and full.stdout.count("+50.0 pts") == 4 + 3  # rows, settings, overall
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
    assert run.returncode == 2 and "different manifests" in run.stderr and "--unpaired" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    run = cli("compare", "one", "nope", env=env)
    assert run.returncode == 2 and "submission_id" in run.stderr


def _differences(data):
    """Estimates, p-values and significance of every row, then of every setting, then overall."""
    groups = [row["difference"] for row in data["rows"]] + [g["difference"] for g in data["by_setting"]]
    groups.append(data["overall"]["difference"])
    return [d["estimate"] for d in groups], [d["p_value"] for d in groups], [d["significant"] for d in groups]


def test_compare_pairs_episodes_and_says_whether_the_difference_is_significant(scheduler):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    manifests = [build_synthetic(20, seed=i, task=task, setting=setting) for i, (task, setting) in enumerate(CELLS)]
    outcomes = {
        "base": lambda i: i % 2 == 0,  # 10 of 20 per task x setting
        "better": lambda i: True,  # + the 10 odd episodes: 10 discordant pairs, all for B
        "same": lambda i: (i % 2 == 0 and i != 0) or i in (1, 3),  # loses episode 0, wins 1 and 3
    }
    for submission_id, succeed in outcomes.items():
        client.submit(manifests, "synthetic", batch_size=10, submission_id=submission_id, checkpoint=submission_id)
        _drain(client, submission_id, submission_id, succeed)

    listed = client.summary("same", include_episodes=True).manifests[0]
    assert list(listed.succeeded_episodes) == [1, 2, 3, *range(4, 20, 2)]
    assert list(listed.failed_episodes) == [0, *range(5, 20, 2)]
    assert not client.summary("same").manifests[0].succeeded_episodes, "listed only when asked"

    better = json.loads(cli("compare", "base", "better", "--json", env=env).stdout)
    assert better["paired"] is True
    row_p, all_p = stats.binomtest(0, 10).pvalue, stats.binomtest(0, 40).pvalue
    setting_p = stats.binomtest(0, 20).pvalue
    estimates, p_values, significant = _differences(better)
    assert estimates == pytest.approx([0.5] * 7, rel=1e-12) and significant == [True] * 7
    assert p_values == pytest.approx([row_p] * 4 + [setting_p] * 2 + [all_p], rel=1e-9)
    assert [row["difference"]["pairs"] for row in better["rows"]] == [20] * 4
    assert better["overall"]["difference"]["pairs"] == 80
    assert better["overall"]["difference"]["test"] == "exact McNemar"
    assert better["overall"]["difference"]["low"] > 0.0

    same = json.loads(cli("compare", "base", "same", "--json", env=env).stdout)
    row_p, all_p = stats.binomtest(1, 3).pvalue, stats.binomtest(4, 12).pvalue
    estimates, p_values, significant = _differences(same)
    assert estimates == pytest.approx([0.05] * 7, rel=1e-12) and significant == [False] * 7
    assert p_values[:4] == pytest.approx([row_p] * 4, rel=1e-9) and p_values[-1] == pytest.approx(all_p, rel=1e-9)
    overall = same["overall"]["difference"]
    assert overall["low"] < 0.0 < overall["high"] and overall["words"] == "not significant"
    wilson = stats.binomtest(44, 80).proportion_ci(method="wilson")
    assert (same["overall"]["b"]["success_rate_low"], same["overall"]["b"]["success_rate_high"]) == pytest.approx(
        (wilson.low, wilson.high), abs=1e-12
    )

    human = cli("compare", "base", "same", env=env).stdout
    assert "paired by trial (same manifests" in human and "overall: +5.0 pts" in human and "not significant" in human
    assert f"exact McNemar p = {all_p:.3g}" in human


def test_unpaired_comparison_only_when_asked_and_marked(scheduler):
    client = scheduler.client()
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    client.submit(_manifests(), "synthetic", batch_size=6, submission_id="old", checkpoint="ckpt-a")
    _drain(client, "old", "ckpt-a", lambda i: i == 0)
    client.submit(_manifests(seed=10), "synthetic", batch_size=6, submission_id="new", checkpoint="ckpt-b")
    _drain(client, "new", "ckpt-b", lambda i: i != 0)

    refused = cli("compare", "old", "new", env=env)
    assert refused.returncode == 2 and "--unpaired" in refused.stderr and refused.stdout == ""
    data = json.loads(cli("compare", "old", "new", "--unpaired", "--json", env=env).stdout)
    assert data["paired"] is False and data["only_a"] == [] and data["only_b"] == []
    row_p = stats.fisher_exact([[1, 5], [5, 1]]).pvalue
    all_p = stats.fisher_exact([[4, 20], [20, 4]]).pvalue
    assert [(r["difference"]["test"], r["difference"]["paired"], r["difference"]["pairs"]) for r in data["rows"]] == [
        ("Fisher exact", False, None)
    ] * 4
    estimates, p_values, significant = _differences(data)
    assert estimates == pytest.approx([4 / 6] * 7, rel=1e-12)
    assert p_values[:4] == pytest.approx([row_p] * 4, rel=1e-9) and p_values[-1] == pytest.approx(all_p, rel=1e-9)
    assert significant[:4] == [False] * 4 and significant[-1] is True
    human = cli("compare", "old", "new", "--unpaired", env=env).stdout
    assert "(UNPAIRED)" in human and "independent samples" in human
