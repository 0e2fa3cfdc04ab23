"""Real LIBERO episodes scored through docs/remote.md's StarVLA LIBERO recipe: scheduler → renderer
worker → evalfleet inference server (`remote` backend, the recipe) → the double of StarVLA's
server, every one a process, LIBERO rendering at the recipe's 256 x 256.

Behind the double is a scripted model (`--model libero-script`: the LIBERO oracle, a pick and
place script) that talks as StarVLA's LIBERO model does: it answers the gripper about 1 for open
and 0 for closed, and it refuses images that are not 224 x 224. So the episodes are solved only
if the client side is StarVLA's: the 256-pixel frames resized to 224 before the request, and the
gripper binarized and inverted after the reply. Without the recipe's `binarize` step its "open"
closes LIBERO's gripper, the fingers never open over the object and every episode fails; without
the resize the model refuses the first step.

Two things are the test's, not StarVLA's, and are the only changes to the recipe: the oracle
needs the objects' poses, which StarVLA's client does not send, so one more request entry
(`oracle_state`) carries them; and the double's chunk is one action (`--chunk 1`, the script
decides every step), so `chunk_length` is the double's `action_chunk_size`, 1, as the recipe
says it must be (StarVLA's LIBERO checkpoints have 8). Two libero_object trials, a few minutes.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from docs_recipes import recipe
from libero_guard import LIBERO_MISSING, REASON
from openpi_helpers import STARVLA_DOUBLE, OpenpiServer
from procs import cli, submit_libero, wait_settled

from evalfleet.processes import free_port
from inference_server.checkpoint import seal

if LIBERO_MISSING:
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.libero, pytest.mark.timeout(1200)]

# The objects' poses the oracle reads (LIBERO's adapter names them: benchmarks/libero/sim.py).
ORACLE_STATE = ["robot0_eef_pos", "robot0_gripper_qpos", "target_pos", "goal_pos"]


def recipe_checkpoint(root: Path, url: str) -> Path:
    """docs/remote.md's starvla_libero.yaml at `url`, with the test's two changes (module docstring)."""
    settings = recipe("starvla_libero.yaml")
    settings |= {
        "url": url,
        "chunk_length": 1,
        "state": [*settings["state"], {"name": "target_pos", "length": 3}, {"name": "goal_pos", "length": 3}],
        "request": [*settings["request"], {"key": "oracle_state", "state": ORACLE_STATE}],
    }
    (root / "starvla_libero").mkdir(parents=True)
    seal(root / "starvla_libero", "remote", settings)
    return root


def test_the_starvla_libero_recipe_solves_libero_object_trials(
    scheduler, tmp_path: Path, start_policy, start_worker
) -> None:
    out = tmp_path / "manifests"
    # StarVLA's episodes: 256 x 256 cameras, 10 wait steps, seed 7, the suite's 280 steps (the defaults).
    run = cli("manifest", "build", "libero", "--out", str(out), "--suite", "libero_object", "--tasks", "0-1",
              "--trials", "1", "--jobs", "1", timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr
    double = OpenpiServer(free_port(), tmp_path / "starvla.log", script=STARVLA_DOUBLE)
    double.run(args=["--embodiment", "libero", "--chunk", "1", "--model", "libero-script"])
    try:
        policy = start_policy("starvla_libero", root=recipe_checkpoint(tmp_path / "checkpoints", double.url))
        submit_libero(scheduler.address, policy.address, out, "starvla-recipe")
        start_worker(scheduler.address, [policy.address], "--routes", "libero", worker_id="lw0")
        client = scheduler.client()
        wait_settled(client, "starvla-recipe", 1000)
        summary = client.summary("starvla-recipe")
        assert summary.complete and (summary.episodes_planned, summary.episodes_completed) == (2, 2), summary
        assert all(t.attempts == 1 for t in client.tasks().tasks), "no infrastructure retries"
        rows = _rows(scheduler.db, "SELECT success, steps FROM episode_results")
        assert [success for success, _ in rows] == [1, 1], f"not solved: {rows}\n{double.log_tail()}"
    finally:
        double.stop()


def _rows(db: Path, query: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()
