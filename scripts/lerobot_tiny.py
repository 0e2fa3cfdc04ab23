"""Run in .venv-lerobot by the lerobot backend's tests: LeRobot's own code on both ends of a check.

    build DIR [--seed N] [--size PX]     a tiny ACT policy with LIBERO features (random weights, no
                                         pretrained backbone, so nothing is fetched), saved with its
                                         pre- and postprocessor by LeRobot's save_pretrained
    direct DIR INPUTS OUT                what that policy with its processors answers for each
                                         observation in INPUTS, called one row at a time

INPUTS holds `<i>.agentview.npy`, `<i>.robot0_eye_in_hand.npy` (upright uint8 HWC, as evalfleet's
worker sends), `<i>.robot0_eef_pos.npy`, `<i>.robot0_eef_quat.npy`, `<i>.robot0_gripper_qpos.npy`
and `tasks.json`; OUT is one float32 .npy [N, chunk, action_dim]. Arrays travel as .npy, never
pickles. The direct path is LeRobot's LIBERO evaluation path: its env observation conversion
(`preprocess_observation`) and LIBERO processor (which flips the simulator's upside-down images, so
it is given them upside down) before the policy's own processors.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

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
    config = PreTrainedConfig.from_pretrained(folder)
    policy = get_policy_class(config.type).from_pretrained(folder, config=config)
    preprocessor, postprocessor = make_pre_post_processors(config, pretrained_path=str(folder))
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
    args = parser.parse_args()
    if args.command == "build":
        build(args.folder, args.seed, args.size)
    else:
        direct(args.folder, args.inputs, args.out)


if __name__ == "__main__":
    main()
