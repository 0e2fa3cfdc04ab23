"""Which benchmark observation feeds which LeRobot feature: the lerobot backend's per-benchmark maps.

A LeRobot checkpoint names its inputs by feature (`observation.images.image`, `observation.state`);
a benchmark's worker sends cameras and state entries by the benchmark's own names. The backend's
settings say which feeds which (`cameras` and `state`, docs/backends.md), and for the benchmarks
evalfleet runs the usual maps are here, in one place: LIBERO's as LeRobot's LIBERO processor and
openpi feed it (with X-VLA's own 20-D state layout, `xvla_libero`), RoboTwin's as ALOHA-style
datasets name its three cameras and 14 joint values, and Meta-World's as LeRobot's Meta-World env
names its one camera and hand state. Pure data and functions of it: no LeRobot import.

`derived_cameras` and `derived_state` are what `checkpoint seal` fills in when the settings leave `cameras` or `state`
out: the benchmark's convention applied to the image and state features of the checkpoint's
config.json (RoboTwin: its three image keys, when they name the head, left and right cameras
recognisably).
"""

from __future__ import annotations

from typing import Any

LIBERO_STATE_PARTS = (("robot0_eef_pos", 3), ("robot0_eef_quat", 4), ("robot0_gripper_qpos", 2))
# X-VLA's LIBERO state: LeRobot's LIBERO env gives the end effector's position and rotation matrix
# (lerobot/envs/libero.py:252-266), which its X-VLA LIBERO step turns into a 20-D state.
XVLA_LIBERO_STATE_PARTS = (("robot0_eef_pos", 3), ("robot0_eef_mat", 9))
# Steps of LeRobot's X-VLA LIBERO env preprocessor that make_xvla_pre_post_processors also puts in the
# policy preprocessor (registry names).
XVLA_ENV_STEP_NAMES = frozenset({"xvla_image_to_float", "xvla_imagenet_normalize", "xvla_add_domain_id"})
XVLA_LIBERO_ACTION_DIM = 7  # XVLARotation6DToAxisAngleProcessorStep: position 3, axis-angle 3, gripper 1
LIBERO_CAMERAS = (("agentview", "observation.images.image"), ("robot0_eye_in_hand", "observation.images.image2"))
# RoboTwin's adapter sends these cameras and its 14 joint values (left arm 6 + gripper, right arm 6 +
# gripper) as `joint_action`; the feature names are ALOHA-style datasets' (LeRobot fixes none).
ROBOTWIN_CAMERAS = {
    "head_camera": "observation.images.cam_high",
    "left_camera": "observation.images.cam_left_wrist",
    "right_camera": "observation.images.cam_right_wrist",
}
ROBOTWIN_STATE = ("joint_action", 14)
# Meta-World's adapter sends its one camera and the hand position and gripper opening as LeRobot's
# Meta-World env names them; LeRobot's `preprocess_observation` feeds its `pixels` to
# `observation.image` and `agent_pos` to `observation.state`.
METAWORLD_CAMERA = ("corner2", "observation.image")
METAWORLD_STATE = ("agent_pos", 4)
# Words in an image feature's name that say which RoboTwin camera feeds it (ALOHA's cam_high is the
# head camera).
ROBOTWIN_CAMERA_WORDS = {"head_camera": ("head", "high", "top"), "left_camera": ("left",), "right_camera": ("right",)}
IMAGE_PREFIX = "observation.images."
CameraSize = int | tuple[int, int]


class FeatureError(ValueError):
    """A setting the benchmark's convention cannot derive for this checkpoint; `key` is the setting
    to write by hand (``settings.cameras``)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def libero_features(policy_type: str, camera_size: CameraSize, image_keys: Any = None) -> dict[str, Any]:
    """The LIBERO feature map of LeRobot's LIBERO processor and openpi: agentview ->
    `observation.images.image`, wrist -> `observation.images.image2`, 8-D `observation.state`;
    for xvla, the state is LeRobot's X-VLA LIBERO layout (`xvla_libero`, 20-D). `camera_size` is
    PX or (height, width); with `image_keys` (the policy's image features), only the cameras that
    feed one of them (a policy without a wrist image is sent none)."""
    height, width = (camera_size, camera_size) if isinstance(camera_size, int) else camera_size
    return {
        "cameras": [
            {"name": name, "height": height, "width": width, "feature": feature}
            for name, feature in LIBERO_CAMERAS
            if image_keys is None or feature in image_keys
        ],
        "state": {"feature": "observation.state", "layout": "xvla_libero" if policy_type == "xvla" else "libero"},
    }


def robotwin_features(camera_height: int, camera_width: int, features: dict[str, str] | None = None) -> dict[str, Any]:
    """RoboTwin's feature map: the head, left and right cameras each feed an image feature, and the
    14-D `joint_action` is `observation.state` as it is (`concat`).

    LeRobot fixes no feature names for RoboTwin: a checkpoint's come from the dataset it was trained
    on, and are the image keys of its config.json `input_features`. The defaults are ALOHA-style
    datasets' (`observation.images.cam_high`, `.cam_left_wrist`, `.cam_right_wrist`); `features`
    maps camera names to other keys."""
    unknown = sorted(set(features or {}) - set(ROBOTWIN_CAMERAS))
    if unknown:
        raise ValueError(f"features names {', '.join(unknown)}; RoboTwin's cameras are {', '.join(ROBOTWIN_CAMERAS)}")
    chosen = {**ROBOTWIN_CAMERAS, **(features or {})}
    return {
        "cameras": [
            {"name": name, "height": camera_height, "width": camera_width, "feature": chosen[name]}
            for name in ROBOTWIN_CAMERAS
        ],
        "state": {
            "feature": "observation.state",
            "layout": "concat",
            "parts": [{"name": ROBOTWIN_STATE[0], "length": ROBOTWIN_STATE[1]}],
        },
    }


def metaworld_features(camera_size: int) -> dict[str, Any]:
    """Meta-World's feature map, LeRobot's Meta-World env's: corner2 -> `observation.image`, the
    4-D `agent_pos` as `observation.state` as it is (`concat`)."""
    name, feature = METAWORLD_CAMERA
    return {
        "cameras": [{"name": name, "height": camera_size, "width": camera_size, "feature": feature}],
        "state": {
            "feature": "observation.state",
            "layout": "concat",
            "parts": [{"name": METAWORLD_STATE[0], "length": METAWORLD_STATE[1]}],
        },
    }


def robotwin_feature_map(image_keys: list[str]) -> dict[str, str]:
    """RoboTwin camera -> the image feature whose name says it is that camera's (`cam_high` or
    `head` for the head camera, `left` and `right` for the wrists); FeatureError naming
    ``settings.cameras`` when a key names no camera or several, or a camera is named by none or
    several keys."""
    found: dict[str, str] = {}
    for key in image_keys:
        words = key.removeprefix(IMAGE_PREFIX).lower()
        cameras = [camera for camera, names in ROBOTWIN_CAMERA_WORDS.items() if any(n in words for n in names)]
        if len(cameras) != 1:
            raise FeatureError(
                "settings.cameras",
                f"config.json's image feature {key!r} names {'several' if cameras else 'none'} of RoboTwin's "
                f"cameras ({', '.join(ROBOTWIN_CAMERAS)}) recognisably; write settings.cameras with the feature "
                "each camera feeds",
            )
        if cameras[0] in found:
            raise FeatureError(
                "settings.cameras",
                f"config.json's image features {found[cameras[0]]!r} and {key!r} both name RoboTwin's "
                f"{cameras[0]}; write settings.cameras with the feature each camera feeds",
            )
        found[cameras[0]] = key
    missing = [camera for camera in ROBOTWIN_CAMERAS if camera not in found]
    if missing:
        raise FeatureError(
            "settings.cameras",
            f"no image feature of config.json ({', '.join(image_keys) or 'none'}) names RoboTwin's "
            f"{', '.join(missing)}; write settings.cameras with the feature each camera feeds",
        )
    return found


def _convention(benchmark: str | None, key: str) -> str:
    """The benchmark whose convention derives `key`; FeatureError naming the setting when there is none."""
    if benchmark is None:
        raise FeatureError(
            key,
            "not given, and no benchmark to derive it from: seal with --benchmark NAME (libero, metaworld, robotwin), "
            f"or write {key.removeprefix('settings.')}",
        )
    if benchmark not in ("libero", "metaworld", "robotwin"):
        raise FeatureError(
            key,
            f"LeRobot has no feature convention for benchmark {benchmark!r} (only libero, metaworld and robotwin); "
            f"write {key.removeprefix('settings.')}",
        )
    return benchmark


def derived_state(benchmark: str | None, policy_type: str) -> dict[str, Any]:
    """`state` by the benchmark's convention: LIBERO's 8-D LeRobot state (X-VLA's 20-D layout for
    xvla), RoboTwin's 14 joint values and Meta-World's `agent_pos` as they come."""
    chosen = _convention(benchmark, "settings.state")
    if chosen == "robotwin":
        state: dict[str, Any] = robotwin_features(1, 1)["state"]
    elif chosen == "metaworld":
        state = metaworld_features(1)["state"]
    else:
        state = libero_features(policy_type, 1)["state"]
    return state


def derived_cameras(
    benchmark: str | None, policy_type: str, image_keys: list[str], camera_size: tuple[int, int] | None
) -> list[dict[str, Any]]:
    """`cameras` by the benchmark's convention for a checkpoint with these image features, at the
    size the benchmark's worker renders; FeatureError naming ``settings.cameras`` when the
    convention cannot give them."""
    chosen = _convention(benchmark, "settings.cameras")
    if camera_size is None:
        raise FeatureError(
            "settings.cameras",
            f"the camera size {chosen}'s worker renders is not known here: seal with --camera-size PX|HxW "
            "(the manifests' camera size), or write cameras",
        )
    if chosen == "robotwin":
        cameras: list[dict[str, Any]] = robotwin_features(*camera_size, robotwin_feature_map(image_keys))["cameras"]
        return cameras
    if chosen == "metaworld":
        return _metaworld_cameras(image_keys, camera_size)
    libero_keys = {feature for _, feature in LIBERO_CAMERAS}
    unknown = [key for key in image_keys if key not in libero_keys]
    if unknown:
        raise FeatureError(
            "settings.cameras",
            f"config.json's image feature {unknown[0]!r} is not one LeRobot's LIBERO processor feeds "
            f"({', '.join(sorted(libero_keys))}); write settings.cameras with the feature each camera feeds",
        )
    cameras = libero_features(policy_type, camera_size, image_keys)["cameras"]
    return cameras


def _metaworld_cameras(image_keys: list[str], camera_size: tuple[int, int]) -> list[dict[str, Any]]:
    """corner2 feeds the one image feature a Meta-World checkpoint has (LeRobot's env gives one
    image); FeatureError naming ``settings.cameras`` for none or several."""
    if len(image_keys) != 1:
        raise FeatureError(
            "settings.cameras",
            f"config.json has {len(image_keys)} image features ({', '.join(image_keys) or 'none'}); Meta-World "
            "renders one camera, corner2: write settings.cameras with the feature it feeds",
        )
    height, width = camera_size
    if height != width:
        raise FeatureError("settings.cameras", f"Meta-World renders square images, the camera size is {height}x{width}")
    cameras: list[dict[str, Any]] = metaworld_features(height)["cameras"]
    cameras[0]["feature"] = image_keys[0]
    return cameras
