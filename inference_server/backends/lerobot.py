"""The `lerobot` backend: a LeRobot pretrained folder served through LeRobot's own classes.

Most public LIBERO and RoboTwin checkpoints ship in LeRobot's format (`config.json`,
`model.safetensors`, and the `policy_preprocessor*` / `policy_postprocessor*` files that
`save_pretrained` writes). This backend loads them with `PreTrainedConfig.from_pretrained`,
`get_policy_class(type).from_pretrained` and `make_pre_post_processors(..., pretrained_path=...)`,
so the policy and its normalization are LeRobot's code, never a re-implementation.

It runs in its own virtualenv (`.venv-lerobot`, requirements/lerobot.txt): LeRobot pins other
torch, numpy and transformers versions than the `inference` extra.

What evalfleet adds around LeRobot:

- Identity: every file of the folder is sealed like any checkpoint; the settings (in the digest)
  name the lerobot and transformers versions (a VLA's outputs change with transformers), the policy
  type, the feature map (evalfleet camera and state names -> LeRobot feature keys) and any processor
  overrides. The installed lerobot and transformers must be the sealed ones.
- Assets: what a policy loads by name besides its weights (smolvla's `vlm_model_name`, the
  tokenizer processor's `tokenizer_name`) is a folder inside the checkpoint folder, named relative
  to it (a hub id such as `HuggingFaceTB/SmolVLM2-500M-Video-Instruct` names the copy at that path),
  so its bytes are sealed with the rest and it resolves from any working directory; a name that
  leaves the folder or names nothing there is refused at seal and at start, naming the field.
- Weights: after LeRobot's loader, every tensor of model.safetensors must be in the policy with the
  same shape and values, and every tensor of the policy must come from the file (tied weights
  excepted), or start fails naming the first key that is not: some loaders (pi0, pi05) catch their
  own load errors and return a partly random policy.
- Batching: one `predict_action_chunk` call per batch across sessions, task strings as a list.
  `select_action` is never used: it keeps one action queue for the whole batch. The deployment
  protocol is select_action's all the same: it runs `n_action_steps` of each chunk it infers, so
  that is the checkpoint's actions per chunk (`default_execute_steps`, in the identity record as
  `execute_steps`) unless the settings say otherwise; ACT's temporal ensembling, which queries the
  policy at every step and averages overlapping chunks, is refused. Flow-matching
  policies get per-session noise seeded from (noise_seed, episode id, step), so a session's
  actions do not depend on which sessions shared its batch. X-VLA takes no noise argument (it
  draws from torch's global RNG): it is called once per row, each under a forked RNG seeded the
  same way, so a row is what LeRobot answers for that observation alone under that seed.
- Offline: HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE are set before LeRobot is imported; a policy that
  would fetch something at load fails naming what to copy into the folder.
- Environment side: the worker's images arrive upright (LeRobot's LIBERO env processor flips the
  simulator's images; evalfleet's worker already did), as uint8 HWC; they become float CHW in
  [0, 1] and are resized to the policy's input size here. The LIBERO state layout is LeRobot's
  LIBERO processor's (end-effector position, axis-angle of its quaternion, gripper qpos), built by
  that processor step itself. RoboTwin's 14 joint values are the state as they come (`concat`).
  X-VLA's LIBERO contract (`xvla_libero`) is LeRobot's own X-VLA env processors
  (`make_xvla_libero_pre_post_processors`): a 20-D state from the end-effector position and
  rotation matrix (`robot0_eef_mat`, 9 values row-major, the controller's `ee_ori_mat` that
  LeRobot's LIBERO env reads), only `image` flipped (so both images go back to the simulator's
  orientation first), and each 20-D action turned into LIBERO's 7-D one (6-D rotation to
  axis-angle, gripper to +-1).

Settings (`evalfleet-checkpoint.json`; seal derives the first five where they are left out, see
`derive_settings`, and lists them as derived):

    lerobot_version     "0.4.4": must equal the installed version (derived: the installed one)
    transformers_version "4.57.6": must equal the installed version (derived: the installed one)
    policy_type         must equal config.json's `type` (derived: that type)
    cameras             [{name, height, width, feature}]: what the client sends, and the LeRobot
                        image feature each camera feeds (derived: the benchmark's convention,
                        lerobot_features.derived_cameras)
    state               {feature, layout: "libero"}, {feature, layout: "xvla_libero"} or
                        {feature, layout: "concat", parts: [{name, length}]} (derived as cameras)
    processor_overrides optional {preprocessor: {step: {...}}, postprocessor: {step: {...}}}
    noise_seed          optional int (flow-matching policies and xvla), default 0
    execute_steps       optional: actions executed per chunk (0: the whole chunk); absent,
                        config.json's n_action_steps, as LeRobot's own evaluation runs it
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Before anything imports huggingface_hub, which reads these once at import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np
import numpy.typing as npt

from evalfleet.v1 import policy_pb2
from inference_server.backends import lerobot_features
from inference_server.backends.contract import (
    BackendError,
    DerivedSettings,
    History,
    PolicyObservation,
    RuntimeOptions,
    SealContext,
)
from inference_server.backends.lerobot_features import (
    LIBERO_STATE_PARTS,
    XVLA_ENV_STEP_NAMES,
    XVLA_LIBERO_ACTION_DIM,
    XVLA_LIBERO_STATE_PARTS,
    FeatureError,
)
from inference_server.checkpoint import Checkpoint, CheckpointError

try:
    import huggingface_hub.constants
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.configs.types import FeatureType
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot.processor.env_processor import LiberoProcessorStep
    from lerobot.processor.normalize_processor import UnnormalizerProcessorStep
    from safetensors import safe_open
    from torchvision.transforms.v2 import functional as TF
except ImportError as exc:  # the main virtualenv has no lerobot
    raise ImportError(f"{exc}; the lerobot backend runs from .venv-lerobot (make lerobot-venv)") from exc

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PROCESSOR_FILES = ("policy_preprocessor.json", "policy_postprocessor.json")
# Types whose `predict_action_chunk` reads only the batch it is given (with one observation step),
# so rows of different sessions can share a call; the second set takes a `noise` argument.
STATELESS_TYPES = frozenset({"act", "pi0", "pi05", "smolvla", "xvla"})
NOISE_TYPES = frozenset({"pi0", "pi05", "smolvla"})
# Types that draw their noise from torch's global RNG (lerobot/policies/xvla/modeling_xvla.py:252,
# `predict_action_chunk` ignores `noise`): one call per row, each under its own seeded fork of the RNG.
ROW_TYPES = frozenset({"xvla"})
# Types whose model code needs LeRobot's fork of transformers (openpi's changes to SigLIP, Gemma and
# PaliGemma); lerobot checks for it with `transformers.models.siglip.check` when it builds them.
OPENPI_TYPES = frozenset({"pi0", "pi05"})
OPENPI_TRANSFORMERS = "transformers @ git+https://github.com/huggingface/transformers.git@fix/lerobot_openpi"
# Named assets: config.json fields and preprocessor step fields that name a pretrained folder LeRobot
# loads with transformers' from_pretrained (a hub id or a path).
CONFIG_ASSETS = ("vlm_model_name",)
PREPROCESSOR_ASSETS = (("tokenizer_processor", "tokenizer_name"),)
PREPROCESSOR_FILE = PROCESSOR_FILES[0]


def installed_version() -> str:
    return importlib.metadata.version("lerobot")


def installed_transformers() -> str:
    """The installed transformers version, or "" when it is not installed."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return ""


def openpi_transformers_installed() -> bool:
    """Whether transformers carries LeRobot's openpi changes, asked as LeRobot itself asks
    (lerobot/policies/pi05/modeling_pi05.py:576-584: `transformers.models.siglip.check`)."""
    if importlib.util.find_spec("transformers") is None:
        return False
    try:
        from transformers.models.siglip import check  # type: ignore[attr-defined]  # only in LeRobot's fork
    except ImportError:
        return False
    return bool(check.check_whether_transformers_replace_is_installed_correctly())


def libero_settings(policy_type: str, camera_size: int, **extra: Any) -> dict[str, Any]:
    """The lerobot backend's settings for a LIBERO checkpoint (``lerobot_features.libero_features``)."""
    return {**_versions(policy_type), **lerobot_features.libero_features(policy_type, camera_size), **extra}


def robotwin_settings(
    policy_type: str,
    camera_height: int,
    camera_width: int,
    features: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The lerobot backend's settings for a RoboTwin checkpoint (``lerobot_features.robotwin_features``)."""
    chosen = lerobot_features.robotwin_features(camera_height, camera_width, features)
    return {**_versions(policy_type), **chosen, **extra}


def metaworld_settings(policy_type: str, camera_size: int, **extra: Any) -> dict[str, Any]:
    """The lerobot backend's settings for a Meta-World checkpoint (``lerobot_features.metaworld_features``)."""
    return {**_versions(policy_type), **lerobot_features.metaworld_features(camera_size), **extra}


def _versions(policy_type: str) -> dict[str, Any]:
    return {
        "lerobot_version": installed_version(),
        "transformers_version": installed_transformers(),
        "policy_type": policy_type,
    }


def derive_settings(root: Path, settings: dict[str, Any], context: SealContext) -> DerivedSettings:
    """The settings with what is left out filled in: `policy_type` from config.json's type, the
    installed lerobot and transformers versions, and `cameras` and `state` by the benchmark's
    convention for config.json's image features (`lerobot_features.derived_cameras` and
    `derived_state`). What is given is kept as it is (the backend checks it); CheckpointError
    names the setting to write when it cannot be derived."""
    derived: dict[str, Any] = {}
    raw = _read_config_json(root)
    if "policy_type" not in settings:
        if not isinstance(raw.get("type"), str):
            raise CheckpointError(f"{CONFIG_FILE}: 'type' must name the policy type, got {raw.get('type')!r}")
        derived["policy_type"] = raw["type"]
    if "lerobot_version" not in settings:
        derived["lerobot_version"] = installed_version()
    if "transformers_version" not in settings:
        derived["transformers_version"] = installed_transformers()
    policy_type = str(settings.get("policy_type", derived.get("policy_type")))
    try:
        if "cameras" not in settings:
            derived["cameras"] = lerobot_features.derived_cameras(
                context.benchmark, policy_type, _image_keys(raw, root), context.camera_size
            )
        if "state" not in settings:
            derived["state"] = lerobot_features.derived_state(context.benchmark, policy_type)
    except FeatureError as exc:
        raise CheckpointError(str(exc), path=root / CONFIG_FILE) from None
    return DerivedSettings({**settings, **derived}, tuple(derived))


def _image_keys(raw: dict[str, Any], root: Path) -> list[str]:
    """The image features of config.json's input_features, read as JSON (before LeRobot parses it)."""
    features = raw.get("input_features")
    if not isinstance(features, dict):
        raise CheckpointError(f"{CONFIG_FILE}: 'input_features' must be an object", path=root / CONFIG_FILE)
    visual = FeatureType.VISUAL.value
    return sorted(key for key, f in features.items() if isinstance(f, dict) and f.get("type") == visual)


@dataclass(frozen=True)
class CameraMap:
    spec: policy_pb2.CameraSpec
    feature: str
    size: tuple[int, int]  # the policy's input height and width


@dataclass(frozen=True)
class StateMap:
    feature: str
    layout: str
    parts: tuple[tuple[str, int], ...]
    length: int  # the policy's state length


def _setting(settings: dict[str, Any], key: str, kind: type, root: Path) -> Any:
    value = settings.get(key)
    if not isinstance(value, kind):
        raise CheckpointError(f"{root}: lerobot settings need {key!r} as a {kind.__name__}, got {value!r}", path=root)
    return value


def _read_config_json(root: Path) -> dict[str, Any]:
    path = root / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{CONFIG_FILE} is missing from {root} (LeRobot's policy.save_pretrained writes it)")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not JSON: {exc}", path=path) from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} must hold an object", path=path)
    return raw


def check_files(root: Path) -> None:
    """The weights, both processor files and every statistics file they name must be in the folder."""
    if not (root / WEIGHTS_FILE).is_file():
        raise CheckpointError(f"{WEIGHTS_FILE} is missing from {root}", path=root / WEIGHTS_FILE)
    for name in PROCESSOR_FILES:
        path = root / name
        if not path.is_file():
            raise CheckpointError(
                f"{name} is missing from {root} (the pre/postprocessor's save_pretrained writes it)", path=path
            )
        try:
            steps = json.loads(path.read_text()).get("steps", [])
        except (json.JSONDecodeError, AttributeError) as exc:
            raise CheckpointError(f"{path} is not a LeRobot processor file: {exc}", path=path) from exc
        for step in steps:
            state_file = step.get("state_file") if isinstance(step, dict) else None
            if state_file and not (root / state_file).is_file():
                raise CheckpointError(f"{state_file} (named by {name}) is missing from {root}", path=root / state_file)


def load_config(root: Path, settings: dict[str, Any]) -> Any:
    """config.json through LeRobot's parser, after checking its type against LeRobot and the seal."""
    raw = _read_config_json(root)
    policy_type = raw.get("type")
    known = sorted(PreTrainedConfig.get_known_choices())
    if policy_type not in known:
        raise CheckpointError(
            f"{CONFIG_FILE}: type {policy_type!r} is not a lerobot {installed_version()} policy type "
            f"({', '.join(known)})",
            path=root / CONFIG_FILE,
        )
    sealed_type = _setting(settings, "policy_type", str, root)
    if sealed_type != policy_type:
        raise CheckpointError(
            f"{CONFIG_FILE}: type {policy_type!r} but the seal's policy_type is {sealed_type!r}",
            path=root / CONFIG_FILE,
        )
    if policy_type not in STATELESS_TYPES:
        raise CheckpointError(
            f"{CONFIG_FILE}: policy type {policy_type!r} is not served (served: {', '.join(sorted(STATELESS_TYPES))}); "
            "diffusion, vqbet and tdmpc keep observation queues inside the policy, so sessions cannot share a "
            "batch, and the others are not yet checked for a predict_action_chunk that reads only its batch",
            path=root / CONFIG_FILE,
        )
    if policy_type in OPENPI_TYPES and not openpi_transformers_installed():
        raise CheckpointError(
            f"{CONFIG_FILE}: policy type {policy_type!r} needs LeRobot's fork of transformers (openpi's changes), "
            f"not transformers {installed_transformers() or '(absent)'}: install {OPENPI_TRANSFORMERS!r} into "
            "the lerobot virtualenv, or serve it through openpi's server and the remote backend (docs/backends.md)",
            path=root / CONFIG_FILE,
        )
    if raw.get("load_vlm_weights") is True:
        # lerobot/policies/smolvla/smolvlm_with_expert.py:76-83: true downloads the VLM's own weights
        # (as bfloat16) before model.safetensors replaces them; false builds it from its config alone.
        raise CheckpointError(
            f"{CONFIG_FILE}: load_vlm_weights is true, which fetches the VLM's weights from the hub before "
            "model.safetensors replaces them; set it to false (the trained weights are in model.safetensors) "
            "and seal again",
            path=root / CONFIG_FILE,
        )
    try:
        config = PreTrainedConfig.from_pretrained(root)
    except Exception as exc:  # draccus reports a bad field with its own exception types
        raise CheckpointError(f"{CONFIG_FILE}: LeRobot cannot parse it: {exc}", path=root / CONFIG_FILE) from exc
    n_obs_steps = int(getattr(config, "n_obs_steps", 1))
    if n_obs_steps != 1:
        raise CheckpointError(
            f"{CONFIG_FILE}: n_obs_steps is {n_obs_steps}; this backend serves single-observation policies only",
            path=root / CONFIG_FILE,
        )
    ensemble = getattr(config, "temporal_ensemble_coeff", None)
    if ensemble is not None:
        # lerobot/policies/act/modeling_act.py:109-112: select_action then infers a chunk at every
        # step and executes the exponentially weighted average of every chunk that covers it.
        raise CheckpointError(
            f"{CONFIG_FILE}: temporal_ensemble_coeff is {ensemble}: LeRobot's select_action then infers a chunk "
            "at every step and executes the weighted average of the overlapping chunks, which this backend, "
            "answering one chunk per observation, does not do; set it to null to serve the chunks as they are",
            path=root / CONFIG_FILE,
        )
    return config


def asset_folder(root: Path, name: Any, where: str) -> Path:
    """The folder inside the checkpoint that an asset name (a config.json or processor field) names,
    relative to the checkpoint folder; CheckpointError naming the field when it leaves the folder or
    names no folder there."""
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{root}: {where} must name a folder, got {name!r}", path=root)
    inside = root.resolve()
    target = (root / name).resolve()
    if target != inside and inside not in target.parents:
        raise CheckpointError(
            f"{root}: {where} {name!r} is outside the checkpoint folder, so it would be read but not sealed; "
            "copy it into the folder and name it relative to the folder",
            path=root,
        )
    if not target.is_dir():
        raise CheckpointError(
            f"{root}: {where} {name!r} names no folder inside the checkpoint folder; copy the files it names "
            f"(its config, tokenizer and processor files) to {root / name} and seal again",
            path=root / name,
        )
    return target


def asset_folders(root: Path, settings: dict[str, Any]) -> dict[str, Path]:
    """Every named asset the policy loads -> its folder inside the checkpoint: config.json's
    CONFIG_ASSETS, and PREPROCESSOR_ASSETS as the sealed processor_overrides or else
    policy_preprocessor.json set them (keys: "config.<field>", "preprocessor.<step>.<field>")."""
    raw = _read_config_json(root)
    found = {
        f"config.{field}": asset_folder(root, raw[field], f"{CONFIG_FILE} {field}")
        for field in CONFIG_ASSETS
        if field in raw
    }
    steps = json.loads((root / PREPROCESSOR_FILE).read_text()).get("steps", [])
    every = settings.get("processor_overrides", {})
    overrides = every.get("preprocessor", {}) if isinstance(every, dict) else {}
    for step_name, field in PREPROCESSOR_ASSETS:
        saved = [s.get("config", {}) for s in steps if isinstance(s, dict) and s.get("registry_name") == step_name]
        override = overrides.get(step_name, {}) if isinstance(overrides, dict) else {}
        if isinstance(override, dict) and field in override:
            where, name = f"settings.processor_overrides.preprocessor.{step_name}.{field}", override[field]
        elif saved and isinstance(saved[0], dict) and field in saved[0]:
            where, name = f"{PREPROCESSOR_FILE} {step_name}.{field}", saved[0][field]
        else:
            continue
        found[f"preprocessor.{step_name}.{field}"] = asset_folder(root, name, where)
    return found


def check_loaded_weights(policy: Any, weights: Path, policy_type: str) -> None:
    """Every tensor of the weights file is in the policy with its shape and values, and every tensor
    of the policy is in the file or tied to one that is; CheckpointError naming the first that is not."""
    state = policy.state_dict()
    with safe_open(str(weights), framework="pt", device="cpu") as handle:
        names = sorted(handle.keys())
        for name in names:
            key = name if name in state or policy_type not in OPENPI_TYPES else f"model.{name}"
            if key not in state:
                raise CheckpointError(
                    f"{WEIGHTS_FILE}: tensor {name!r} is not in the {policy_type} policy, so LeRobot's loader "
                    "left it unused (a renamed or stray key)",
                    path=weights,
                )
            stored, loaded = handle.get_tensor(name), state[key].detach().to("cpu")
            if tuple(stored.shape) != tuple(loaded.shape):
                raise CheckpointError(
                    f"{WEIGHTS_FILE}: tensor {name!r} is {tuple(stored.shape)} but the {policy_type} policy's "
                    f"is {tuple(loaded.shape)}",
                    path=weights,
                )
            if not torch.equal(stored.to(loaded.dtype), loaded):
                raise CheckpointError(
                    f"{WEIGHTS_FILE}: tensor {name!r} differs from the {policy_type} policy's after loading "
                    "(LeRobot's loader did not load it)",
                    path=weights,
                )
    from_file = {name if name in state or policy_type not in OPENPI_TYPES else f"model.{name}" for name in names}
    filled = {state[key].data_ptr() for key in from_file if state[key].numel()}
    for key in sorted(set(state) - from_file):
        if not state[key].numel() or state[key].data_ptr() not in filled:  # a tied weight shares storage
            raise CheckpointError(
                f"{WEIGHTS_FILE}: the {policy_type} policy's tensor {key!r} is not in the file, so it kept its "
                "random initial values",
                path=weights,
            )


def _features(config: Any, kind: Any) -> dict[str, tuple[int, ...]]:
    return {key: tuple(f.shape) for key, f in config.input_features.items() if f.type == kind}


def camera_maps(config: Any, settings: dict[str, Any], root: Path) -> list[CameraMap]:
    """Every camera setting feeds one image feature of the policy, and every image feature is fed."""
    images = _features(config, FeatureType.VISUAL)
    maps: list[CameraMap] = []
    for index, camera in enumerate(_setting(settings, "cameras", list, root)):
        where = f"settings.cameras[{index}]"
        try:
            feature = str(camera["feature"])
            spec = policy_pb2.CameraSpec(
                name=camera["name"], height=camera["height"], width=camera["width"], channels=3, dtype="uint8"
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{root}: {where} needs name, height, width, feature: {exc!r}", path=root) from exc
        if feature not in images:
            raise CheckpointError(
                f"{root}: {where}.feature {feature!r} is not an image feature of the policy ({', '.join(images)})",
                path=root,
            )
        channels, height, width = images[feature]
        if channels != 3:
            raise CheckpointError(f"{root}: {feature} takes {channels} channels, evalfleet cameras send 3", path=root)
        maps.append(CameraMap(spec=spec, feature=feature, size=(height, width)))
    unfed = sorted(set(images) - {m.feature for m in maps})
    if unfed:
        raise CheckpointError(f"{root}: settings.cameras feed no camera to {', '.join(unfed)}", path=root)
    return maps


def state_map(config: Any, settings: dict[str, Any], root: Path) -> StateMap:
    """The one state feature of the policy, built from the named state vectors the client sends."""
    raw = _setting(settings, "state", dict, root)
    states = _features(config, FeatureType.STATE)
    fed = (FeatureType.STATE, FeatureType.VISUAL)
    others = sorted(key for key, f in config.input_features.items() if f.type not in fed)
    if len(states) != 1 or others:
        raise CheckpointError(
            f"{CONFIG_FILE}: input_features must be images and one state feature, got {sorted(config.input_features)}",
            path=root / CONFIG_FILE,
        )
    feature, layout = raw.get("feature"), raw.get("layout")
    if feature not in states:
        raise CheckpointError(
            f"{root}: settings.state.feature {feature!r} is not a state feature of the policy ({', '.join(states)})",
            path=root,
        )
    if layout == "libero":
        parts: tuple[tuple[str, int], ...] = LIBERO_STATE_PARTS
        built = 8  # position 3, axis-angle 3, gripper 2
    elif layout == "xvla_libero":
        if config.type != "xvla":
            raise CheckpointError(
                f"{root}: settings.state.layout 'xvla_libero' is X-VLA's, not {config.type}'s", path=root
            )
        action_dim = int(config.output_features["action"].shape[0])
        if action_dim < 10:
            raise CheckpointError(
                f"{CONFIG_FILE}: the xvla_libero layout turns 10 or more action values (position, 6-D rotation, "
                f"gripper) into LIBERO's 7, but the action has {action_dim}",
                path=root / CONFIG_FILE,
            )
        steps = json.loads((root / PREPROCESSOR_FILE).read_text()).get("steps", [])
        names = [str(s.get("registry_name")) for s in steps if isinstance(s, dict)]
        doubled = [name for name in names if name in XVLA_ENV_STEP_NAMES]
        if doubled:
            # lerobot issue #2955: the env preprocessor normalizes the images and adds the domain id
            # too, so LeRobot's own LIBERO evaluation applies these twice (0.4.4 stops at the second).
            raise CheckpointError(
                f"{PREPROCESSOR_FILE}: the xvla_libero layout runs LeRobot's X-VLA LIBERO env preprocessor, which "
                f"already applies {', '.join(doubled)}; remove them from the policy preprocessor (as "
                "lerobot/xvla-libero's has them not) and seal again",
                path=root / PREPROCESSOR_FILE,
            )
        parts = XVLA_LIBERO_STATE_PARTS
        built = 20  # LeRobot's X-VLA LiberoProcessorStep: position 3, 6-D rotation, 1 zero, then 10 zeros
    elif layout == "concat":
        try:
            parts = tuple((str(p["name"]), int(p["length"])) for p in raw["parts"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{root}: settings.state.parts needs [{{name, length}}]: {exc!r}", path=root) from exc
        built = sum(length for _, length in parts)
    else:
        raise CheckpointError(
            f"{root}: settings.state.layout must be 'libero', 'xvla_libero' or 'concat', got {layout!r}", path=root
        )
    (length,) = states[feature]
    if built != length:
        raise CheckpointError(f"{root}: settings.state builds {built} values, but {feature} takes {length}", path=root)
    return StateMap(feature=feature, layout=layout, parts=parts, length=length)


def _processor_overrides(settings: dict[str, Any], device: str, root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sealed overrides ({step registry name: {config key: value}} per pipeline), plus the
    device the server runs on (a runtime option, not identity)."""
    overrides = settings.get("processor_overrides", {})
    pipelines = ("preprocessor", "postprocessor")
    if not isinstance(overrides, dict) or set(overrides) - set(pipelines):
        raise CheckpointError(f"{root}: settings.processor_overrides may hold only {pipelines}", path=root)
    chosen = []
    for pipeline in pipelines:
        steps = overrides.get(pipeline, {})
        if not isinstance(steps, dict) or not all(isinstance(v, dict) for v in steps.values()):
            raise CheckpointError(
                f"{root}: settings.processor_overrides.{pipeline} must map step names to objects", path=root
            )
        chosen.append({**steps, "device_processor": {**steps.get("device_processor", {}), "device": device}})
    return chosen[0], chosen[1]


def _policy_class(policy_type: str, root: Path) -> Any:
    """LeRobot's policy class for the type, imported now (seal and start), so a module the
    virtualenv lacks is named before any weights are read."""
    try:
        return get_policy_class(policy_type)
    except ImportError as exc:
        raise CheckpointError(
            f"{CONFIG_FILE}: LeRobot's {policy_type} policy needs the Python module {exc.name or exc}, which this "
            f"virtualenv lacks ({exc}); add it to requirements/lerobot.txt and rebuild .venv-lerobot "
            "(make lerobot-venv)",
            path=root / CONFIG_FILE,
        ) from exc


def trained_action_range(postprocessor: Any, action_dim: int) -> policy_pb2.ActionRange | None:
    """The `action` min and max of the postprocessor's unnormalizer statistics (what the dataset's
    actions spanned, as LeRobot's compute_stats writes them), for the broken-setup canary; None
    when the statistics hold no min and max for `action_dim` values."""
    for step in getattr(postprocessor, "steps", ()):
        stats = step.stats if isinstance(step, UnnormalizerProcessorStep) else None
        action = (stats or {}).get("action") or {}
        if "min" in action and "max" in action:
            low = np.asarray(action["min"], dtype=np.float64).ravel()
            high = np.asarray(action["max"], dtype=np.float64).ravel()
            if low.size == high.size == action_dim:
                source = "policy_postprocessor unnormalizer: action min/max"
                return policy_pb2.ActionRange(low=low.tolist(), high=high.tolist(), source=source)
    return None


def noise_seed(base: int, episode_id: str, step: int) -> int:
    """A per-session, per-step seed: the same whatever else is in the batch."""
    digest = hashlib.sha256(f"{base}:{episode_id}:{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


class LeRobotBackend:
    """A LeRobot policy behind evalfleet's contract; the weights are read only in `load`."""

    def __init__(self, checkpoint: Checkpoint, options: RuntimeOptions) -> None:
        root, settings = checkpoint.root, checkpoint.settings
        sealed_version = _setting(settings, "lerobot_version", str, root)
        if sealed_version != installed_version():
            raise CheckpointError(
                f"{root}: sealed for lerobot {sealed_version}, but lerobot {installed_version()} is installed",
                path=root,
            )
        sealed_transformers = settings.get("transformers_version")
        if not isinstance(sealed_transformers, str):
            raise CheckpointError(
                f"{root}: lerobot settings need 'transformers_version' as a str (the installed one is "
                f"{installed_transformers() or 'absent'}), got {sealed_transformers!r}",
                path=root,
            )
        if sealed_transformers != installed_transformers():
            raise CheckpointError(
                f"{root}: sealed for transformers {sealed_transformers}, but transformers "
                f"{installed_transformers() or '(none)'} is installed",
                path=root,
            )
        if not huggingface_hub.constants.HF_HUB_OFFLINE:
            raise BackendError("huggingface_hub was imported before the lerobot backend could set HF_HUB_OFFLINE")
        if options.dtype != "float32" or options.compile or options.autocast:
            raise BackendError("the lerobot backend runs float32 without --compile or --autocast")
        check_files(root)
        self.root = root
        self.options = options
        self.config = load_config(root, settings)
        self.config.device = options.device
        self.assets = asset_folders(root, settings)
        vlm = self.assets.get("config.vlm_model_name")
        if vlm is not None:  # LeRobot would read the name relative to the working directory
            self.config.vlm_model_name = str(vlm)
        if getattr(self.config, "pretrained_backbone_weights", None) is not None:
            # ACT's default names torchvision's ImageNet weights, which building the policy would
            # download, only for model.safetensors (loaded strictly, backbone included) to replace.
            self.config.pretrained_backbone_weights = None
        self.camera_maps = camera_maps(self.config, settings, root)
        self.state_map = state_map(self.config, settings, root)
        self.cameras = [m.spec for m in self.camera_maps]
        self.state = [policy_pb2.StateSpec(name=name, length=length) for name, length in self.state_map.parts]
        self.action_dim = int(self.config.output_features["action"].shape[0])
        self.env_processors: tuple[Any, Any] | None = None
        if self.state_map.layout == "xvla_libero":
            from lerobot.policies.xvla.processor_xvla import make_xvla_libero_pre_post_processors

            self.env_processors = make_xvla_libero_pre_post_processors()
            self.action_dim = XVLA_LIBERO_ACTION_DIM
        self.chunk_length = len(self.config.action_delta_indices)
        # What LeRobot's own evaluation executes of each chunk (select_action's queue,
        # lerobot/policies/act/modeling_act.py:114-121): the checkpoint's execute_steps unless
        # its settings say otherwise (inference_server.identity reads this).
        self.default_execute_steps = int(getattr(self.config, "n_action_steps", self.chunk_length))
        self.precision = policy_pb2.Precision(dtype="float32", attn_impl="lerobot", tf32=options.tf32)
        self.policy_type = str(self.config.type)
        self.noise_seed = int(settings.get("noise_seed", 0))
        self.overrides = _processor_overrides(settings, options.device, root)
        for key, folder in self.assets.items():
            pipeline, _, rest = key.partition(".")
            if pipeline == "preprocessor":
                step_name, _, field = rest.partition(".")
                pre = self.overrides[0]
                pre[step_name] = {**pre.get(step_name, {}), field: str(folder)}
        self.policy_class = _policy_class(self.policy_type, root)
        self.policy: Any = None
        self.preprocessor: Any = None
        self.postprocessor: Any = None
        self.libero_state = LiberoProcessorStep()
        # Set by `load` from the statistics (GetIdentityResponse.action_range).
        self.action_range: policy_pb2.ActionRange | None = None

    def load(self) -> None:
        """LeRobot's loaders, offline; then one batch, checked against the declared shape."""
        if self.options.tf32:
            torch.backends.cuda.matmul.allow_tf32 = True
        pre, post = self.overrides
        try:
            try:
                # strict=False: check_loaded_weights names the first missing or stray tensor itself,
                # also for loaders that catch their own errors (pi0, pi05).
                self.policy = self.policy_class.from_pretrained(self.root, config=self.config, strict=False)
            except RuntimeError as exc:  # torch's load_state_dict: misshapen tensors
                raise CheckpointError(
                    f"{WEIGHTS_FILE} does not fit the {self.policy_type} policy of {CONFIG_FILE}: {exc}",
                    path=self.root / WEIGHTS_FILE,
                ) from exc
            check_loaded_weights(self.policy, self.root / WEIGHTS_FILE, self.policy_type)
            self.preprocessor, self.postprocessor = make_pre_post_processors(
                self.config, pretrained_path=str(self.root), preprocessor_overrides=pre, postprocessor_overrides=post
            )
        except ImportError as exc:  # a module the policy or a processor imports when it is built
            raise CheckpointError(
                f"{self.root}: loading the {self.policy_type} policy needs the Python module "
                f"{exc.name or exc}, which this virtualenv lacks ({exc}); add it to requirements/lerobot.txt "
                "and rebuild .venv-lerobot (make lerobot-venv)",
                path=self.root,
            ) from exc
        except (OSError, ValueError, AttributeError, KeyError) as exc:
            # What transformers and huggingface_hub raise for an asset they cannot read: OSError (a file
            # absent offline), ValueError (a tokenizer it cannot build), AttributeError or KeyError (a
            # tokenizer class built without its vocabulary file, whose name is then None).
            folders = ", ".join(
                f"{key} = {folder.relative_to(self.root.resolve())}" for key, folder in self.assets.items()
            )
            raise CheckpointError(
                f"{self.root}: loading the {self.policy_type} policy could not read an asset "
                f"({type(exc).__name__}: {exc}); provide the file it names inside the checkpoint folder "
                f"({folders or 'no named asset folders'}) and seal again",
                path=self.root,
            ) from exc
        # An env postprocessor (X-VLA's) turns the unnormalized actions into others: no range for those.
        if self.env_processors is None:
            self.action_range = trained_action_range(self.postprocessor, self.action_dim)
        warm = self.act([self._blank_observation()], [History(session_id="warmup", episode=policy_pb2.EpisodeMeta())])
        if warm.shape != (1, self.chunk_length, self.action_dim):
            raise BackendError(
                f"{self.policy_type} returned {warm.shape}, expected (1, {self.chunk_length}, {self.action_dim})"
            )

    def _blank_observation(self) -> PolicyObservation:
        images: dict[str, npt.NDArray[np.generic]] = {
            c.name: np.zeros((c.height, c.width, 3), dtype=np.uint8) for c in self.cameras
        }
        state = {s.name: np.zeros(s.length) for s in self.state}
        if self.state_map.layout == "libero":
            state["robot0_eef_quat"][3] = 1.0
        if self.state_map.layout == "xvla_libero":
            state["robot0_eef_mat"] = np.eye(3).ravel()
        return PolicyObservation(step=0, images=images, state=state)

    def _images(self, observations: Sequence[PolicyObservation], camera: CameraMap) -> torch.Tensor:
        """uint8 HWC, upright -> float CHW in [0, 1] at the policy's input size.

        Made contiguous as LeRobot's `preprocess_observation` makes it: a permuted view is
        channels-last in memory, for which torch's CPU convolutions take another kernel, and the
        chunk then differs from lerobot-eval's by a few float32 ulps, enough to move a LIBERO
        trajectory (tests/inference_server/test_lerobot_eval_closed_loop.py)."""
        stacked = torch.from_numpy(np.stack([o.images[camera.spec.name] for o in observations]))
        images = stacked.permute(0, 3, 1, 2).contiguous().to(torch.float32) / 255.0
        if tuple(images.shape[-2:]) != camera.size:
            images = TF.resize(images, list(camera.size), antialias=True)
        return images

    def _state(self, observations: Sequence[PolicyObservation]) -> torch.Tensor:
        def column(name: str) -> torch.Tensor:
            return torch.from_numpy(np.stack([o.state[name] for o in observations]))

        if self.state_map.layout == "libero":
            robot_state = {
                "eef": {"pos": column("robot0_eef_pos"), "quat": column("robot0_eef_quat")},
                "gripper": {"qpos": column("robot0_gripper_qpos")},
            }
            built = self.libero_state.observation({"observation.robot_state": robot_state})
            return torch.as_tensor(built["observation.state"], dtype=torch.float32)
        return torch.cat([column(name) for name, _ in self.state_map.parts], dim=-1).to(torch.float32)

    def _noise(self, observations: Sequence[PolicyObservation], histories: Sequence[History]) -> torch.Tensor:
        shape = (self.chunk_length, int(self.config.max_action_dim))
        rows = []
        for observation, history in zip(observations, histories, strict=True):
            generator = torch.Generator().manual_seed(
                noise_seed(self.noise_seed, history.episode.episode_id or history.session_id, observation.step)
            )
            rows.append(torch.randn(shape, generator=generator))
        return torch.stack(rows).to(self.options.device)

    def _env_batch(self, observations: Sequence[PolicyObservation]) -> dict[str, Any]:
        """What LeRobot's LIBERO env and `preprocess_observation` hand X-VLA's env preprocessor:
        float CHW images in the simulator's orientation (upside down; its step flips `image` only)
        and the end effector's position and rotation matrix."""
        batch: dict[str, Any] = {
            m.feature: torch.flip(self._images(observations, m), dims=[2, 3]) for m in self.camera_maps
        }
        pos = torch.from_numpy(np.stack([o.state["robot0_eef_pos"] for o in observations]))
        mat = torch.from_numpy(np.stack([o.state["robot0_eef_mat"].reshape(3, 3) for o in observations]))
        batch["observation.robot_state"] = {"eef": {"pos": pos, "mat": mat}}
        return batch

    def _chunk(self, observations: Sequence[PolicyObservation], histories: Sequence[History]) -> torch.Tensor:
        if self.env_processors is not None:
            batch = self._env_batch(observations)
        else:
            batch = {m.feature: self._images(observations, m) for m in self.camera_maps}
            batch[self.state_map.feature] = self._state(observations)
        batch["task"] = [h.episode.instruction for h in histories]
        if self.env_processors is not None:
            batch = self.env_processors[0](batch)
        processed = self.preprocessor(batch)
        if self.policy_type in ROW_TYPES:
            (observation,), (history,) = observations, histories
            seed = noise_seed(self.noise_seed, history.episode.episode_id or history.session_id, observation.step)
            devices: list[int] | None = [] if self.options.device == "cpu" else None  # None: every CUDA RNG too
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                raw = self.policy.predict_action_chunk(processed)
        else:
            kwargs = {"noise": self._noise(observations, histories)} if self.policy_type in NOISE_TYPES else {}
            raw = self.policy.predict_action_chunk(processed, **kwargs)
        actions: torch.Tensor = self.postprocessor(raw)
        if self.env_processors is not None:  # LeRobot's env postprocessor takes one [B, D] action per step
            rows, steps, width = actions.shape
            flat = self.env_processors[1]({"action": actions.reshape(rows * steps, width)})["action"]
            actions = flat.reshape(rows, steps, -1)
        return actions

    def act(self, observations: Sequence[PolicyObservation], histories: Sequence[History]) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            if self.policy_type in ROW_TYPES:
                pairs = zip(observations, histories, strict=True)
                actions = torch.cat([self._chunk([o], [h]) for o, h in pairs])
            else:
                actions = self._chunk(observations, histories)
        return np.ascontiguousarray(actions.to("cpu", torch.float32).numpy())


def load(checkpoint: Checkpoint, options: RuntimeOptions) -> LeRobotBackend:
    return LeRobotBackend(checkpoint, options)
