"""The VLA backend end to end: a tiny random-weight Qwen3-VL policy in the real sharded layout,
verified, loaded and served on CPU by a real server process (no hub, no network)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from inference_helpers import ServerProcess, episode
from tokenizers import Tokenizer, models, pre_tokenizers

from evalfleet.policy_api import tensors
from evalfleet.v1 import policy_pb2
from inference_server.backends.vla import VLAConfig, VLAPolicy, save_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CAMERAS = ("head", "left", "right")
HEIGHT, WIDTH = 48, 64
CHUNK, ACTION_DIM = 50, 14
IMAGE, VIDEO, VISION_START, VISION_END = 120, 121, 122, 123


def tiny_backbone() -> dict:
    """A two-layer Qwen3-VL built locally: same classes as the 4B release, tiny sizes."""
    config = transformers.Qwen3VLConfig(
        text_config={
            "vocab_size": 128,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": 8,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 32,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [1],
        },
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END,
    )
    return config.to_dict()


def tiny_tokenizer() -> Tokenizer:
    words = ["[UNK]", "adjust", "the", "bottle", "pick", "place", "bowl"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


def training_config() -> dict:
    return {
        "backbone": tiny_backbone(),
        "cameras": [{"name": n, "height": HEIGHT, "width": WIDTH} for n in CAMERAS],
        "state": [{"name": "qpos", "length": 14}],
        "action_dim": ACTION_DIM,
        "chunk_length": CHUNK,
        "history_length": 4,
        "image_size": [32, 32],
        "head_hidden": 32,
    }


def normalization() -> dict:
    return {
        "state": {"mean": [0.0] * 14, "std": [1.0] * 14},
        "action": {"mean": [0.5] * ACTION_DIM, "std": [2.0] * ACTION_DIM},
    }


@pytest.fixture(scope="module")
def vla_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """checkpoints/ep6 with a random-weight policy, sharded into several safetensors files."""
    root = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    raw = training_config()
    policy = VLAPolicy(VLAConfig.from_dict(raw))
    save_checkpoint(root / "ep6", policy, raw, normalization(), tiny_tokenizer(), max_shard_bytes=200_000)
    return root


@pytest.fixture(scope="module")
def vla_server(vla_root: Path, tmp_path_factory: pytest.TempPathFactory):
    server = ServerProcess(
        vla_root, "ep6", "--batch-timeout-ms", "200", log_path=tmp_path_factory.mktemp("logs") / "server.log"
    )
    server.start(timeout_s=240)
    yield server
    server.stop()


def camera_images(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8) for n in CAMERAS}


def qpos(value: float) -> dict[str, np.ndarray]:
    return {"qpos": np.linspace(-1, 1, 14) * value}


def meta(instruction: str) -> policy_pb2.EpisodeMeta:
    meta = episode()
    meta.instruction = instruction
    return meta


def test_identity_names_every_shard_and_file(vla_server, vla_root: Path) -> None:
    sealed = json.loads((vla_root / "ep6" / "evalfleet-checkpoint.json").read_text())["sha256"]
    with vla_server.client() as client:
        record = client.identity().identity
    shards = {k: v for k, v in sealed.items() if k.endswith(".safetensors")}
    assert len(shards) >= 2 and dict(record.shard_sha256) == shards
    assert record.index_sha256 == sealed["model.safetensors.index.json"]
    assert record.config_sha256 == sealed["training_config.yaml"]
    assert record.normalization_sha256 == sealed["normalization.json"]
    assert dict(record.other_sha256) == {"tokenizer.json": sealed["tokenizer.json"]}
    assert (record.action_dim, record.chunk_length) == (ACTION_DIM, CHUNK)
    assert record.precision.dtype == "float32" and record.precision.attn_impl == "sdpa"


def test_serves_chunks_that_depend_on_images_state_and_history(vla_server) -> None:
    with vla_server.client() as client:
        digest = client.identity().digest
        with client.open_session(digest, meta("adjust the bottle")) as session:
            first = session.act(camera_images(0), qpos(1.0), 0, 0)
            after_history = session.act(camera_images(0), qpos(1.0), 1, 20)
        with client.open_session(digest, meta("adjust the bottle")) as again:
            repeated = again.act(camera_images(0), qpos(1.0), 0, 0)
            other_image = again.act(camera_images(1), qpos(1.0), 1, 0)
    assert first.shape == (CHUNK, ACTION_DIM) and np.isfinite(first).all()
    np.testing.assert_allclose(repeated, first, atol=1e-5)
    assert np.abs(after_history - first).max() > 1e-4  # the confirmed history reached the model
    assert np.abs(other_image - first).max() > 1e-4


def test_batched_answers_equal_single_answers(vla_server) -> None:
    """Two sessions with prompts of different lengths share one padded batch."""
    instructions = ("adjust the bottle", "pick")
    with vla_server.client() as client:
        digest = client.identity().digest
        alone = []
        for index, instruction in enumerate(instructions):
            with client.open_session(digest, meta(instruction)) as session:
                alone.append(session.act(camera_images(index), qpos(index), 0, 0))
        sessions = [client.open_session(digest, meta(i)) for i in instructions]
        barrier = threading.Barrier(2)

        def step(index: int) -> policy_pb2.SessionResponse:
            request = tensors.observation_request(0, 0, camera_images(index), qpos(index))
            barrier.wait()
            return sessions[index]._exchange(request)

        with ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(step, range(2)))
        for session in sessions:
            session.close()
    assert [r.chunk.batch_size for r in replies] == [2, 2]
    for reply, single in zip(replies, alone, strict=True):
        np.testing.assert_allclose(tensors.decode(reply.chunk.actions), single, atol=1e-4)


def test_tampered_shard_is_refused_by_name_before_loading(vla_root: Path, tmp_path: Path) -> None:
    copy = tmp_path / "checkpoints"
    shutil.copytree(vla_root, copy)
    shard = copy / "ep6" / "model-00002-of-00003.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = subprocess.run(
        [sys.executable, "-m", "inference_server.cli", "--epoch", "ep6", "--checkpoint-root", str(copy), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "model-00002-of-00003.safetensors differs from its sealed hash" in result.stderr
    assert "SERVING ep6" not in result.stderr


def test_flash_attention_falls_back_to_sdpa_without_cuda(vla_root: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "inference_server.cli",
            "--epoch",
            "ep6",
            "--checkpoint-root",
            str(vla_root),
            "--dry-run",
            "--attn-impl",
            "flash_attention_2",
            "--tf32",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    precision = json.loads(result.stdout)["identity"]["precision"]
    assert precision["attn_impl"] == "sdpa" and precision["tf32"] is False
