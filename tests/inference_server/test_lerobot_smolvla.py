"""The `lerobot` backend serving SmolVLA with the real LeRobot and transformers code, offline.

The policy is a tiny random-weight SmolVLA at LeRobot's default architecture over a tiny
SmolVLM2-shaped VLM (scripts/lerobot_tiny.py `build --policy smolvla`): the VLM's config, tokenizer
and processor files are in the checkpoint's `vlm/` folder, which config.json (`vlm_model_name`) and
the tokenizer processor (`tokenizer_name`) name relative to the checkpoint folder. The server runs
from another working directory, so those names resolve only because the backend resolves them
against the folder; LeRobot's own path is run from the folder itself.

Also here: the sealed transformers version, assets outside the folder, tampered VLM files, a renamed
weight, a missing tokenizer, and pi0/pi05 on a transformers without LeRobot's openpi changes.
Everything LeRobot does runs in subprocesses of .venv-lerobot (lerobot_helpers.py says how).
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
    observation,
    run_lerobot,
    run_server,
    serve_libero_episodes,
    server,
)
from libero_guard import NEEDS_LIBERO

from evalfleet.policy_api import tensors
from evalfleet.processes import free_port
from inference_server.checkpoint import MANIFEST_NAME, seal

pytestmark = [NEEDS_LEROBOT, pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = 3
CHUNK = 50  # SmolVLA's default chunk_size and n_action_steps


@pytest.fixture(scope="module")
def smolvla_settings(lerobot_python: Path) -> dict[str, Any]:
    return backend_settings(lerobot_python, f"libero_settings('smolvla', {CAMERA})")


@pytest.fixture(scope="module")
def tiny_smolvla(lerobot_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny SmolVLA with LIBERO features and its VLM folder, saved by LeRobot; built once, copied per test."""
    folder = tmp_path_factory.mktemp("smolvla") / "smolvla"
    return build_tiny(lerobot_python, folder, "--policy", "smolvla", "--size", str(CAMERA))


def smolvla_copy(source: Path, root: Path, settings: dict[str, Any]) -> Path:
    folder = root / "smolvla"
    shutil.copytree(source, folder)
    seal(folder, "lerobot", settings)
    return folder


def refusal(done: Any) -> str:
    """The one line a refusing server or seal prints (exit 2, no traceback)."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("inference-server")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_the_tiny_smolvla_names_its_vlm_relative_to_the_folder(tiny_smolvla: Path) -> None:
    """What the builder wrote is what a relative checkpoint looks like (else the tests below prove nothing)."""
    config = json.loads((tiny_smolvla / "config.json").read_text())
    assert (config["type"], config["vlm_model_name"], config["load_vlm_weights"]) == ("smolvla", "vlm", False)
    steps = json.loads((tiny_smolvla / "policy_preprocessor.json").read_text())["steps"]
    (tokenizer,) = [s for s in steps if s["registry_name"] == "tokenizer_processor"]
    assert tokenizer["config"]["tokenizer_name"] == "vlm"
    assert {"config.json", "tokenizer.json", "processor_config.json"} <= {
        p.name for p in (tiny_smolvla / "vlm").iterdir()
    }


def test_concurrent_smolvla_sessions_are_one_batch_equal_to_lerobot_row_by_row(
    lerobot_python: Path, tiny_smolvla: Path, smolvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """Three sessions in one batch; each row equals LeRobot's own LIBERO path called on that row
    alone with the same noise, so a row depends neither on the batch nor on the working directory."""
    folder = smolvla_copy(tiny_smolvla, tmp_path / "ckpt", smolvla_settings)
    rng = np.random.default_rng(5)
    observations = [observation(rng) for _ in range(SESSIONS)]
    tasks = ["put the bowl on the plate", "open the top drawer", "pick up the black bowl"]
    expected = direct_chunks(lerobot_python, folder, tmp_path, observations, tasks)

    proc = server(lerobot_python, tmp_path / "ckpt", tmp_path, "--batch-timeout-ms", "3000", epoch="smolvla")
    with proc.start(timeout_s=180), proc.client() as client:
        reply = client.identity()
        settings = json.loads(reply.identity.backend_settings_json)
        assert (settings["policy_type"], settings["transformers_version"]) == ("smolvla", "4.57.6")
        assert (reply.identity.chunk_length, reply.identity.action_dim) == (CHUNK, 7)
        replies = first_steps_together(client, reply.digest, "libero", observations, tasks)
    assert all(r.WhichOneof("kind") == "chunk" for r in replies), replies
    assert [r.chunk.batch_size for r in replies] == [SESSIONS] * SESSIONS
    served = np.stack([tensors.decode(r.chunk.actions, "chunk.actions") for r in replies])
    assert served.shape == (SESSIONS, CHUNK, 7)
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(served[0], served[1])


@pytest.mark.parametrize("tampered", ["vlm/tokenizer.json", "vlm/config.json"])
def test_a_tampered_vlm_file_is_refused_naming_it(
    lerobot_python: Path, tiny_smolvla: Path, smolvla_settings: dict[str, Any], tmp_path: Path, tampered: str
) -> None:
    """The VLM's files are sealed with the checkpoint: their bytes are in the digest."""
    folder = smolvla_copy(tiny_smolvla, tmp_path, smolvla_settings)
    path = folder / tampered
    path.write_text(path.read_text() + "\n")
    line = refusal(run_server(lerobot_python, tmp_path, "--dry-run", epoch="smolvla"))
    assert f"{tampered} differs from its sealed hash" in line


def test_a_vlm_outside_the_folder_is_refused_at_seal_and_at_start(
    lerobot_python: Path, tiny_smolvla: Path, smolvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """An absolute vlm_model_name outside the folder would be read but not sealed: refused by name at
    seal; a sealed tokenizer_name override that climbs out of the folder is refused at start."""
    folder = smolvla_copy(tiny_smolvla, tmp_path / "ckpt", smolvla_settings)
    outside = tmp_path / "elsewhere"
    shutil.move(folder / "vlm", outside)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vlm_model_name": str(outside)}))
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(smolvla_settings))
    argv = ["-m", "inference_server.cli", "checkpoint", "seal", str(folder), "--backend", "lerobot", "--force"]
    line = refusal(run_lerobot(lerobot_python, *argv, "--settings-file", str(settings_file)))
    assert f"config.json vlm_model_name '{outside}' is outside the checkpoint folder" in line

    shutil.move(outside, folder / "vlm")
    (folder / "config.json").write_text(json.dumps(config))
    escaping = {
        **smolvla_settings,
        "processor_overrides": {"preprocessor": {"tokenizer_processor": {"tokenizer_name": "../vlm"}}},
    }
    seal(folder, "lerobot", escaping)
    line = refusal(run_server(lerobot_python, tmp_path / "ckpt", "--dry-run", epoch="smolvla"))
    assert "settings.processor_overrides.preprocessor.tokenizer_processor.tokenizer_name '../vlm' is outside" in line


def test_load_vlm_weights_true_is_refused_at_seal(
    lerobot_python: Path, tiny_smolvla: Path, smolvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """True would fetch SmolVLM2's weights from the hub; the seal says to set it to false."""
    folder = tmp_path / "smolvla"
    shutil.copytree(tiny_smolvla, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "load_vlm_weights": True}))
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(smolvla_settings))
    argv = ["-m", "inference_server.cli", "checkpoint", "seal", str(folder), "--backend", "lerobot"]
    line = refusal(run_lerobot(lerobot_python, *argv, "--settings-file", str(settings_file)))
    assert "config.json: load_vlm_weights is true" in line and "set it to false" in line
    assert not (folder / MANIFEST_NAME).exists()


def test_a_renamed_weight_stops_the_server_naming_the_key(
    lerobot_python: Path, tiny_smolvla: Path, smolvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """LeRobot's loader leaves a renamed tensor unused (strict=False is LeRobot's own default); the
    backend's check after loading names it, so a partly random policy is never served."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "smolvla"
    shutil.copytree(tiny_smolvla, folder)
    weights = load_file(str(folder / "model.safetensors"))
    key = next(k for k in sorted(weights) if k.endswith("state_proj.weight"))
    weights[key.replace("state_proj", "state_projection")] = weights.pop(key)
    save_file(weights, str(folder / "model.safetensors"))
    seal(folder, "lerobot", smolvla_settings)
    line = refusal(run_server(lerobot_python, tmp_path, "--port", str(free_port()), epoch="smolvla"))
    renamed = key.replace("state_proj", "state_projection")
    assert f"model.safetensors: tensor '{renamed}' is not in the smolvla policy" in line


def test_a_missing_tokenizer_file_is_one_line_naming_the_vlm_folder(
    lerobot_python: Path, tiny_smolvla: Path, smolvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """transformers' error for a tokenizer it cannot build becomes one line naming where to provide it."""
    folder = tmp_path / "smolvla"
    shutil.copytree(tiny_smolvla, folder)
    (folder / "vlm" / "tokenizer.json").unlink()
    seal(folder, "lerobot", smolvla_settings)
    line = refusal(run_server(lerobot_python, tmp_path, "--port", str(free_port()), epoch="smolvla"))
    assert "could not read an asset" in line and "config.vlm_model_name = vlm" in line


def test_pi0_and_pi05_are_refused_without_lerobots_transformers_fork(
    lerobot_python: Path, tiny_smolvla: Path, smolvla_settings: dict[str, Any], tmp_path: Path
) -> None:
    """Stock transformers lacks openpi's changes: pi05 refused at seal, pi0 at start, saying what to install."""
    for policy_type in ("pi05", "pi0"):
        folder = tmp_path / policy_type
        shutil.copytree(tiny_smolvla, folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "type": policy_type}))
    settings = {**smolvla_settings, "policy_type": "pi05"}
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(settings))
    argv = ["-m", "inference_server.cli", "checkpoint", "seal", str(tmp_path / "pi05"), "--backend", "lerobot"]
    line = refusal(run_lerobot(lerobot_python, *argv, "--settings-file", str(settings_file)))
    expected = "needs LeRobot's fork of transformers (openpi's changes), not transformers 4.57.6"
    assert f"policy type 'pi05' {expected}" in line
    assert "fix/lerobot_openpi" in line and "remote backend" in line
    assert not (tmp_path / "pi05" / MANIFEST_NAME).exists()
    seal(tmp_path / "pi0", "lerobot", {**smolvla_settings, "policy_type": "pi0"})
    assert f"policy type 'pi0' {expected}" in refusal(run_server(lerobot_python, tmp_path, "--dry-run", epoch="pi0"))


@pytest.mark.libero
@pytest.mark.timeout(600)
@NEEDS_LIBERO
def test_real_libero_episodes_end_to_end_with_smolvla(
    lerobot_python: Path,
    tiny_smolvla: Path,
    smolvla_settings: dict[str, Any],
    scheduler: Any,
    start_worker: Any,
    tmp_path: Path,
) -> None:
    """Scheduler -> a renderer worker (main virtualenv, real LIBERO) -> the SmolVLA server, two short episodes."""
    smolvla_copy(tiny_smolvla, tmp_path / "checkpoints", smolvla_settings)
    run = serve_libero_episodes(lerobot_python, tmp_path / "checkpoints", "smolvla", scheduler, start_worker, tmp_path)
    run.assert_every_episode_ran_once()
