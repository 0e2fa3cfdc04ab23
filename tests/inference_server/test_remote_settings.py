"""Bad settings of a `remote` checkpoint are refused by name before anything is reached: each
dialect's settings, one mistake at a time, through `inference-server --dry-run` (exit 2, one line).
Nothing listens at the checkpoint's URL."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from remote_checkpoints import EPOCHS, SETTINGS

from evalfleet.local_fleet import policy_argv
from inference_server.checkpoint import seal

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

URL = "ws://127.0.0.1:1"

# (dialect, the settings it replaces, what the refusal names)
REFUSED = [
    ("openpi", {"url": "http://host:8000"}, "settings.url"),
    ("openpi", {"dialect": "grpc"}, "settings.dialect"),
    ("openpi", {"dialect": ["openpi"]}, "settings.dialect"),
    ("openpi", {"connections": 0}, "settings.connections"),
    ("openpi", {"reply_timeout_s": -1}, "settings.reply_timeout_s"),
    ("openpi", {"request": [{"key": "prompt"}]}, "settings.request[0] needs exactly one of"),
    ("openpi", {"request": [{"key": "image", "camera": "front"}]}, "settings.request[0].camera 'front'"),
    (
        "openpi",
        {"request": [{"key": "s", "state": [{"name": "robot0_eef_pos", "as": "axisangle"}]}]},
        "not a quaternion",
    ),
    ("openpi", {"handshake_sha256": "abc"}, "settings.handshake_sha256"),
    # A misspelt setting would be sealed into the digest and ignored; StarVLA's are not openpi's.
    ("openpi", {"reply_timeout": 5}, "settings.reply_timeout is not a setting of the openpi dialect"),
    ("openpi", {"unnorm_key": "libero"}, "settings.unnorm_key is not a setting of the openpi dialect"),
    ("starvla", {"examples_per_request": 0}, "settings.examples_per_request"),
    (
        "starvla",
        {"examples_per_requests": 4},
        "settings.examples_per_requests is not a setting of the starvla dialect",
    ),
    ("starvla", {"examples_per_request": True}, "settings.examples_per_request"),
    ("starvla", {"unnorm_key": 3}, "settings.unnorm_key"),
    ("starvla", {"predict_kwargs": {"use_ddim": [1]}}, "settings.predict_kwargs"),
    ("starvla", {"predict_kwargs": {"examples": 1}}, "settings.predict_kwargs must not set examples"),
    ("starvla", {"chunk_length_differs": " "}, "settings.chunk_length_differs must be a non-empty text"),
    ("starvla", {"expected_action_keys": "action.x"}, "settings.expected_action_keys must be a list of key names"),
    ("openpi", {"chunk_length_differs": "why"}, "settings.chunk_length_differs is not a setting of the openpi dialect"),
    (
        "starvla",
        {"request": [{"key": "image", "cameras": "agentview"}]},
        "settings.request[0].cameras must be a non-empty",
    ),
    (
        "starvla",
        {"request": [{"key": "image", "cameras": ["agentview", "front"]}]},
        "settings.request[0].cameras names 'front'",
    ),
    # The client-side steps (client_steps.py), after the reply and before the request.
    ("openpi", {"reply": [{"op": "reorder", "order": [0, 1]}]}, "settings.reply[0].order must be a permutation"),
    (
        "starvla",
        {"reply": [{"op": "binarize", "dims": [6], "if_greater_than": 0.5, "then": -1}]},
        "settings.reply[0].else is required",
    ),
    (
        "starvla",
        {"request": [{"key": "image", "cameras": ["agentview"], "resize": {"size": [224, 224], "method": "bicubic"}}]},
        "settings.request[0].resize.method must be one of letterbox, pil_bilinear, cv2_area",
    ),
    (
        "starvla",
        {
            "request": [
                {"key": "state", "state": ["robot0_eef_pos"], "normalize": {"stats": "s.json", "mode": "min_max"}}
            ]
        },
        "settings.request[0].normalize.stats 's.json' is not a sealed file of the checkpoint",
    ),
    ("vla-eval", {"dialect": "vla_eval"}, "settings.dialect"),
    ("vla-eval", {"connections": 65}, "settings.connections"),
    (
        "vla-eval",
        {"request": [{"key": ["images", "agentview"], "camera": "front"}]},
        "settings.request[0].camera 'front'",
    ),
    # What a vla-eval server's HELLO may ask (observation_params): the benchmark's params are declared...
    ("vla-eval", {"observation_params": ["env_seed", 0]}, "settings.observation_params must map parameter names"),
    # ...and the request mapping's are checked against the server's, not declared.
    (
        "vla-eval",
        {"observation_params": {"send_state": True}},
        "settings.observation_params.send_state is decided by settings.request",
    ),
    ("openpi", {"observation_params": {}}, "settings.observation_params is not a setting of the openpi dialect"),
    ("openpi", {"action_dtype": "float16"}, "settings.action_dtype must be one of float32, float64"),
]


@pytest.mark.parametrize(("dialect", "override", "named"), REFUSED)
def test_bad_remote_settings_are_refused_by_name(
    tmp_path: Path, dialect: str, override: dict[str, Any], named: str
) -> None:
    epoch = EPOCHS[dialect]
    (tmp_path / epoch).mkdir()
    seal(tmp_path / epoch, "remote", {**SETTINGS[dialect](URL), **override})
    run = subprocess.run(
        [*policy_argv(epoch, tmp_path), "--dry-run"], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and named in run.stderr, run.stderr
