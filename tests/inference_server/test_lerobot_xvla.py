"""The `lerobot` backend serving X-VLA with the real LeRobot and transformers code, offline.

The policy is a tiny random-weight X-VLA (scripts/lerobot_tiny.py `build --policy xvla`): Florence-2
and the action head at toy widths, its tokenizer in the checkpoint's `tokenizer/` folder, named
relative to it. X-VLA draws its noise from torch's global RNG, so the backend calls it once per row
under a seeded fork of that RNG; its LIBERO state and actions go through LeRobot's own X-VLA env
processors. LeRobot's own path (lerobot_eval's, row by row, the same seed) runs from the folder.
A real LIBERO episode runs it too: the worker sends `robot0_eef_mat`, the arm controller's matrix
that LeRobot's LIBERO env reads. Everything LeRobot does runs in subprocesses of .venv-lerobot
(lerobot_helpers.py says how).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lerobot_helpers import (
    CAMERA,
    NEEDS_LEROBOT,
    backend_settings,
    build_tiny,
    direct_chunks,
    first_steps_together,
    run_server,
    serve_libero_episodes,
    server,
)
from libero_guard import NEEDS_LIBERO

from evalfleet.policy_api import tensors
from inference_server.checkpoint import seal

pytestmark = [NEEDS_LEROBOT, pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = 3
CHUNK = 32  # X-VLA's default chunk_size and n_action_steps


@pytest.fixture(scope="module")
def xvla_settings(lerobot_python: Path) -> dict[str, Any]:
    return backend_settings(lerobot_python, f"libero_settings('xvla', {CAMERA})")


@pytest.fixture(scope="module")
def tiny_xvla(lerobot_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny X-VLA with LIBERO features and its tokenizer folder, saved by LeRobot; built once."""
    folder = tmp_path_factory.mktemp("xvla") / "xvla"
    return build_tiny(lerobot_python, folder, "--policy", "xvla", "--size", str(CAMERA))


def xvla_observation(rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Upright images, the end effector's position and a rotation matrix (row-major, 9 values)."""
    images = {
        name: rng.integers(0, 256, (CAMERA, CAMERA, 3), dtype=np.uint8) for name in ("agentview", "robot0_eye_in_hand")
    }
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    rotation = q * np.sign(np.diag(r))
    if np.linalg.det(rotation) < 0:
        rotation[:, 0] = -rotation[:, 0]
    return images, {"robot0_eef_pos": rng.normal(size=3), "robot0_eef_mat": rotation.ravel()}


def xvla_copy(source: Path, root: Path, settings: dict[str, Any]) -> Path:
    folder = root / "xvla"
    shutil.copytree(source, folder)
    seal(folder, "lerobot", settings)
    return folder


def test_the_tiny_xvla_names_its_tokenizer_relative_to_the_folder(
    tiny_xvla: Path, xvla_settings: dict[str, Any]
) -> None:
    """What the builder wrote is a relative X-VLA checkpoint; the settings are X-VLA's LIBERO layout."""
    config = json.loads((tiny_xvla / "config.json").read_text())
    assert (config["type"], config["tokenizer_name"], config["chunk_size"]) == ("xvla", "tokenizer", CHUNK)
    assert config["output_features"]["action"]["shape"] == [20]
    steps = json.loads((tiny_xvla / "policy_preprocessor.json").read_text())["steps"]
    (tokenizer,) = [s for s in steps if s["registry_name"] == "tokenizer_processor"]
    assert tokenizer["config"]["tokenizer_name"] == "tokenizer"
    assert xvla_settings["state"] == {"feature": "observation.state", "layout": "xvla_libero"}


def test_the_tiny_xvla_build_is_repeatable(lerobot_python: Path, tiny_xvla: Path, tmp_path: Path) -> None:
    """Built again, the weights are the same bytes: Florence-2's image projection (torch.empty in
    LeRobot) is drawn from the seeded RNG, not left as whatever memory held, which was NaN at times."""
    again = build_tiny(lerobot_python, tmp_path / "xvla", "--policy", "xvla", "--size", str(CAMERA))
    assert (again / "model.safetensors").read_bytes() == (tiny_xvla / "model.safetensors").read_bytes()


def test_concurrent_xvla_sessions_are_one_batch_equal_to_lerobot_row_by_row(
    lerobot_python: Path, tiny_xvla: Path, xvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """Three sessions share one batch; each row equals LeRobot's X-VLA LIBERO path (env processors
    included) called on that row alone with torch's RNG seeded as the backend seeds that session."""
    folder = xvla_copy(tiny_xvla, tmp_path / "ckpt", xvla_settings)
    rng = np.random.default_rng(7)
    observations = [xvla_observation(rng) for _ in range(SESSIONS)]
    tasks = ["put the bowl on the plate", "open the top drawer", "pick up the black bowl"]
    expected = direct_chunks(lerobot_python, folder, tmp_path, observations, tasks)

    proc = server(lerobot_python, tmp_path / "ckpt", tmp_path, "--batch-timeout-ms", "3000", epoch="xvla")
    with proc.start(timeout_s=180), proc.client() as client:
        reply = client.identity()
        settings = json.loads(reply.identity.backend_settings_json)
        assert (settings["policy_type"], settings["state"]["layout"]) == ("xvla", "xvla_libero")
        assert (reply.identity.chunk_length, reply.identity.action_dim) == (CHUNK, 7)
        assert [(s.name, s.length) for s in reply.identity.state] == [("robot0_eef_pos", 3), ("robot0_eef_mat", 9)]
        replies = first_steps_together(client, reply.digest, "libero", observations, tasks)
    assert all(r.WhichOneof("kind") == "chunk" for r in replies), replies
    assert [r.chunk.batch_size for r in replies] == [SESSIONS] * SESSIONS
    served = np.stack([tensors.decode(r.chunk.actions, "chunk.actions") for r in replies])
    assert served.shape == (SESSIONS, CHUNK, 7)
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
    assert set(np.unique(served[..., 6])) <= {-1.0, 1.0}  # LeRobot's env postprocessor: gripper to +-1
    assert not np.allclose(served[0], served[1])


def test_an_xvla_sealed_with_the_8d_libero_layout_is_refused_naming_the_lengths(
    lerobot_python: Path, tiny_xvla: Path, xvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """The 8-D layout of LeRobot's generic LIBERO processor does not feed X-VLA's 20-D state."""
    settings = {**xvla_settings, "state": {"feature": "observation.state", "layout": "libero"}}
    xvla_copy(tiny_xvla, tmp_path, settings)
    done = run_server(lerobot_python, tmp_path, "--dry-run", epoch="xvla")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "settings.state builds 8 values, but observation.state takes 20" in done.stderr


def test_an_xvla_whose_policy_preprocessor_repeats_the_env_steps_is_refused_naming_them(
    lerobot_python: Path, tiny_xvla: Path, xvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """make_xvla_pre_post_processors saves ImageNet normalization and the domain id into the policy
    preprocessor, which LeRobot's X-VLA LIBERO env preprocessor applies too (lerobot issue #2955)."""
    folder = tmp_path / "xvla"
    shutil.copytree(tiny_xvla, folder)
    path = folder / "policy_preprocessor.json"
    pipeline = json.loads(path.read_text())
    pipeline["steps"].append({"registry_name": "xvla_imagenet_normalize", "config": {"image_keys": None}})
    path.write_text(json.dumps(pipeline))
    seal(folder, "lerobot", xvla_settings)
    done = run_server(lerobot_python, tmp_path, "--dry-run", epoch="xvla")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "policy_preprocessor.json: the xvla_libero layout" in done.stderr
    assert "already applies xvla_imagenet_normalize" in done.stderr


@pytest.mark.libero
@pytest.mark.timeout(600)
@NEEDS_LIBERO
def test_real_libero_episodes_end_to_end_with_xvla(
    lerobot_python: Path,
    tiny_xvla: Path,
    xvla_settings: dict[str, Any],
    scheduler: Any,
    start_worker: Any,
    tmp_path: Path,
) -> None:
    """Scheduler -> a renderer worker (main virtualenv, real LIBERO) -> the X-VLA server, two short
    episodes: the worker's observation carries the 12 state values X-VLA's LIBERO layout reads."""
    xvla_copy(tiny_xvla, tmp_path / "checkpoints", xvla_settings)
    run = serve_libero_episodes(lerobot_python, tmp_path / "checkpoints", "xvla", scheduler, start_worker, tmp_path)
    run.assert_every_episode_ran_once()
