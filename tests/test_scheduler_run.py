"""`scheduler run SPEC` end to end on real LIBERO: one command from a spec to RESULTS.json, and back.

The spec is the demo's (the scripted oracle on libero_object) at CI size: two tasks of two trials,
64x64 cameras, a short step limit. One run goes through uninterrupted; a second, on the same
manifests, is killed with SIGKILL once an episode is stored (its children outlive it, as they do
when a terminal closes) and run again: it stops the leftovers, resumes without running a stored
episode again, and ends with the same result per episode as the uninterrupted run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from libero_guard import LIBERO_MISSING, REASON
from procs import cli, wait_until
from run_specs import oracle_spec

from scheduler import spec as spec_module

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(900)]

ROBOSUITE_NAG = "No private macro file found"


def results(output: Path) -> dict[tuple[str, int], tuple[int, int, str]]:
    """(manifest, episode) -> (success, steps, trace digest) as the run's database stored them."""
    with sqlite3.connect(f"file:{output / 'scheduler.sqlite'}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT manifest_hash, episode_index, success, steps, trace_digest FROM episode_results")
        return {(row[0], row[1]): (row[2], row[3], row[4]) for row in rows}


def reports(output: Path) -> dict[tuple[str, int], tuple[int, float]]:
    """(task, episode) -> (fencing token, time reported) of every stored result."""
    with sqlite3.connect(f"file:{output / 'scheduler.sqlite'}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT task_id, episode_index, fencing_token, reported_at FROM episode_results")
        return {(row[0], row[1]): (row[2], row[3]) for row in rows}


def stored_episodes(output: Path) -> int:
    db = output / "scheduler.sqlite"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            count: int = conn.execute("SELECT COUNT(*) FROM episode_results").fetchone()[0]
            return count
    except sqlite3.OperationalError:  # the scheduler has not created its tables yet
        return 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text()


def test_run_writes_results_and_a_killed_run_resumes_to_the_same_episodes(tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    spec_path = oracle_spec(tmp_path, "whole", whole)
    run = cli("run", str(spec_path), timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "4 episodes in 4 tasks on 2 workers" in run.stderr, run.stderr
    assert "summary of whole" in run.stdout and "ETA" in run.stdout
    document = json.loads((whole / "RESULTS.json").read_text())
    assert document["complete"] and document["overall"]["completed"] == 4
    assert document["checkpoint_identity"]["backend"] == "libero-oracle"
    csv_rows = (whole / "results.csv").read_text().strip().splitlines()
    assert len(csv_rows) == 1 + 2, csv_rows  # header, two tasks
    assert (whole / "success.png").stat().st_size > 0
    assert len(list((whole / "videos").glob("*.mp4"))) == 4  # video: all
    # The same results in lerobot-eval's eval_info.json: LIBERO's suite and task ids, the kept videos.
    info = json.loads((whole / "eval_info.json").read_text())
    assert [(t["task_group"], t["task_id"]) for t in info["per_task"]] == [("libero_object", i) for i in (0, 1)]
    overall = info["overall"]
    assert overall["n_episodes"] == 4 and overall["pc_success"] == 100 * document["overall"]["succeeded"] / 4
    assert sorted(Path(path).name for path in overall["video_paths"]) == sorted(
        path.name for path in (whole / "videos").glob("*.mp4")
    )
    assert not (whole / "fleet.json").exists(), "everything it started is stopped and forgotten"
    logs = "".join(path.read_text() for path in (whole / "logs").glob("*.log"))
    assert ROBOSUITE_NAG not in logs + run.stderr + run.stdout
    with sqlite3.connect(whole / "scheduler.sqlite") as conn:
        (stored_spec,) = conn.execute("SELECT spec FROM submissions WHERE id = 'whole'").fetchone()
    assert json.loads(stored_spec) == json.loads(spec_module.canonical_json(spec_module.load(spec_path).spec))
    uninterrupted = results(whole)
    assert len(uninterrupted) == 4

    # The same evaluation on the same manifests (the cache is keyed by the definition), killed.
    cut = tmp_path / "cut"
    cut_spec = oracle_spec(tmp_path, "cut", cut)
    shutil.copytree(whole / "manifests", cut / "manifests")
    with open(tmp_path / "cut-first.log", "w") as log:
        first = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", "run", str(cut_spec)], stdout=log, stderr=subprocess.STDOUT
        )
        try:
            wait_until(lambda: stored_episodes(cut) >= 1 or first.poll() is not None, 400, "a first stored episode")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait()
    assert "building manifests" not in (tmp_path / "cut-first.log").read_text(), "the cached manifests are reused"
    started = json.loads((cut / "fleet.json").read_text())
    assert [entry["name"] for entry in started] == ["scheduler", "inference-server", "cut-worker-0", "cut-worker-1"]
    before = reports(cut)
    assert 1 <= len(before) < 4

    again = cli("run", str(cut_spec), timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(4 submitted before: resuming)" in again.stderr, again.stderr
    assert not any(alive(entry["pid"]) for entry in started), "the killed run's processes are stopped"
    resumed = results(cut)
    assert resumed == uninterrupted
    after = reports(cut)
    assert {key: after[key] for key in before} == before, "an episode stored before the kill is not run again"
    assert json.loads((cut / "RESULTS.json").read_text())["overall"] == document["overall"]


def test_dry_run_of_the_demo_spec_names_the_demo_and_starts_nothing(tmp_path: Path) -> None:
    demo = Path(__file__).resolve().parents[1] / "examples" / "specs" / "demo.yaml"
    run = cli("run", str(demo), "--dry-run", "--output", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    assert "10 episodes" in run.stdout and "submission demo, route libero" in run.stdout
    assert "2 (fleet.workers)" in run.stdout
    assert not (tmp_path / "out").exists()
