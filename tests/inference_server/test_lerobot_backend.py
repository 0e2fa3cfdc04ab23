"""The `lerobot` backend with the real LeRobot code: a tiny ACT policy built, saved, sealed and served.

Everything LeRobot does runs in subprocesses of .venv-lerobot (lerobot_helpers.py says how).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lerobot_helpers import (
    CAMERA,
    NEEDS_LEROBOT,
    TINY,
    LerobotMade,
    direct_chunks,
    first_steps_together,
    observation,
    run_lerobot,
    run_server,
    serve_libero_episodes,
    server,
)
from libero_guard import NEEDS_LIBERO
from safetensors import safe_open

from benchmarks.robotwin.config import POLICY_CAMERAS
from benchmarks.robotwin.episode import STATE_KEY
from evalfleet.policy_api import tensors
from evalfleet.processes import free_port
from evalfleet.v1 import policy_pb2
from inference_server.checkpoint import MANIFEST_NAME, seal

pytestmark = [NEEDS_LEROBOT, pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = 4
ROBOTWIN_CAMERA = (48, 64)  # height, width: not square, so a swapped pair would not fit
ROBOTWIN_SESSIONS = 3
STATS_FILE = "policy_preprocessor_step_3_normalizer_processor.safetensors"


@pytest.fixture(scope="module")
def libero_settings(lerobot_made: LerobotMade) -> dict[str, Any]:
    """The backend's LIBERO settings for the installed lerobot, read from the backend itself."""
    return lerobot_made.settings(f"libero_settings('act', {CAMERA})")


@pytest.fixture(scope="module")
def robotwin_settings(lerobot_made: LerobotMade) -> dict[str, Any]:
    """The backend's RoboTwin settings (ALOHA-style feature names) for the installed lerobot."""
    return lerobot_made.settings(f"robotwin_settings('act', {ROBOTWIN_CAMERA[0]}, {ROBOTWIN_CAMERA[1]})")


@pytest.fixture(scope="module")
def tiny_act(lerobot_made: LerobotMade) -> Path:
    """A tiny ACT policy with LIBERO features, saved by LeRobot; built once, copied per test."""
    return lerobot_made.policy("--size", str(CAMERA))


@pytest.fixture(scope="module")
def tiny_robotwin_act(lerobot_made: LerobotMade) -> Path:
    """A tiny ACT policy with RoboTwin features: three cameras, 14-D state, 14-D action."""
    return lerobot_made.policy("--benchmark", "robotwin", "--size", "x".join(map(str, ROBOTWIN_CAMERA)))


def sealed_copy(source: Path, root: Path, settings: dict[str, Any], epoch: str = "act") -> Path:
    folder = root / epoch
    folder.mkdir(parents=True)
    for path in source.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    seal(folder, "lerobot", settings)
    return folder


def robotwin_observation(rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """What RoboTwin's adapter sends: its three policy cameras and the 14 joint values."""
    images = {name: rng.integers(0, 256, (*ROBOTWIN_CAMERA, 3), dtype=np.uint8) for name in POLICY_CAMERAS}
    return images, {STATE_KEY: rng.normal(size=14)}


def unnormalizer_statistics(folder: Path) -> dict[str, np.ndarray]:
    """The statistics LeRobot's postprocessor saved for its unnormalizer, read with safetensors."""
    (path,) = folder.glob("policy_postprocessor_step_*_unnormalizer_processor.safetensors")
    with safe_open(str(path), framework="numpy") as stored:
        return {key: stored.get_tensor(key) for key in stored.keys()}


def test_four_concurrent_sessions_are_one_batch_equal_to_lerobot_called_directly(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    sealed_copy(tiny_act, tmp_path / "ckpt", libero_settings)
    rng = np.random.default_rng(7)
    observations = [observation(rng) for _ in range(SESSIONS)]
    tasks = [f"put object {i} in the basket" for i in range(SESSIONS)]
    expected = direct_chunks(lerobot_python, tmp_path / "ckpt" / "act", tmp_path, observations, tasks)

    proc = server(lerobot_python, tmp_path / "ckpt", tmp_path, "--batch-timeout-ms", "2000")
    with proc.start(timeout_s=120), proc.client() as client:
        reply = client.identity()
        assert reply.identity.backend == "lerobot"
        assert (reply.identity.chunk_length, reply.identity.action_dim) == (10, 7)
        settings = json.loads(reply.identity.backend_settings_json)
        assert (settings["policy_type"], settings["lerobot_version"]) == ("act", "0.4.4")
        # The trained range the canary measures actions against: the statistics file's action min/max.
        stats = unnormalizer_statistics(tmp_path / "ckpt" / "act")
        np.testing.assert_allclose(reply.action_range.low, stats["action.min"], rtol=1e-6)
        np.testing.assert_allclose(reply.action_range.high, stats["action.max"], rtol=1e-6)
        assert reply.action_range.source == "policy_postprocessor unnormalizer: action min/max"
        replies = first_steps_together(client, reply.digest, "libero", observations, tasks)
    assert all(r.WhichOneof("kind") == "chunk" for r in replies), replies
    assert [r.chunk.batch_size for r in replies] == [SESSIONS] * SESSIONS
    served = np.stack([tensors.decode(r.chunk.actions, "chunk.actions") for r in replies])
    assert served.shape == (SESSIONS, 10, 7)
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(served[0], served[1])  # the rows are the sessions' own


def test_robotwin_sessions_are_one_batch_equal_to_lerobot_called_directly(
    lerobot_python: Path, tiny_robotwin_act: Path, robotwin_settings: dict[str, Any], tmp_path: Path
) -> None:
    """RoboTwin's cameras and joint state, as its adapter names them, reach the policy's features."""
    sealed_copy(tiny_robotwin_act, tmp_path / "ckpt", robotwin_settings)
    rng = np.random.default_rng(11)
    observations = [robotwin_observation(rng) for _ in range(ROBOTWIN_SESSIONS)]
    tasks = [f"hand over block {i}" for i in range(ROBOTWIN_SESSIONS)]
    expected = direct_chunks(lerobot_python, tmp_path / "ckpt" / "act", tmp_path, observations, tasks, "robotwin")

    proc = server(lerobot_python, tmp_path / "ckpt", tmp_path, "--batch-timeout-ms", "2000")
    with proc.start(timeout_s=120), proc.client() as client:
        reply = client.identity()
        assert [(c.name, c.height, c.width) for c in reply.identity.cameras] == [
            (name, *ROBOTWIN_CAMERA) for name in POLICY_CAMERAS
        ]
        assert [(s.name, s.length) for s in reply.identity.state] == [(STATE_KEY, 14)]
        assert (reply.identity.chunk_length, reply.identity.action_dim) == (10, 14)
        replies = first_steps_together(client, reply.digest, "robotwin", observations, tasks)
    assert all(r.WhichOneof("kind") == "chunk" for r in replies), replies
    assert [r.chunk.batch_size for r in replies] == [ROBOTWIN_SESSIONS] * ROBOTWIN_SESSIONS
    served = np.stack([tensors.decode(r.chunk.actions, "chunk.actions") for r in replies])
    assert served.shape == (ROBOTWIN_SESSIONS, 10, 14)
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(served[0], served[1])


def test_a_camera_feeding_a_feature_the_policy_lacks_is_refused_at_seal_naming_it(
    lerobot_python: Path, tiny_robotwin_act: Path, tmp_path: Path
) -> None:
    """A dataset's key that is not among config.json's input_features: exit 2 naming it, nothing written."""
    code = (
        "import json; from inference_server.backends.lerobot import robotwin_settings; "
        f"print(json.dumps(robotwin_settings('act', {ROBOTWIN_CAMERA[0]}, {ROBOTWIN_CAMERA[1]}, "
        "features={'head_camera': 'observation.images.top'})))"
    )
    done = run_lerobot(lerobot_python, "-c", code)
    assert done.returncode == 0, done.stderr
    settings_file = tmp_path / "robotwin.json"
    settings_file.write_text(done.stdout.strip().splitlines()[-1])
    folder = tmp_path / "act"
    folder.mkdir()
    for path in tiny_robotwin_act.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    argv = ["-m", "inference_server.cli", "checkpoint", "seal", str(folder), "--backend", "lerobot"]
    done = run_lerobot(lerobot_python, *argv, "--settings-file", str(settings_file))
    assert done.returncode == 2, done.stderr
    assert "settings.cameras[0].feature 'observation.images.top' is not an image feature of the policy" in done.stderr
    assert "observation.images.cam_high" in done.stderr  # what the policy does take
    assert "Traceback" not in done.stderr
    assert not (folder / MANIFEST_NAME).exists()


def dry_run_digest(python: Path, root: Path) -> str:
    done = run_server(python, root, "--dry-run")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout[done.stdout.index("{") :])["digest"])


def change_statistics(path: Path) -> None:
    """Shifts one mean in a LeRobot statistics file (safetensors), as a re-normalized fine-tune would."""
    from safetensors.numpy import load_file, save_file

    tensors_ = load_file(str(path))
    key = next(k for k in sorted(tensors_) if k.endswith(".mean"))
    tensors_[key] = tensors_[key] + 0.5
    save_file(tensors_, str(path))


def test_a_changed_statistics_file_changes_the_digest_and_a_stale_seal_is_refused(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    folder = sealed_copy(tiny_act, tmp_path, libero_settings)
    before = dry_run_digest(lerobot_python, tmp_path)
    change_statistics(folder / STATS_FILE)

    stale = run_server(lerobot_python, tmp_path, "--port", str(free_port()))
    assert stale.returncode == 2, stale.stderr
    assert f"inference-server: {STATS_FILE} differs from its sealed hash" in stale.stderr

    seal(folder, "lerobot", libero_settings)
    assert dry_run_digest(lerobot_python, tmp_path) != before


def test_settings_are_in_the_digest_and_a_checkpoint_sealed_for_another_lerobot_or_transformers_is_refused(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    folder = sealed_copy(tiny_act, tmp_path, libero_settings)
    before = dry_run_digest(lerobot_python, tmp_path)
    seal(folder, "lerobot", {**libero_settings, "noise_seed": 1})
    assert dry_run_digest(lerobot_python, tmp_path) != before

    seal(folder, "lerobot", {**libero_settings, "lerobot_version": "0.3.3"})
    done = run_server(lerobot_python, tmp_path, "--dry-run")
    assert done.returncode == 2
    assert "sealed for lerobot 0.3.3, but lerobot 0.4.4 is installed" in done.stderr

    seal(folder, "lerobot", {**libero_settings, "transformers_version": "4.53.2"})
    done = run_server(lerobot_python, tmp_path, "--dry-run")
    assert done.returncode == 2
    assert "sealed for transformers 4.53.2, but transformers 4.57.6 is installed" in done.stderr


def with_config(folder: Path, settings: dict[str, Any], **changes: Any) -> None:
    """Changes fields of the folder's config.json (LeRobot's deployment fields: the weights do not
    depend on them) and seals the folder again."""
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    seal(folder, "lerobot", settings)


def dry_run_identity(python: Path, root: Path) -> dict[str, Any]:
    done = run_server(python, root, "--dry-run")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout[done.stdout.index("{") :]))


def test_the_checkpoint_executes_n_action_steps_per_chunk_unless_its_settings_say_otherwise(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    """LeRobot's evaluation runs `n_action_steps` of each chunk (select_action's queue), so that is
    the identity's execute_steps; a sealed execute_steps overrides it, and the digest says which."""
    folder = sealed_copy(tiny_act, tmp_path, libero_settings)
    with_config(folder, libero_settings, n_action_steps=4)
    default = dry_run_identity(lerobot_python, tmp_path)
    assert default["identity"]["execute_steps"] == 4 and default["identity"]["chunk_length"] == 10
    seal(folder, "lerobot", {**libero_settings, "execute_steps": 4})
    assert dry_run_identity(lerobot_python, tmp_path)["identity"]["execute_steps"] == 4
    seal(folder, "lerobot", {**libero_settings, "execute_steps": 2})
    two = dry_run_identity(lerobot_python, tmp_path)
    assert two["identity"]["execute_steps"] == 2 and two["digest"] != default["digest"]
    seal(folder, "lerobot", {**libero_settings, "execute_steps": 0})
    whole = dry_run_identity(lerobot_python, tmp_path)
    assert "execute_steps" not in whole["identity"] and whole["digest"] != default["digest"]


def test_n_action_steps_of_each_chunk_are_the_actions_lerobots_own_loop_executes(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    """One episode of nine steps: LeRobot's rollout calls select_action at every step (a chunk at
    steps 0, 4 and 8, four actions of each); the served checkpoint, driven as the worker drives it
    with the identity's execute_steps, answers the same nine actions."""
    folder = sealed_copy(tiny_act, tmp_path / "ckpt", libero_settings)
    with_config(folder, libero_settings, n_action_steps=4)
    rng = np.random.default_rng(13)
    steps = [observation(rng) for _ in range(9)]
    task = "put the bowl on the plate"
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for i, (images, state) in enumerate(steps):
        for name, array in {**images, **state}.items():
            np.save(inputs / f"{i}.{name}.npy", array, allow_pickle=False)
    (inputs / "tasks.json").write_text(json.dumps([task] * len(steps)))
    done = run_lerobot(lerobot_python, str(TINY), "select", str(folder), str(inputs), str(tmp_path / "select.npy"))
    assert done.returncode == 0, done.stderr
    lerobots = np.load(tmp_path / "select.npy", allow_pickle=False)

    proc = server(lerobot_python, tmp_path / "ckpt", tmp_path)
    with proc.start(timeout_s=120), proc.client() as client:
        reply = client.identity()
        executed = reply.identity.execute_steps
        meta = policy_pb2.EpisodeMeta(benchmark="libero", episode_id="0", instruction=task)
        with client.open_session(reply.digest, meta) as session:
            chunks = [
                session.act(*steps[t], step=k, executed=executed if k else 0)
                for k, t in enumerate(range(0, len(steps), executed))
            ]
    assert executed == 4
    ours = np.concatenate([chunk[:executed] for chunk in chunks])[: len(steps)]
    np.testing.assert_allclose(ours, lerobots, rtol=1e-5, atol=1e-5)
    whole_chunk = chunks[0][: len(steps)]  # what executing every action of the first chunk would run
    assert not np.allclose(whole_chunk[4:], lerobots[4:], rtol=1e-5, atol=1e-5)


def test_an_act_config_with_temporal_ensembling_is_refused_naming_it(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    folder = sealed_copy(tiny_act, tmp_path, libero_settings)
    with_config(folder, libero_settings, n_action_steps=1, temporal_ensemble_coeff=0.01)
    done = run_server(lerobot_python, tmp_path, "--dry-run")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("inference-server: ")]
    assert "config.json: temporal_ensemble_coeff is 0.01" in line


@pytest.mark.parametrize("missing", ["policy_postprocessor.json", STATS_FILE])
def test_a_folder_missing_a_processor_file_exits_2_naming_it(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path, missing: str
) -> None:
    folder = sealed_copy(tiny_act, tmp_path, libero_settings)
    (folder / missing).unlink()
    seal(folder, "lerobot", libero_settings)  # sealed as it is: the seal is not the problem
    done = run_server(lerobot_python, tmp_path, "--dry-run")
    assert done.returncode == 2
    assert f"{missing}" in done.stderr and "is missing from" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_config_of_an_unknown_policy_type_exits_2_naming_the_field(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    folder = sealed_copy(tiny_act, tmp_path, libero_settings)
    config = json.loads((folder / "config.json").read_text())
    config["type"] = "act_v9"
    (folder / "config.json").write_text(json.dumps(config))
    seal(folder, "lerobot", {**libero_settings, "policy_type": "act_v9"})
    done = run_server(lerobot_python, tmp_path, "--dry-run")
    assert done.returncode == 2
    assert "inference-server: config.json: type 'act_v9' is not a lerobot 0.4.4 policy type" in done.stderr
    assert "Traceback" not in done.stderr


def test_served_from_the_main_virtualenv_it_names_the_lerobot_one(
    tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    """Served from the wrong virtualenv, the backend says where it runs instead of failing later."""
    sealed_copy(tiny_act, tmp_path, libero_settings)
    argv = [sys.executable, "-m", "inference_server.cli", "--epoch", "act", "--checkpoint-root", str(tmp_path)]
    done = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "the lerobot backend runs from .venv-lerobot" in done.stderr


@pytest.mark.libero
@pytest.mark.timeout(600)
@NEEDS_LIBERO
def test_real_libero_episodes_end_to_end(
    lerobot_python: Path,
    tiny_act: Path,
    libero_settings: dict[str, Any],
    scheduler: Any,
    start_worker: Any,
    tmp_path: Path,
) -> None:
    """Scheduler -> two renderer workers (main virtualenv, real LIBERO) -> this backend's server."""
    sealed_copy(tiny_act, tmp_path / "checkpoints", libero_settings)
    run = serve_libero_episodes(
        lerobot_python, tmp_path / "checkpoints", "act", scheduler, start_worker, tmp_path, workers=2
    )
    run.assert_every_episode_ran_once()


def test_an_act_config_naming_imagenet_backbone_weights_loads_without_fetching_them(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    """LeRobot's ACT default (torchvision's ImageNet ResNet-18) is what real ACT checkpoints carry;
    the trained backbone is in model.safetensors, so nothing is downloaded."""
    folder = sealed_copy(tiny_act, tmp_path / "ckpt", libero_settings)
    config = json.loads((folder / "config.json").read_text())
    config["pretrained_backbone_weights"] = "ResNet18_Weights.IMAGENET1K_V1"
    (folder / "config.json").write_text(json.dumps(config))
    seal(folder, "lerobot", libero_settings)
    torch_home = tmp_path / "torch-home"
    torch_home.mkdir()
    proc = server(lerobot_python, tmp_path / "ckpt", tmp_path)
    proc.env["TORCH_HOME"] = str(torch_home)
    with proc.start(timeout_s=120), proc.client() as client:
        assert client.identity().identity.chunk_length == 10
    assert list(torch_home.rglob("*")) == [], "torchvision's weights were fetched"


def test_weights_that_do_not_fit_the_config_exit_2_naming_the_weights(
    lerobot_python: Path, tiny_act: Path, libero_settings: dict[str, Any], tmp_path: Path
) -> None:
    folder = sealed_copy(tiny_act, tmp_path, libero_settings)
    config = json.loads((folder / "config.json").read_text())
    config["dim_feedforward"] *= 2
    (folder / "config.json").write_text(json.dumps(config))
    seal(folder, "lerobot", libero_settings)
    done = run_server(lerobot_python, tmp_path, "--port", str(free_port()))
    assert done.returncode == 2
    assert "inference-server: model.safetensors does not fit the act policy of config.json" in done.stderr
