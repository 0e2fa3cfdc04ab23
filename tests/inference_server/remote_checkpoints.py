"""`remote` checkpoints that point at the tests' policy servers, one dialect each: the LIBERO
contract every one declares (two cameras, the end effector's pose and the gripper, 7-D actions),
with the request mapping that dialect's own LIBERO client sends. No dialect's library is imported
here, so any test can build any dialect's settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from inference_server.checkpoint import seal

ACTION_DIM = 7
CAMERAS = ("agentview", "robot0_eye_in_hand")
# The 8-D state LIBERO's clients send: the end effector's position, its rotation as an axis-angle,
# the gripper's two joints.
LIBERO_STATE: list[Any] = ["robot0_eef_pos", {"name": "robot0_eef_quat", "as": "axisangle"}, "robot0_gripper_qpos"]


def libero_settings(
    url: str,
    dialect: str,
    request: list[dict[str, Any]],
    *,
    connections: int,
    camera: tuple[int, int] = (48, 64),
    chunk_length: int = 5,
) -> dict[str, Any]:
    """The settings a LIBERO checkpoint served by ``dialect`` at ``url`` declares, ``request``
    mapping the observation to the remote's keys."""
    return {
        "url": url,
        "dialect": dialect,
        "connections": connections,
        "reply_timeout_s": 20,
        "load_timeout_s": 30,
        "cameras": [{"name": n, "height": camera[0], "width": camera[1]} for n in CAMERAS],
        "state": [
            {"name": "robot0_eef_pos", "length": 3},
            {"name": "robot0_eef_quat", "length": 4},
            {"name": "robot0_gripper_qpos", "length": 2},
        ],
        "action_dim": ACTION_DIM,
        "chunk_length": chunk_length,
        "request": request,
    }


def openpi_settings(
    url: str, camera: tuple[int, int] = (48, 64), chunk_length: int = 5, **overrides: Any
) -> dict[str, Any]:
    """openpi's LIBERO mapping: two cameras resized with padding to 224, the 8-D state, the
    instruction as `prompt`."""
    request = [
        {"key": "observation/image", "camera": "agentview", "resize_with_pad": [224, 224]},
        {"key": "observation/wrist_image", "camera": "robot0_eye_in_hand", "resize_with_pad": [224, 224]},
        {"key": "observation/state", "state": LIBERO_STATE},
        {"key": "prompt", "instruction": True},
    ]
    settings = libero_settings(url, "openpi", request, connections=2, camera=camera, chunk_length=chunk_length)
    return {**settings, **overrides}


def starvla_settings(url: str, **overrides: Any) -> dict[str, Any]:
    """StarVLA's LIBERO mapping (its `eval_libero.py`): both cameras as the example's `image` list,
    the instruction as `lang`; here also the 8-D state as StarVLA's models take it, (1, 8) per
    example. The key is the LIBERO checkpoints' one, `franka`."""
    request = [
        {"key": "image", "cameras": list(CAMERAS), "resize_with_pad": [224, 224]},
        {"key": "lang", "instruction": True},
        {"key": "state", "state": LIBERO_STATE, "shape": [1, -1]},
    ]
    settings = libero_settings(url, "starvla", request, connections=2)
    settings |= {
        "examples_per_request": 8,
        "unnorm_key": "franka",
        # The double's chunk is REMOTE_CHUNK (10) rows: the tests check that the first chunk_length are the chunk.
        "chunk_length_differs": "the tests keep the first chunk_length rows of the double's longer chunk",
        "predict_kwargs": {"do_sample": False, "use_ddim": True, "num_ddim_steps": 10},
    }
    return {**settings, **overrides}


def vlaeval_settings(
    url: str, camera: tuple[int, int] = (48, 64), chunk_length: int = 5, **overrides: Any
) -> dict[str, Any]:
    """vla-eval's LIBERO observation: `images` by camera, the 8-D state as float32 `states`, the
    instruction as `task_description`."""
    request = [
        {"key": ["images", "agentview"], "camera": "agentview"},
        {"key": ["images", "wrist"], "camera": "robot0_eye_in_hand"},
        {"key": "states", "state": LIBERO_STATE, "dtype": "float32"},
        {"key": "task_description", "instruction": True},
    ]
    settings = libero_settings(url, "vla-eval", request, connections=4, camera=camera, chunk_length=chunk_length)
    return {**settings, **overrides}


# Each dialect's settings, and the epoch (checkpoint folder) its tests serve.
SETTINGS: dict[str, Callable[..., dict[str, Any]]] = {
    "openpi": openpi_settings,
    "starvla": starvla_settings,
    "vla-eval": vlaeval_settings,
}
EPOCHS = {"openpi": "pi05", "starvla": "pi05", "vla-eval": "vlaeval"}


def make_remote_checkpoint(
    root: Path, url: str, epoch: str | None = None, dialect: str = "openpi", **overrides: Any
) -> Path:
    """Seals ``root``/``epoch`` (by default the dialect's, `EPOCHS`) as a `remote` checkpoint of
    ``dialect`` at ``url``, ``overrides`` replacing settings (None: leaving one out); returns ``root``."""
    folder = root / (epoch or EPOCHS[dialect])
    folder.mkdir(parents=True, exist_ok=True)
    settings = {name: value for name, value in SETTINGS[dialect](url, **overrides).items() if value is not None}
    seal(folder, "remote", settings)
    return root
