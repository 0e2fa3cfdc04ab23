"""Run in .venv-lerobot by the lerobot backend's tests and by scripts/bench_inference.py --lerobot:
LeRobot's own code on the far side of a check or a measurement.

    build DIR [--seed N] [--size PX]     a tiny ACT policy with LIBERO features (random weights, no
                                         pretrained backbone, so nothing is fetched), saved with its
                                         pre- and postprocessor by LeRobot's save_pretrained
    direct DIR INPUTS OUT                what that policy with its processors answers for each
                                         observation in INPUTS, called one row at a time
    throughput DIR [--camera PX]         the policy with its processors called directly on batches,
                                         no server: reads "BATCH SECONDS" lines on stdin, answers
                                         each with one JSON line (steps/s, ms per batch per stage)

INPUTS holds `<i>.agentview.npy`, `<i>.robot0_eye_in_hand.npy` (upright uint8 HWC, as evalfleet's
worker sends), `<i>.robot0_eef_pos.npy`, `<i>.robot0_eef_quat.npy`, `<i>.robot0_gripper_qpos.npy`
and `tasks.json`; OUT is one float32 .npy [N, chunk, action_dim]. Arrays travel as .npy, never
pickles. The direct path is LeRobot's LIBERO evaluation path: its env observation conversion
(`preprocess_observation`) and LIBERO processor (which flips the simulator's upside-down images, so
it is given them upside down) before the policy's own processors. `throughput` takes the same path
on random PX x PX cameras, resized to the policy's input size as the backend does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.envs.utils import preprocess_observation
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
from lerobot.processor.env_processor import LiberoProcessorStep
from torchvision.transforms.v2 import functional as TF

IMAGE_FEATURES = ("observation.images.image", "observation.images.image2")


def build(folder: Path, seed: int, size: int) -> None:
    torch.manual_seed(seed)
    visual = PolicyFeature(type=FeatureType.VISUAL, shape=(3, size, size))
    config = ACTConfig(
        device="cpu",
        pretrained_backbone_weights=None,
        input_features={
            **dict.fromkeys(IMAGE_FEATURES, visual),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(8,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))},
        chunk_size=10,
        n_action_steps=10,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=8,
    )
    policy = ACTPolicy(config)
    stats = {
        **{key: {"mean": torch.rand(3, 1, 1), "std": torch.rand(3, 1, 1) + 0.5} for key in IMAGE_FEATURES},
        "observation.state": {"mean": torch.randn(8) * 0.1, "std": torch.rand(8) + 0.5},
        "action": {"mean": torch.randn(7), "std": torch.rand(7) + 0.5},
    }
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, preprocessor, postprocessor):
        part.save_pretrained(folder)


def direct(folder: Path, inputs: Path, out: Path) -> None:
    policy, preprocessor, postprocessor = _loaded(folder)
    libero = LiberoProcessorStep()
    tasks = json.loads((inputs / "tasks.json").read_text())
    chunks = []
    for i, task in enumerate(tasks):

        def load(name: str, i: int = i) -> np.ndarray:
            return np.load(inputs / f"{i}.{name}.npy", allow_pickle=False)

        raw = {
            # The simulator's orientation: upside down, which LeRobot's LIBERO processor flips back.
            "pixels": {
                "image": np.ascontiguousarray(load("agentview")[::-1, ::-1]),
                "image2": np.ascontiguousarray(load("robot0_eye_in_hand")[::-1, ::-1]),
            },
            "robot_state": {
                "eef": {"pos": load("robot0_eef_pos")[None], "quat": load("robot0_eef_quat")[None]},
                "gripper": {"qpos": load("robot0_gripper_qpos")[None]},
            },
        }
        observation = libero.observation(preprocess_observation(raw))
        with torch.inference_mode():
            chunk = postprocessor(policy.predict_action_chunk(preprocessor({**observation, "task": [task]})))
        chunks.append(chunk[0].to(torch.float32).numpy())
    np.save(out, np.stack(chunks), allow_pickle=False)


def _loaded(folder: Path) -> tuple[Any, Any, Any]:
    config = PreTrainedConfig.from_pretrained(folder)
    policy = get_policy_class(config.type).from_pretrained(folder, config=config)
    preprocessor, postprocessor = make_pre_post_processors(config, pretrained_path=str(folder))
    return policy, preprocessor, postprocessor


def _raw_batch(rng: np.random.Generator, batch: int, camera: int) -> dict[str, Any]:
    """A batch of LIBERO env observations as LeRobot's vectorized env hands them over."""
    quat = rng.normal(size=(batch, 4))
    return {
        "pixels": {
            key: rng.integers(0, 256, (batch, camera, camera, 3), dtype=np.uint8) for key in ("image", "image2")
        },
        "robot_state": {
            "eef": {"pos": rng.normal(size=(batch, 3)), "quat": quat / np.linalg.norm(quat, axis=1, keepdims=True)},
            "gripper": {"qpos": rng.normal(size=(batch, 2)) * 0.04},
        },
    }


def throughput(folder: Path, camera: int) -> None:
    """Times each stage of one direct batched call, over and over for the seconds asked."""
    policy, preprocessor, postprocessor = _loaded(folder)
    sizes = {key: list(feature.shape[-2:]) for key, feature in policy.config.image_features.items()}
    libero = LiberoProcessorStep()
    rng = np.random.default_rng(0)
    print("ready", flush=True)
    for line in sys.stdin:
        batch, seconds = int(line.split()[0]), float(line.split()[1])
        raw = _raw_batch(rng, batch, camera)
        tasks = [f"put object {i} in the basket" for i in range(batch)]
        stages = dict.fromkeys(("inputs", "preprocessor", "policy", "postprocessor"), 0.0)
        calls, chunk = 0, None
        started = time.perf_counter()
        while calls < 2 or time.perf_counter() - started < seconds:
            with torch.inference_mode():
                t0 = time.perf_counter()
                observation = libero.observation(preprocess_observation(raw))
                for key, size in sizes.items():
                    observation[key] = TF.resize(observation[key], size, antialias=True)
                t1 = time.perf_counter()
                processed = preprocessor({**observation, "task": tasks})
                t2 = time.perf_counter()
                actions = policy.predict_action_chunk(processed)
                t3 = time.perf_counter()
                chunk = postprocessor(actions)
                t4 = time.perf_counter()
            if calls:  # the first call of a batch size is warmup
                for name, spent in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                    stages[name] += spent
            calls += 1
        timed = calls - 1
        total = sum(stages.values())
        assert chunk is not None and bool(torch.isfinite(chunk).all())
        reply = {
            "batch": batch,
            "calls": timed,
            "steps_per_s": batch * timed / total,
            "ms": {name: 1000.0 * spent / timed for name, spent in stages.items()},
            "chunk_shape": list(chunk.shape),
        }
        print(json.dumps(reply), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("folder", type=Path)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--size", type=int, default=64)
    d = sub.add_parser("direct")
    d.add_argument("folder", type=Path)
    d.add_argument("inputs", type=Path)
    d.add_argument("out", type=Path)
    t = sub.add_parser("throughput")
    t.add_argument("folder", type=Path)
    t.add_argument("--camera", type=int, default=256)
    args = parser.parse_args()
    if args.command == "build":
        build(args.folder, args.seed, args.size)
    elif args.command == "direct":
        direct(args.folder, args.inputs, args.out)
    else:
        throughput(args.folder, args.camera)


if __name__ == "__main__":
    main()
