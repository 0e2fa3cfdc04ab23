"""`scheduler run` of a RoboTwin spec, against the RoboTwin double: the expert's rows, recorded by
`python -m benchmarks.robotwin.expert`, served by the `replay` backend through the real scheduler,
workers and inference server, solve every episode; the expert's first row held still solves none
and the broken-setup canary says so. The same on RoboTwin's own code:
tests/adapters/test_robotwin_real.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from procs import cli
from run_specs import write_spec

pytestmark = pytest.mark.timeout(300)
pytest.importorskip("yaml", reason="RoboTwin's task configs are YAML: the robotwin and test extras need pyyaml")

DOUBLE = Path(__file__).resolve().parent / "doubles" / "robotwin_root"
EPISODES = 3


def _document(submission: str, output: Path, checkpoint: Path, **extra: Any) -> dict[str, Any]:
    return {
        "id": submission,
        "output": str(output),
        "checkpoint": {"path": str(checkpoint), "backend": "replay", "settings": {"chunk_length": 10}},
        "benchmark": {
            "robotwin": {
                "root": str(DOUBLE),
                "tasks": ["adjust_bottle"],
                "settings": ["clean-seen"],
                "episodes": EPISODES,
            }
        },
        "fleet": {"workers": 2, "lease_seconds": 10},
        **extra,
    }


@pytest.fixture(scope="module")
def expert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A replay checkpoint folder holding the expert's rows of the spec's episodes."""
    folder = tmp_path_factory.mktemp("robotwin-run")
    manifests = folder / "manifests"
    built = cli(
        "manifest", "build", "robotwin", "--robotwin-root", str(DOUBLE), "--tasks", "adjust_bottle",
        "--settings", "clean-seen", "--episodes", str(EPISODES), "--out", str(manifests),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (manifest,) = manifests.glob("*.json")
    recorded = subprocess.run(
        [sys.executable, "-m", "benchmarks.robotwin.expert", "--robotwin-root", str(DOUBLE),
         "--out", str(folder / "expert" / "rows.npz"), str(manifest)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    assert f"expert rows of {EPISODES} episodes" in recorded.stdout
    return folder / "expert"


def _run(folder: Path, document: dict[str, Any]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    run = cli("run", str(write_spec(folder, document)), timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    return run, json.loads((Path(document["output"]) / "RESULTS.json").read_text())


def test_the_experts_rows_solve_every_episode_through_the_fleet(expert: Path, tmp_path: Path) -> None:
    run, results = _run(tmp_path, _document("expert", tmp_path / "out", expert))
    assert f"{EPISODES}/{EPISODES} episodes solved" in run.stderr
    assert results["checkpoint_identity"]["backend"] == "replay"
    assert "canary healthy" in run.stdout


def test_holding_still_solves_nothing_and_the_canary_says_so(expert: Path, tmp_path: Path) -> None:
    still = tmp_path / "still"
    still.mkdir()
    with np.load(expert / "rows.npz") as rows:
        np.savez(still / "rows.npz", **{episode: rows[episode][:1] for episode in rows.files})
    run, results = _run(tmp_path, _document("still", tmp_path / "out", still, canary={"tasks": 1}))
    assert f"0/{EPISODES} episodes solved" in run.stderr
    assert results["overall"]["succeeded"] == 0
    (verdict,) = [line for line in run.stdout.splitlines() if "canary" in line]
    assert "BROKEN" in verdict and "no_success" in verdict and "actions_constant" in verdict, verdict


def test_a_checkpoint_without_the_episodes_rows_fails_them_naming_the_episode(expert: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    np.savez(other / "rows.npz", elsewhere=np.zeros((2, 14)))
    run = cli("run", str(write_spec(tmp_path, _document("other", tmp_path / "out", other))), timeout=240)
    logs = "".join(path.read_text() for path in (tmp_path / "out" / "logs").glob("*worker*.log"))
    assert "has no rows for episode 'adjust_bottle-clean-seen-0000'" in logs, (run.stderr[-2000:], logs[-2000:])
