"""Evaluation specs the `scheduler run` tests write: the demo's LIBERO oracle at CI size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CAMERA = 64
ORACLE_STATE = [
    {"name": "robot0_eef_pos", "length": 3},
    {"name": "robot0_gripper_qpos", "length": 2},
    {"name": "target_pos", "length": 3},
    {"name": "goal_pos", "length": 3},
]


def oracle_document(folder: Path, submission: str, output: Path, **libero: Any) -> dict[str, Any]:
    """libero_object tasks 0-1, two trials each, 64x64, 2 settle steps and a 60-step limit (each
    overridable through ``libero``), the oracle sealed under ``folder``, two CPU workers."""
    return {
        "id": submission,
        "output": str(output),
        "checkpoint": {
            "path": str(folder / "checkpoints" / "libero-oracle"),
            "backend": "libero-oracle",
            "settings": {
                "action_dim": 7,
                "chunk_length": 1,
                "cameras": [{"name": "agentview", "height": CAMERA, "width": CAMERA}],
                "state": ORACLE_STATE,
            },
        },
        "benchmark": {
            "libero": {
                "suites": ["libero_object"],
                "tasks": "0-1",
                "trials": 2,
                "camera_size": CAMERA,
                "wait_steps": 2,
                "max_steps": 60,
                **libero,
            }
        },
        "batch_size": 1,
        "video": "all",
        "canary": {"tasks": 0},
        "fleet": {"workers": 2, "lease_seconds": 10},
    }


def write_spec(folder: Path, document: dict[str, Any]) -> Path:
    """``document`` as ``folder/<id>.yaml`` (the folder created if need be)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{document['id']}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def oracle_spec(folder: Path, submission: str, output: Path) -> Path:
    return write_spec(folder, oracle_document(folder, submission, output))
