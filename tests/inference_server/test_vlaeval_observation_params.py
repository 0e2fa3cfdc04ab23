"""A vla-eval model server's HELLO `observation_params` are honoured or refused, never ignored.

vla-eval's own servers ask the benchmark for what their model needs (pi0.py: `send_state`,
`send_wrist_image`; oft.py: those and `env_seed: 0`, `quat_no_antipodal: true`), and vla-eval's
orchestrator applies them. Here vla-eval's real model server (the test policy, `vlaeval_policy.py`)
answers HELLO with the params each case gives, and a real `inference-server` either serves (the
settings' request mapping sends what vla-eval's LIBERO benchmark would send under them, and the
benchmark's own params are declared) or stops at load with one line naming the param (exit 1).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from inference_helpers import load_failure
from remote_checkpoints import make_remote_checkpoint
from test_inference_remote_vlaeval import CHUNK, Step, episode
from vlaeval_helpers import VlaEvalServer

from evalfleet.local_fleet import policy_argv
from evalfleet.processes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def request(
    axisangle: str | None = "axisangle_vlaeval", wrist: bool = True, states: bool = True
) -> list[dict[str, Any]]:
    """vla-eval's LIBERO observation (benchmark.py:269-284), with the parts each case leaves out."""
    entries: list[dict[str, Any]] = [{"key": ["images", "agentview"], "camera": "agentview"}]
    if wrist:
        entries.append({"key": ["images", "wrist"], "camera": "robot0_eye_in_hand"})
    if states:
        quat: Any = {"name": "robot0_eef_quat", "as": axisangle} if axisangle else "robot0_eef_quat"
        entries.append({"key": "states", "state": ["robot0_eef_pos", quat, "robot0_gripper_qpos"]})
    entries.append({"key": "task_description", "instruction": True})
    return entries


# (what the HELLO asks, the settings' request, their declared observation_params)
HONOURED = {
    "pi0": ({"send_state": True, "send_wrist_image": True}, request(), {}),
    "antipodal": ({"send_state": True, "send_wrist_image": True, "quat_no_antipodal": False}, request(), {}),
    "oft": (
        {"env_seed": 0, "quat_no_antipodal": True, "send_wrist_image": True, "send_state": True},
        request("axisangle_vlaeval_no_antipodal"),
        {"env_seed": 0},
    ),
}

# (what the HELLO asks, the settings' request, their declared observation_params, what the line says)
REFUSED = {
    "antipodal-sent": (
        {"quat_no_antipodal": True},
        request(),
        {},
        "asks observation_params quat_no_antipodal=True, so vla-eval's LIBERO benchmark sends the quaternion "
        "of `states` as axisangle_vlaeval_no_antipodal, but settings.request's `states` has ['axisangle_vlaeval']",
    ),
    "own-formula": (
        {"quat_no_antipodal": False},
        request("axisangle"),
        {},
        "quat_no_antipodal=False, so vla-eval's LIBERO benchmark sends the quaternion of `states` as "
        "axisangle_vlaeval, but settings.request's `states` has ['axisangle']",
    ),
    "no-wrist-asked": (
        {"send_wrist_image": False},
        request(),
        {},
        "asks observation_params send_wrist_image=False, but settings.request sends `images.wrist`",
    ),
    "state-asked": (
        {"send_state": True},
        request(states=False),
        {},
        "asks observation_params send_state=True, but settings.request sends no `states`",
    ),
    "not-a-flag": ({"send_state": "yes"}, request(), {}, "send_state='yes', which is not true or false"),
    "seed-undeclared": (
        {"env_seed": 0},
        request(),
        {},
        "asks observation_params env_seed=0, which the benchmark side applies (the manifests fix it, not the "
        "request mapping): once the evaluation does, declare settings.observation_params.env_seed: 0",
    ),
    "seed-differs": (
        {"env_seed": 0},
        request(),
        {"env_seed": 7},
        "asks observation_params env_seed=0, but settings.observation_params.env_seed is 7",
    ),
    "declared-not-asked": (
        {},
        request(),
        {"env_seed": 0},
        "settings.observation_params.env_seed is declared, but the server's HELLO does not ask it",
    ),
}


def remote(tmp_path: Path, params: dict[str, Any]) -> VlaEvalServer:
    return VlaEvalServer(free_port(), tmp_path / "vlaeval.log", observation_params=params).run()


@pytest.mark.parametrize("case", sorted(HONOURED))
def test_params_the_settings_honour_are_served(tmp_path: Path, start_server, case: str) -> None:
    params, mapping, declared = HONOURED[case]
    server = remote(tmp_path, params)
    try:
        make_remote_checkpoint(
            tmp_path / "ckpt", server.url, dialect="vla-eval", request=mapping, observation_params=declared or None
        )
        policy = start_server(tmp_path / "ckpt", epoch="vlaeval")
        with policy.client() as client, client.open_session(client.identity().digest, episode()) as session:
            assert Step(0).act(session, 0).shape == (CHUNK, 7)
    finally:
        server.stop()


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_params_the_settings_do_not_honour_stop_the_server_at_load_naming_them(tmp_path: Path, case: str) -> None:
    params, mapping, declared, said = REFUSED[case]
    server = remote(tmp_path, params)
    try:
        make_remote_checkpoint(
            tmp_path, server.url, dialect="vla-eval", request=mapping, observation_params=declared or None
        )
        run = subprocess.run(policy_argv("vlaeval", tmp_path), capture_output=True, text=True, timeout=120, check=False)
    finally:
        server.stop()
    line = load_failure(run)
    assert server.url in line and said in line, line
