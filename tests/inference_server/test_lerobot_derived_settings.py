"""`checkpoint seal` of a LeRobot folder with settings left out: what config.json, the installed
packages and the benchmark's conventions fix is derived, listed as derived, and gives the identity
the same settings typed by hand give; what is given wins and is checked as before; what cannot be
derived is one line naming the setting to write.

The seals run the real LeRobot in .venv-lerobot on tiny ACT folders (scripts/lerobot_tiny.py); the
RoboTwin name recognition is also pinned on its own (pure, no LeRobot).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from lerobot_helpers import CAMERA, NEEDS_LEROBOT, LerobotMade, run_lerobot

from inference_server.backends.lerobot_features import (
    FeatureError,
    derived_cameras,
    derived_state,
    robotwin_feature_map,
)
from inference_server.checkpoint import MANIFEST_NAME, seal

pytestmark = [pytest.mark.timeout(300)]

ROBOTWIN_CAMERA = (48, 64)
DERIVED_ALL = ["policy_type", "lerobot_version", "transformers_version", "cameras", "state"]


@pytest.fixture(scope="module")
def tiny_act(lerobot_made: LerobotMade) -> Path:
    return lerobot_made.policy("--size", str(CAMERA))


@pytest.fixture(scope="module")
def tiny_robotwin_act(lerobot_made: LerobotMade) -> Path:
    return lerobot_made.policy("--benchmark", "robotwin", "--size", "x".join(map(str, ROBOTWIN_CAMERA)))


def copy_of(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for path in source.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


def checkpoint_cli(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_lerobot(python, "-m", "inference_server.cli", "checkpoint", *args)


def seal_cli(python: Path, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return checkpoint_cli(python, "seal", str(folder), "--backend", "lerobot", *args)


def one_line_refusal(done: subprocess.CompletedProcess[str], *named: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for name in named:
        assert name in lines[0], (name, lines[0])


def shown(python: Path, folder: Path) -> dict[str, Any]:
    done = checkpoint_cli(python, "show", str(folder), "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@NEEDS_LEROBOT
def test_seal_derives_an_acts_libero_settings_and_show_lists_them(
    lerobot_python: Path, lerobot_made: LerobotMade, tiny_act: Path, tmp_path: Path
) -> None:
    folder = copy_of(tiny_act, tmp_path / "derived" / "act")
    done = seal_cli(lerobot_python, folder, "--benchmark", "libero", "--camera-size", str(CAMERA))
    assert done.returncode == 0, done.stderr
    assert f"derived {', '.join(DERIVED_ALL)}" in done.stdout

    typed = lerobot_made.settings(f"libero_settings('act', {CAMERA})")
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert manifest["settings"] == typed and manifest["derived"] == DERIVED_ALL

    document = shown(lerobot_python, folder)
    assert document["derived"] == DERIVED_ALL and document["settings"] == typed
    text = checkpoint_cli(lerobot_python, "show", str(folder))
    assert text.returncode == 0, text.stderr
    assert f"derived   {', '.join(DERIVED_ALL)}" in text.stdout

    # The same settings typed by hand: the same identity, and nothing listed as derived.
    explicit = copy_of(tiny_act, tmp_path / "explicit" / "act")
    seal(explicit, "lerobot", typed)
    by_hand = shown(lerobot_python, explicit)
    assert by_hand["digest"] == document["digest"] and by_hand["derived"] == []

    # Sealed again as `scheduler run` does (--reuse, nothing given): verified, not refused.
    again = seal_cli(lerobot_python, folder, "--reuse", "--benchmark", "libero", "--camera-size", str(CAMERA))
    assert again.returncode == 0 and "already sealed" in again.stdout, again.stderr


@NEEDS_LEROBOT
def test_given_settings_win_and_are_checked_as_before(lerobot_python: Path, tiny_act: Path, tmp_path: Path) -> None:
    folder = copy_of(tiny_act, tmp_path / "act")
    wrist_only = [{"name": "robot0_eye_in_hand", "height": 32, "width": 48, "feature": "observation.images.image2"}]
    agentview = {"name": "agentview", "height": 32, "width": 48, "feature": "observation.images.image"}
    cameras = json.dumps([agentview, *wrist_only])
    done = seal_cli(
        lerobot_python, folder, "--benchmark", "libero", "--camera-size", "64", "--set", f"cameras={cameras}"
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert manifest["settings"]["cameras"] == json.loads(cameras)  # not the 64x64 the benchmark would give
    assert manifest["derived"] == ["policy_type", "lerobot_version", "transformers_version", "state"]

    # A given value is checked as when everything is typed: a camera that leaves a feature unfed ...
    other = copy_of(tiny_act, tmp_path / "other")
    unfed = seal_cli(lerobot_python, other, "--benchmark", "libero", "--set", f"cameras={json.dumps(wrist_only)}")
    one_line_refusal(unfed, "settings.cameras feed no camera to observation.images.image")
    # ... a policy type other than config.json's, and a transformers other than the installed one.
    wrong_type = seal_cli(
        lerobot_python, other, "--benchmark", "libero", "--camera-size", "64", "--set", "policy_type=smolvla"
    )
    one_line_refusal(wrong_type, "type 'act' but the seal's policy_type is 'smolvla'")
    old = seal_cli(
        lerobot_python, other, "--benchmark", "libero", "--camera-size", "64", "--set", "transformers_version=4.53.2"
    )
    one_line_refusal(old, "sealed for transformers 4.53.2, but transformers")
    assert not (other / MANIFEST_NAME).exists()


@NEEDS_LEROBOT
def test_cameras_without_a_benchmark_or_a_camera_size_are_refused_naming_the_setting(
    lerobot_python: Path, tiny_act: Path, tmp_path: Path
) -> None:
    folder = copy_of(tiny_act, tmp_path / "act")
    one_line_refusal(seal_cli(lerobot_python, folder), "settings.cameras: not given", "--benchmark NAME")
    no_size = seal_cli(lerobot_python, folder, "--benchmark", "libero")
    one_line_refusal(no_size, "settings.cameras: the camera size libero's worker renders is not known", "--camera-size")
    other = seal_cli(lerobot_python, folder, "--benchmark", "synthetic", "--camera-size", "64")
    one_line_refusal(other, "settings.cameras: LeRobot has no feature convention for benchmark 'synthetic'")
    assert not (folder / MANIFEST_NAME).exists()


@NEEDS_LEROBOT
def test_robotwin_cameras_are_derived_from_recognisable_image_keys_else_refused_naming_the_key(
    lerobot_python: Path, lerobot_made: LerobotMade, tiny_robotwin_act: Path, tmp_path: Path
) -> None:
    folder = copy_of(tiny_robotwin_act, tmp_path / "act")
    size = "x".join(map(str, ROBOTWIN_CAMERA))
    done = seal_cli(lerobot_python, folder, "--benchmark", "robotwin", "--camera-size", size)
    assert done.returncode == 0, done.stderr
    typed = lerobot_made.settings(f"robotwin_settings('act', {ROBOTWIN_CAMERA[0]}, {ROBOTWIN_CAMERA[1]})")
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    assert manifest["settings"] == typed and manifest["derived"] == DERIVED_ALL

    renamed = copy_of(tiny_robotwin_act, tmp_path / "renamed")
    config = json.loads((renamed / "config.json").read_text())
    features = config["input_features"]
    features["observation.images.cam_low"] = features.pop("observation.images.cam_high")
    (renamed / "config.json").write_text(json.dumps(config))
    refused = seal_cli(lerobot_python, renamed, "--benchmark", "robotwin", "--camera-size", size)
    one_line_refusal(refused, "settings.cameras", "'observation.images.cam_low'", "write settings.cameras")
    assert not (renamed / MANIFEST_NAME).exists()


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (
            ["observation.images.cam_high", "observation.images.cam_left_wrist", "observation.images.cam_right_wrist"],
            {
                "head_camera": "observation.images.cam_high",
                "left_camera": "observation.images.cam_left_wrist",
                "right_camera": "observation.images.cam_right_wrist",
            },
        ),
        (
            ["observation.images.head_camera", "observation.images.left_camera", "observation.images.right_camera"],
            {
                "head_camera": "observation.images.head_camera",
                "left_camera": "observation.images.left_camera",
                "right_camera": "observation.images.right_camera",
            },
        ),
        (
            ["observation.images.front", "observation.images.left", "observation.images.right"],
            "'observation.images.front' names none",
        ),
        (
            ["observation.images.top_left", "observation.images.left", "observation.images.right"],
            "'observation.images.top_left' names several",
        ),
        (
            ["observation.images.top", "observation.images.left_a", "observation.images.left_b"],
            "'observation.images.left_a' and 'observation.images.left_b' both name RoboTwin's left_camera",
        ),
        (["observation.images.top", "observation.images.left"], "names RoboTwin's right_camera"),
    ],
)
def test_robotwin_image_keys_are_recognised_or_named(keys: list[str], expected: dict[str, str] | str) -> None:
    if isinstance(expected, dict):
        assert robotwin_feature_map(keys) == expected
        return
    with pytest.raises(FeatureError) as refused:
        robotwin_feature_map(keys)
    assert refused.value.key == "settings.cameras" and expected in str(refused.value)
    assert str(refused.value).startswith("settings.cameras: ") and "\n" not in str(refused.value)


def test_libero_cameras_are_those_the_policy_reads_at_the_manifests_size() -> None:
    wrist_less = derived_cameras("libero", "act", ["observation.images.image"], (64, 96))
    assert wrist_less == [{"name": "agentview", "height": 64, "width": 96, "feature": "observation.images.image"}]
    both = derived_cameras("libero", "act", ["observation.images.image", "observation.images.image2"], (64, 64))
    assert [c["name"] for c in both] == ["agentview", "robot0_eye_in_hand"]
    assert derived_state("libero", "act")["layout"] == "libero"
    assert derived_state("libero", "xvla")["layout"] == "xvla_libero"
    with pytest.raises(FeatureError) as refused:
        derived_cameras("libero", "act", ["observation.images.image", "observation.images.top"], (64, 64))
    assert "'observation.images.top' is not one LeRobot's LIBERO processor feeds" in str(refused.value)


def test_metaworld_feeds_its_one_camera_and_agent_pos_as_lerobots_env_does() -> None:
    # LeRobot's Meta-World env: `pixels` is observation.image, `agent_pos` observation.state.
    assert derived_cameras("metaworld", "act", ["observation.image"], (480, 480)) == [
        {"name": "corner2", "height": 480, "width": 480, "feature": "observation.image"}
    ]
    # A checkpoint trained under another name for its one image is fed corner2 all the same.
    (renamed,) = derived_cameras("metaworld", "smolvla", ["observation.images.top"], (224, 224))
    assert (renamed["name"], renamed["feature"]) == ("corner2", "observation.images.top")
    assert derived_state("metaworld", "act") == {
        "feature": "observation.state",
        "layout": "concat",
        "parts": [{"name": "agent_pos", "length": 4}],
    }
    for keys, words in (([], "has 0 image features (none)"), (["observation.image", "observation.wrist"], "has 2")):
        with pytest.raises(FeatureError) as refused:
            derived_cameras("metaworld", "act", keys, (480, 480))
        assert refused.value.key == "settings.cameras" and words in str(refused.value)
