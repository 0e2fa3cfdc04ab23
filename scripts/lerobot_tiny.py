"""Run in .venv-lerobot by the lerobot backend's tests and by `python -m scripts.bench.inference --lerobot`:
LeRobot's own code on the far side of a check or a measurement.

    build DIR [--policy act|smolvla|xvla] [--benchmark B] [--seed N] [--size PX | HxW]
        a tiny policy with benchmark B's features (random weights, nothing fetched), saved with its
        pre- and postprocessor by LeRobot's save_pretrained. `act` (the default): chunk_size 10,
        n_action_steps 10, no pretrained backbone. `smolvla`: LeRobot's SmolVLA at its default
        architecture (chunk 50, cross-attention expert 0.75x) over a tiny SmolVLM2-shaped VLM whose
        config, tokenizer and processor files are in DIR/vlm (`vlm_model_name: "vlm"`, relative to
        DIR; `load_vlm_weights: false`), built by `build_smolvla` below. `xvla` (LIBERO only): LeRobot's
        X-VLA (chunk 32, 10 denoising steps, ee6d actions, 20-D state and action) over a Florence-2
        of toy widths (DaViT stages 8/16/16/32 wide, one layer each; a one-layer BART of width 32)
        and a one-block action head of width 32; its tokenizer (a byte-level BPE) is in
        DIR/tokenizer, named relative to DIR; identity normalization, as LeRobot's default; the
        policy preprocessor without X-VLA's image and domain-id steps, as lerobot/xvla-libero's
    direct DIR INPUTS OUT [--benchmark B] [--noise-seed N]
        what that policy with its processors answers for each observation in INPUTS, called one
        row at a time, from DIR as the working directory (LeRobot reads the asset names of a folder
        relative to it); a flow-matching policy (smolvla) is given the noise the evalfleet backend
        gives episode `i` (the row's index) at step 0 under noise_seed N; xvla, which draws its
        noise from torch's global RNG, is called with that RNG seeded as the backend seeds it, and
        its LIBERO observations and actions go through LeRobot's X-VLA env processors (the chunk's
        actions one step at a time, as lerobot_eval does)
    select DIR INPUTS OUT [--benchmark B]
        the actions LeRobot's own evaluation loop executes when INPUTS are one episode's
        observations, step by step: `policy.select_action` between the processors, which infers a
        chunk when its queue is empty and executes `n_action_steps` of it
    throughput DIR [--camera PX] [--rows]
        the (LIBERO) policy with its processors called directly on batches, no server: reads
        "BATCH SECONDS" lines on stdin, answers each with one JSON line (steps/s, ms per stage).
        xvla goes through LeRobot's X-VLA env processors as well; --rows calls the whole path once
        per row of the batch, each under a seeded fork of torch's RNG, as the backend serves xvla

B is `libero` (the default), `robotwin` or `metaworld`. INPUTS holds `<i>.<name>.npy` for each camera and state
vector the benchmark's worker sends (upright uint8 HWC images) and `tasks.json`; OUT is one float32
.npy [N, chunk, action_dim] (`select`: [N, action_dim]). Arrays travel as .npy, never pickles.

The direct path is LeRobot's evaluation path. LIBERO: its env observation conversion
(`preprocess_observation`) and LIBERO processor (which flips the simulator's upside-down images, so
it is given them upside down) before the policy's own processors. RoboTwin (LeRobot has no RoboTwin
env): the same conversion as for its ALOHA env, `pixels` per camera plus the 14 joint values as
`agent_pos`, with the ALOHA-style feature names below. Meta-World: its env's `pixels` (the corner2
image, upright) and `agent_pos` through the same conversion. `throughput` takes the LIBERO path on
random PX x PX cameras, resized to the policy's input size as the backend does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import numpy.typing as npt
import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.envs.utils import preprocess_observation
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
from lerobot.processor.env_processor import LiberoProcessorStep
from torchvision.transforms.v2 import functional as TF

IMAGE_FEATURES = {
    "libero": ("observation.images.image", "observation.images.image2"),
    "robotwin": (
        "observation.images.cam_high",
        "observation.images.cam_left_wrist",
        "observation.images.cam_right_wrist",
    ),
    # LeRobot's Meta-World env: one camera, `pixels`, which preprocess_observation names observation.image.
    "metaworld": ("observation.image",),
}
STATE_LENGTH = {"libero": 8, "robotwin": 14, "metaworld": 4}
ACTION_DIM = {"libero": 7, "robotwin": 14, "metaworld": 4}
# The RoboTwin worker's camera names and state key (benchmarks/robotwin), in IMAGE_FEATURES' order.
ROBOTWIN_CAMERAS = ("head_camera", "left_camera", "right_camera")
ROBOTWIN_STATE = "joint_action"


def build(folder: Path, seed: int, size: tuple[int, int], benchmark: str = "libero") -> None:
    torch.manual_seed(seed)
    visual = PolicyFeature(type=FeatureType.VISUAL, shape=(3, *size))
    images, state_length, action_dim = IMAGE_FEATURES[benchmark], STATE_LENGTH[benchmark], ACTION_DIM[benchmark]
    config = ACTConfig(
        device="cpu",
        pretrained_backbone_weights=None,
        input_features={
            **dict.fromkeys(images, visual),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_length,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
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
    save_with_random_stats(folder, config, policy, images, state_length, action_dim)


def save_with_random_stats(
    folder: Path, config: Any, policy: Any, images: Iterable[str], state_length: int, action_dim: int
) -> None:
    """Saves ``policy`` with LeRobot's processors over random normalization statistics, drawn from
    torch's global RNG (the caller seeded it), as a trained checkpoint's folder holds them."""
    stats = {
        **{key: {"mean": torch.rand(3, 1, 1), "std": torch.rand(3, 1, 1) + 0.5} for key in images},
        "observation.state": {"mean": torch.randn(state_length) * 0.1, "std": torch.rand(state_length) + 0.5},
        "action": {"mean": torch.randn(action_dim), "std": torch.rand(action_dim) + 0.5},
    }
    # What the actions spanned, as LeRobot's compute_stats also writes (no further draws, so the
    # other statistics stay as they were).
    action = stats["action"]
    action["min"], action["max"] = action["mean"] - 3 * action["std"], action["mean"] + 3 * action["std"]
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=stats)
    for part in (policy, preprocessor, postprocessor):
        part.save_pretrained(folder)


# The tiny VLM behind the tiny SmolVLA: SmolVLM2's architecture (SigLIP vision tower, pixel-shuffle
# connector, Llama text model) at toy widths. The vision tower keeps SmolVLA's 512-px input
# (resize_imgs_with_padding) with 16-px patches, and scale_factor 4 gives SmolVLM2's 64 image tokens.
TINY_VISION = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
               "patch_size": 16, "image_size": 512}  # fmt: skip
TINY_TEXT = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128}  # fmt: skip
# SmolVLM's special tokens, which its processor and SmolVLA read from the tokenizer by these names.
SMOLVLM_TOKENS = {
    "fake_image_token": "<fake_token_around_image>",
    "image_token": "<image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
}
TOKENIZER_TEXT = [
    "put the bowl on the plate",
    "pick up the black bowl and place it in the basket",
    "open the top drawer of the cabinet",
    "turn on the stove and put the moka pot on it",
    "put both the alphabet soup and the tomato sauce in the basket",
    "User: Assistant: 0 1 2 3 4 5 6 7 8 9",
]
VLM_FOLDER = "vlm"


def build_tiny_vlm(folder: Path) -> None:
    """A SmolVLM2-shaped config, tokenizer and processor in `folder` (what SmolVLA's
    `AutoConfig.from_pretrained(vlm_model_name)` and `AutoProcessor.from_pretrained` read). The
    tokenizer is a byte-level BPE trained on a few sentences with SmolVLM's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, SmolVLMConfig, SmolVLMImageProcessor, SmolVLMProcessor
    from transformers.models.smolvlm.video_processing_smolvlm import SmolVLMVideoProcessor

    special = ["<pad>", "<|im_start|>", *SMOLVLM_TOKENS.values()]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(TOKENIZER_TEXT, trainer)
    # mypy reads .venv's transformers 5 (untyped there); this runs on .venv-lerobot's 4.57.6.
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe, pad_token="<pad>", bos_token="<|im_start|>", extra_special_tokens=SMOLVLM_TOKENS
    )
    processor = SmolVLMProcessor(
        SmolVLMImageProcessor(), tokenizer, video_processor=SmolVLMVideoProcessor(), image_seq_len=64
    )
    processor.save_pretrained(folder)
    image_token_id = bpe.token_to_id(SMOLVLM_TOKENS["image_token"])
    assert image_token_id is not None  # a special token of the trainer
    config = SmolVLMConfig(
        vision_config=TINY_VISION,
        text_config={**TINY_TEXT, "vocab_size": len(tokenizer)},
        scale_factor=4,
        image_token_id=image_token_id,
    )
    config.save_pretrained(folder)


def build_smolvla(folder: Path, seed: int, size: tuple[int, int], benchmark: str = "libero") -> None:
    """A tiny SmolVLA over the tiny VLM in folder/vlm, named relative to the folder. LeRobot reads
    the name against the working directory, so the build runs from the folder."""
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    build_tiny_vlm(folder / VLM_FOLDER)
    os.chdir(folder)
    visual = PolicyFeature(type=FeatureType.VISUAL, shape=(3, *size))
    images, state_length, action_dim = IMAGE_FEATURES[benchmark], STATE_LENGTH[benchmark], ACTION_DIM[benchmark]
    config = SmolVLAConfig(
        device="cpu",
        vlm_model_name=VLM_FOLDER,
        load_vlm_weights=False,
        num_vlm_layers=TINY_TEXT["num_hidden_layers"],
        input_features={
            **dict.fromkeys(images, visual),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_length,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
    )
    policy = SmolVLAPolicy(config)
    save_with_random_stats(folder, config, policy, images, state_length, action_dim)


TINY_FLORENCE_TEXT = {"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_ffn_dim": 64,
                      "decoder_ffn_dim": 64, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
                      "max_position_embeddings": 128}  # fmt: skip
TINY_FLORENCE_VISION = {"dim_embed": [8, 16, 16, 32], "num_heads": [1, 2, 2, 2], "num_groups": [1, 2, 2, 2],
                        "depths": [1, 1, 1, 1], "projection_dim": 32, "window_size": 4}  # fmt: skip
XVLA_STATE_LENGTH = XVLA_ACTION_DIM = 20  # LeRobot's X-VLA LIBERO state; ee6d actions (max_action_dim)
TOKENIZER_FOLDER = "tokenizer"
XVLA_ENV_STEPS = ("XVLAImageToFloatProcessorStep", "XVLAImageNetNormalizeProcessorStep", "XVLAAddDomainIdProcessorStep")


def refuse_non_finite(policy: torch.nn.Module) -> None:
    """A tiny checkpoint must hold finite weights, as a trained one does."""
    bad = [name for name, p in policy.named_parameters() if p.is_floating_point() and not torch.isfinite(p).all()]
    if bad:
        raise SystemExit(f"lerobot_tiny: non-finite weights after the build: {', '.join(bad)}")


def build_xvla(folder: Path, seed: int, size: tuple[int, int], benchmark: str = "libero") -> None:
    """A tiny X-VLA with LIBERO features; the BART-style tokenizer (byte-level BPE with BART's special
    tokens) in folder/tokenizer. LeRobot reads `tokenizer_name` against the working directory, so the
    build runs from the folder."""
    from lerobot.policies.xvla.configuration_xvla import XVLAConfig
    from lerobot.policies.xvla.modeling_xvla import XVLAPolicy
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if benchmark != "libero":
        raise SystemExit("lerobot_tiny: --policy xvla builds LIBERO features only")
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    special = ["<s>", "<pad>", "</s>", "<unk>"]  # BART's, at BART's ids (pad 1, as Florence-2's config)
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(TOKENIZER_TEXT, trainer)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.save_pretrained(folder / TOKENIZER_FOLDER)
    os.chdir(folder)
    vocab = len(tokenizer)
    visual = PolicyFeature(type=FeatureType.VISUAL, shape=(3, *size))
    config = XVLAConfig(
        device="cpu",
        florence_config={
            "vision_config": TINY_FLORENCE_VISION,
            "text_config": {**TINY_FLORENCE_TEXT, "vocab_size": vocab},
            "vocab_size": vocab,
            "projection_dim": TINY_FLORENCE_VISION["projection_dim"],
        },
        tokenizer_name=TOKENIZER_FOLDER,
        hidden_size=32,
        depth=1,
        num_heads=2,
        input_features={
            **dict.fromkeys(IMAGE_FEATURES["libero"], visual),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(XVLA_STATE_LENGTH,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(XVLA_ACTION_DIM,))},
    )
    policy = XVLAPolicy(config)
    # Florence-2 allocates its image projection with torch.empty and no _init_weights branch covers a
    # bare Parameter: left alone, the saved weights are whatever memory held (at times NaN, which
    # made X-VLA's rotation conversion fail on CI). Drawn from the seeded RNG, the build is repeatable.
    torch.nn.init.normal_(policy.model.vlm.image_projection, std=0.02)
    refuse_non_finite(policy)
    preprocessor, postprocessor = make_pre_post_processors(config)
    # As lerobot/xvla-libero on the hub (lerobot issue #2954): its policy preprocessor lacks the X-VLA
    # image and domain steps, which LeRobot's X-VLA LIBERO env preprocessor applies; kept, LeRobot's
    # own evaluation would apply them twice (lerobot issue #2955), and 0.4.4 stops at the second.
    preprocessor.steps = [s for s in preprocessor.steps if type(s).__name__ not in XVLA_ENV_STEPS]
    for part in (policy, preprocessor, postprocessor):
        part.save_pretrained(folder)


def libero_observation(load: Callable[[str], npt.NDArray[Any]]) -> dict[str, Any]:
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
    return dict(LiberoProcessorStep().observation(preprocess_observation(raw)))


def xvla_libero_observation(load: Callable[[str], npt.NDArray[Any]]) -> dict[str, Any]:
    """LeRobot's LIBERO env observation (lerobot/envs/libero.py:252-266: images as the simulator
    renders them, the end effector's position, quaternion and rotation matrix) converted by
    `preprocess_observation`, before X-VLA's own env preprocessor (applied by the caller)."""
    raw = {
        "pixels": {
            "image": np.ascontiguousarray(load("agentview")[::-1, ::-1]),
            "image2": np.ascontiguousarray(load("robot0_eye_in_hand")[::-1, ::-1]),
        },
        "robot_state": {"eef": {"pos": load("robot0_eef_pos")[None], "mat": load("robot0_eef_mat").reshape(1, 3, 3)}},
    }
    return dict(preprocess_observation(raw))


def robotwin_observation(load: Callable[[str], npt.NDArray[Any]]) -> dict[str, Any]:
    pixels = {
        feature.removeprefix("observation.images."): load(camera)
        for camera, feature in zip(ROBOTWIN_CAMERAS, IMAGE_FEATURES["robotwin"], strict=True)
    }
    return dict(preprocess_observation({"pixels": pixels, "agent_pos": load(ROBOTWIN_STATE)}))


def metaworld_observation(load: Callable[[str], npt.NDArray[Any]]) -> dict[str, Any]:
    """LeRobot's Meta-World env observation (its corner2 image upright, as the worker sends it, and
    `agent_pos`) converted by `preprocess_observation`."""
    return dict(preprocess_observation({"pixels": load("corner2"), "agent_pos": load("agent_pos")}))


OBSERVATIONS = {"libero": libero_observation, "robotwin": robotwin_observation, "metaworld": metaworld_observation}


def row_noise(config: Any, base: int, episode_id: str, step: int) -> torch.Tensor:
    """The noise the evalfleet backend draws for one session's step (its seed derivation):
    [1, chunk, max_action_dim]."""
    from inference_server.backends.lerobot import noise_seed

    generator = torch.Generator().manual_seed(noise_seed(base, episode_id, step))
    return torch.randn((len(config.action_delta_indices), int(config.max_action_dim)), generator=generator)[None]


def direct(folder: Path, inputs: Path, out: Path, benchmark: str = "libero", seed: int = 0) -> None:
    policy, preprocessor, postprocessor = _loaded(folder)
    tasks = json.loads((inputs / "tasks.json").read_text())
    if policy.config.type == "xvla":
        return direct_xvla(policy, preprocessor, postprocessor, inputs, out, tasks, seed)
    takes_noise = hasattr(policy.config, "max_action_dim")  # the flow-matching configs (smolvla, pi0, pi05)
    chunks = []
    for i, task in enumerate(tasks):

        def load(name: str, i: int = i) -> npt.NDArray[Any]:
            array: npt.NDArray[Any] = np.load(inputs / f"{i}.{name}.npy", allow_pickle=False)
            return array

        observation = OBSERVATIONS[benchmark](load)
        kwargs = {"noise": row_noise(policy.config, seed, str(i), 0)} if takes_noise else {}
        with torch.inference_mode():
            processed = preprocessor({**observation, "task": [task]})
            chunk = postprocessor(policy.predict_action_chunk(processed, **kwargs))
        chunks.append(chunk[0].to(torch.float32).numpy())
    np.save(out, np.stack(chunks), allow_pickle=False)


def direct_xvla(
    policy: Any, preprocessor: Any, postprocessor: Any, inputs: Path, out: Path, tasks: list[str], seed: int
) -> None:
    """lerobot_eval's path for X-VLA on LIBERO (lerobot/scripts/lerobot_eval.py:162-182, the env
    processors of lerobot/envs/factory.py:67-70), row by row, torch's RNG seeded as the backend seeds it."""
    from lerobot.policies.xvla.processor_xvla import make_xvla_libero_pre_post_processors

    from inference_server.backends.lerobot import noise_seed

    env_preprocessor, env_postprocessor = make_xvla_libero_pre_post_processors()
    chunks = []
    for i, task in enumerate(tasks):

        def load(name: str, i: int = i) -> npt.NDArray[Any]:
            array: npt.NDArray[Any] = np.load(inputs / f"{i}.{name}.npy", allow_pickle=False)
            return array

        observation = env_preprocessor({**xvla_libero_observation(load), "task": [task]})
        torch.manual_seed(noise_seed(seed, str(i), 0))
        with torch.inference_mode():
            chunk = postprocessor(policy.predict_action_chunk(preprocessor(observation)))
            steps = [env_postprocessor({"action": chunk[:, t]})["action"] for t in range(chunk.shape[1])]
        chunks.append(torch.stack(steps, dim=1)[0].to(torch.float32).numpy())
    np.save(out, np.stack(chunks), allow_pickle=False)


def select(folder: Path, inputs: Path, out: Path, benchmark: str = "libero") -> None:
    """LeRobot's rollout (lerobot 0.4.4, lerobot/scripts/lerobot_eval.py:140, 162-178) over the
    episode in INPUTS: `policy.reset()`, then per step the observation through the processors and
    `policy.select_action`, whose queue runs `n_action_steps` of each chunk it infers."""
    policy, preprocessor, postprocessor = _loaded(folder)
    tasks = json.loads((inputs / "tasks.json").read_text())
    policy.reset()
    actions = []
    for i, task in enumerate(tasks):

        def load(name: str, i: int = i) -> npt.NDArray[Any]:
            array: npt.NDArray[Any] = np.load(inputs / f"{i}.{name}.npy", allow_pickle=False)
            return array

        observation = OBSERVATIONS[benchmark](load)
        with torch.inference_mode():
            action = postprocessor(policy.select_action(preprocessor({**observation, "task": [task]})))
        actions.append(action[0].to(torch.float32).numpy())
    np.save(out, np.stack(actions), allow_pickle=False)


def _loaded(folder: Path) -> tuple[Any, Any, Any]:
    os.chdir(folder)  # LeRobot resolves a relative asset name (smolvla's `vlm`) against the working directory
    config = PreTrainedConfig.from_pretrained(folder)
    policy = get_policy_class(config.type).from_pretrained(folder, config=config)
    preprocessor, postprocessor = make_pre_post_processors(config, pretrained_path=str(folder))
    return policy, preprocessor, postprocessor


def _raw_batch(rng: np.random.Generator, batch: int, camera: int) -> dict[str, Any]:
    """A batch of LIBERO env observations as LeRobot's vectorized env hands them over."""
    quat = rng.normal(size=(batch, 4))
    mat, _ = np.linalg.qr(rng.normal(size=(batch, 3, 3)))  # orthonormal; LeRobot's env reads ee_ori_mat
    return {
        "pixels": {
            key: rng.integers(0, 256, (batch, camera, camera, 3), dtype=np.uint8) for key in ("image", "image2")
        },
        "robot_state": {
            "eef": {
                "pos": rng.normal(size=(batch, 3)),
                "quat": quat / np.linalg.norm(quat, axis=1, keepdims=True),
                "mat": mat,
            },
            "gripper": {"qpos": rng.normal(size=(batch, 2)) * 0.04},
        },
    }


def _row(raw: dict[str, Any], i: int) -> dict[str, Any]:
    """Row i of a nested batch of arrays, as a batch of one."""
    return {k: _row(v, i) if isinstance(v, dict) else v[i : i + 1] for k, v in raw.items()}


def throughput(folder: Path, camera: int, rows: bool = False) -> None:
    """Times each stage of one direct call on a batch (with `rows`, one call per row), over and over
    for the seconds asked."""
    policy, preprocessor, postprocessor = _loaded(folder)
    sizes = {key: list(feature.shape[-2:]) for key, feature in policy.config.image_features.items()}
    if policy.config.type == "xvla":
        from lerobot.policies.xvla.processor_xvla import make_xvla_libero_pre_post_processors

        env_pre, env_post = make_xvla_libero_pre_post_processors()
    else:
        libero = LiberoProcessorStep()
        env_pre, env_post = libero.observation, None
    rng = np.random.default_rng(0)
    print("ready", flush=True)

    def call(raw: dict[str, Any], tasks: list[str], seed: int | None, spent: list[float]) -> torch.Tensor:
        t0 = time.perf_counter()
        observation = preprocess_observation(raw)
        for key, size in sizes.items():  # the backend resizes before the env step, the same images
            observation[key] = TF.resize(observation[key], size, antialias=True)
        observation = env_pre({**observation, "task": tasks})
        t1 = time.perf_counter()
        processed = preprocessor({**observation, "task": tasks})
        t2 = time.perf_counter()
        if seed is None:
            actions = policy.predict_action_chunk(processed)
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                actions = policy.predict_action_chunk(processed)
        t3 = time.perf_counter()
        chunk: torch.Tensor = postprocessor(actions)
        if env_post is not None:
            n, steps, width = chunk.shape
            chunk = env_post({"action": chunk.reshape(n * steps, width)})["action"].reshape(n, steps, -1)
        t4 = time.perf_counter()
        for index, value in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            spent[index] += value
        return chunk

    for line in sys.stdin:
        batch, seconds = int(line.split()[0]), float(line.split()[1])
        raw = _raw_batch(rng, batch, camera)
        tasks = [f"put object {i} in the basket" for i in range(batch)]
        stages = dict.fromkeys(("inputs", "preprocessor", "policy", "postprocessor"), 0.0)
        calls, chunk = 0, None
        started = time.perf_counter()
        while calls < 2 or time.perf_counter() - started < seconds:
            spent = [0.0] * 4
            with torch.inference_mode():
                if rows:
                    chunk = torch.cat(
                        [call(_row(raw, i), tasks[i : i + 1], calls * batch + i, spent) for i in range(batch)]
                    )
                else:
                    chunk = call(raw, tasks, None, spent)
            if calls:  # the first call of a batch size is warmup
                for name, value in zip(stages, spent, strict=True):
                    stages[name] += value
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


def image_size(text: str) -> tuple[int, int]:
    height, _, width = text.partition("x")
    return int(height), int(width or height)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("folder", type=Path)
    b.add_argument("--policy", choices=("act", "smolvla", "xvla"), default="act")
    b.add_argument("--benchmark", choices=sorted(IMAGE_FEATURES), default="libero")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--size", type=image_size, default=(64, 64), help="PX (square) or HxW")
    for name in ("direct", "select"):
        d = sub.add_parser(name)
        d.add_argument("folder", type=Path)
        d.add_argument("inputs", type=Path)
        d.add_argument("out", type=Path)
        d.add_argument("--benchmark", choices=sorted(IMAGE_FEATURES), default="libero")
    sub.choices["direct"].add_argument("--noise-seed", type=int, default=0)
    t = sub.add_parser("throughput")
    t.add_argument("folder", type=Path)
    t.add_argument("--camera", type=int, default=256)
    t.add_argument("--rows", action="store_true", help="one call per row, each under a seeded RNG fork")
    args = parser.parse_args()
    for name in ("folder", "inputs", "out"):  # absolute before `_loaded` changes the working directory
        if getattr(args, name, None) is not None:
            setattr(args, name, getattr(args, name).absolute())
    if args.command == "build" and args.policy == "smolvla":
        build_smolvla(args.folder, args.seed, args.size, args.benchmark)
    elif args.command == "build" and args.policy == "xvla":
        build_xvla(args.folder, args.seed, args.size, args.benchmark)
    elif args.command == "build":
        build(args.folder, args.seed, args.size, args.benchmark)
    elif args.command == "direct":
        direct(args.folder, args.inputs, args.out, args.benchmark, args.noise_seed)
    elif args.command == "select":
        select(args.folder, args.inputs, args.out, args.benchmark)
    else:
        throughput(args.folder, args.camera, args.rows)


if __name__ == "__main__":
    main()
