"""A double of StarVLA's policy server (starVLA/starVLA `deployment/model_server/server_policy.py`),
for the `remote` backend's starvla dialect tests.

Why a double: StarVLA is not on PyPI and pins torch 2.6 and transformers 4.57, so its server cannot
run here. What it reproduces, read from StarVLA's source at commit 0ed0aad (paths below are in that
checkout):

- the transport (`deployment/model_server/tools/websocket_policy_server.py`), restated here:
  `serve(compression=None, max_size=None)` (42-49); on connect, the metadata frame (69); each
  message unpacked, routed and answered (71-76), with the codec openpi-client ships, which
  StarVLA's `tools/msgpack_numpy.py` is a copy of; a traceback text frame and close code 1011 when
  the handler itself fails (80-86); and the idle timeout: with `idle_timeout > 0` a watchdog wakes
  every 5 s and, once no message (connections do not count) arrived for longer than the timeout,
  closes the server, which closes every connection with 1001, and the process exits 0 (50-63;
  `--idle_timeout` defaults to 1800 in server_policy.py:76, and LIBERO's and RoboTwin's
  `run_policy_server.sh` leave it there);
- the router (`_route_message`, 89-148): `{"type", "request_id", "payload"}` envelopes, a flat
  map taken as an infer payload (what StarVLA's own clients send), `ping`, unknown types and
  policy exceptions answered as error data (`"status": "error", "ok": false, "error":
  {"message"}`) on a connection that stays open;
- the metadata of `PolicyServerWrapper` (`policy_wrapper.py:139-159`): `env`, `ckpt_path`,
  `action_chunk_size`, `available_unnorm_keys` (statistics are keyed by embodiment tag,
  `starVLA/dataloader/gr00t_lerobot/datasets.py:2695-2761`), `default_unnorm_key` (the single key,
  or None when there are several: server_policy.py:25-30 never passes one, policy_wrapper.py:99),
  `training_data_mix`, `training_obs_image_size`, `eval_image_contract`, and `action_keys` /
  `state_keys` only when there is a default. `--embodiment` picks a checkpoint's: `libero`
  (StarVLA's LIBERO config: `franka`, data mix `libero_all`, 7 per-dimension action keys, 8 state
  keys; examples/simBenchmarks/LIBERO/train_files/), `robotwin` (`new_embodiment`, `robotwin`, 4
  grouped keys each; examples/simBenchmarks/Robotwin/train_files/), `multi` (two embodiments, no
  default, no keys: a server the client must name a key to);
- the input checks that fail a request: an unnorm key the server lacks (policy_wrapper.py:179-187);
  each example's images through `to_pil_preserve` (`tools/image_tools.py:64-121`: anything but a
  list, tuple, PIL image or 3-D array with 1, 3 or 4 channels is refused; other dtypes are cast,
  floats scaled); `lang` required; a state, when sent, must be (1, D) per example, as the GR00T
  action head of StarVLA's LIBERO model concatenates it as [B, 1, D] (QwenGR00T.py:243,
  GR00T_ActionHeader.py:403).

What it fakes: the model (`--model`): `formula` answers `actions[b, t, d] = base + 0.01 t + 0.001
d` with `base = mean(image[0]) / 255 + mean(image[1]) / 510 + sum(state) + len(lang) + 10 *
index(unnorm_key)` (`expected_actions`, which tests call on the same example); `hashed` answers
numbers in [0, 1) drawn from the sha256 of every byte of the example, so any change to an image,
the state or the prompt changes the answer; `libero-script` is the LIBERO oracle
(`inference_server.backends.oracle`) behind StarVLA's conventions: it reads the object state a
test sends as the example's `oracle_state`, keeps each prompt's own history (one episode per
prompt at a time), answers the gripper as StarVLA's LIBERO model does (about 1 = open, 0 = closed,
so it solves an episode only if the client binarizes and inverts it), and refuses images that are
not 224x224 (the size it was "trained" on). StarVLA's server does not batch-check anything else.

It prints `infer examples=N` per request (the batch size, a line tests count), the request's other
predict kwargs, and `answered prompt=...` per example; `--record FILE` appends one JSON line per
example received (each image's shape, dtype and sha256, the state's, the prompt, the key used), so
a test compares what two clients sent. An example whose `lang` starts with "fail:" makes the
policy raise (error data); `--mode` makes every request misbehave: `error` (error data),
`wrong-batch` (one chunk too many), `wrong-shape` ([B, T, D - 1]), `nan`, `wrong-id` (another
request_id), `hang` (never answers, blocking the event loop as a stuck model would). `--version`
goes into `ckpt_path`, so a restart with another version is another handshake.

    python starvla_double.py --port 10093 [--embodiment libero] [--model formula] [--mode ok]
        [--chunk 10] [--action-dim 7] [--version 1] [--idle-timeout 1800] [--record FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import websockets
import websockets.asyncio.server
import websockets.frames
from openpi_client import msgpack_numpy
from PIL import Image

from evalfleet.v1 import policy_pb2
from inference_server.backends.contract import History, HistoryEntry
from inference_server.backends.oracle import (
    ORACLE_SETTINGS,
    Gains,
    closed_streak,
    descent_stalled,
    grasp_attempts,
    oracle_command,
)

MODES = ("ok", "error", "wrong-batch", "wrong-shape", "nan", "wrong-id", "hang")
MODELS = ("formula", "hashed", "libero-script")
IDLE_CHECK_S = 5.0  # websocket_policy_server.py:58
EVAL_IMAGE_CONTRACT = (
    "Eval clients must explicitly choose image count and order. "
    "The server does not infer or reorder camera views from training config."
)
# What each checkpoint's metadata says beyond the chunk size (policy_wrapper.py:139-159).
EMBODIMENTS: dict[str, dict[str, Any]] = {
    "libero": {
        "available_unnorm_keys": ["franka"],
        "training_data_mix": "libero_all",
        "training_obs_image_size": None,
        "action_keys": [f"action.{k}" for k in ("x", "y", "z", "roll", "pitch", "yaw", "gripper")],
        "state_keys": [f"state.{k}" for k in ("x", "y", "z", "roll", "pitch", "yaw", "pad", "gripper")],
    },
    "robotwin": {
        "available_unnorm_keys": ["new_embodiment"],
        "training_data_mix": "robotwin",
        "training_obs_image_size": [224, 224],
        "action_keys": [f"action.{k}" for k in ("left_joints", "right_joints", "left_gripper", "right_gripper")],
        "state_keys": [f"state.{k}" for k in ("left_joints", "right_joints", "left_gripper", "right_gripper")],
    },
    "multi": {
        "available_unnorm_keys": ["oxe_bridge", "oxe_rt1"],
        "training_data_mix": "bridge_rt_1",
        "training_obs_image_size": [224, 224],
    },
}
# The libero-script model: its gripper as StarVLA's LIBERO model emits it (1 = open), and its images.
SCRIPT_OPEN, SCRIPT_CLOSED = 0.93, 0.07
SCRIPT_IMAGE = (224, 224)
ORACLE_STATE = (("robot0_eef_pos", 3), ("robot0_gripper_qpos", 2), ("target_pos", 3), ("goal_pos", 3))

log = logging.getLogger("websocket_policy_server")


def metadata(embodiment: str, chunk: int, version: str) -> dict[str, Any]:
    """The handshake of a StarVLA server on the given checkpoint (policy_wrapper.py:139-159)."""
    spec = EMBODIMENTS[embodiment]
    keys = spec["available_unnorm_keys"]
    default = keys[0] if len(keys) == 1 else None
    base = {
        "env": "starvla_policy_server",
        "ckpt_path": f"evalfleet-starvla-double-v{version}",
        "action_chunk_size": chunk,
        "available_unnorm_keys": keys,
        "default_unnorm_key": default,
        "training_data_mix": spec["training_data_mix"],
        "training_obs_image_size": spec["training_obs_image_size"],
        "eval_image_contract": EVAL_IMAGE_CONTRACT,
    }
    if default is not None:
        base |= {"action_keys": spec["action_keys"], "state_keys": spec["state_keys"]}
    return base


def expected_actions(example: dict[str, Any], key_index: int, chunk: int, action_dim: int) -> npt.NDArray[np.float64]:
    """What the `formula` model answers to one example (the same formula the tests check against);
    `key_index` is the unnorm key's position in the server's available keys."""
    first, second = (np.asarray(image, dtype=np.float64) for image in example["image"][:2])
    base = (
        float(first.mean()) / 255.0
        + float(second.mean()) / 510.0
        + float(np.asarray(example.get("state", 0.0), dtype=np.float64).sum())
        + len(example["lang"])
        + 10.0 * key_index
    )
    t = np.arange(chunk, dtype=np.float64)[:, None] * 0.01
    d = np.arange(action_dim, dtype=np.float64)[None, :] * 0.001
    return base + t + d


def _array_digest(array: np.ndarray) -> dict[str, Any]:
    return {
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
    }


def example_record(example: dict[str, Any], unnorm_key: str) -> dict[str, Any]:
    """What a test compares of one example: every image's bytes, the state's, the prompt."""
    state = example.get("state")
    return {
        "lang": example["lang"],
        "images": [_array_digest(np.asarray(image)) for image in example["image"]],
        "state": None if state is None else {**_array_digest(np.asarray(state)), "values": np.asarray(state).tolist()},
        "unnorm_key": unnorm_key,
    }


def hashed_actions(example: dict[str, Any], chunk: int, action_dim: int) -> npt.NDArray[np.float32]:
    """The `hashed` model: uniform [0, 1) numbers seeded by the sha256 of every byte of the example."""
    digest = hashlib.sha256(json.dumps(example_record(example, ""), sort_keys=True).encode())
    rng = np.random.default_rng(int.from_bytes(digest.digest()[:8], "little"))
    return rng.uniform(0.0, 1.0, (chunk, action_dim)).astype(np.float32)


def check_images(images: Any) -> None:
    """What StarVLA's `to_pil_preserve` (tools/image_tools.py:86-121) refuses, with its messages."""
    if isinstance(images, (list, tuple)):
        for image in images:
            check_images(image)
        return
    if isinstance(images, Image.Image):
        return
    if not isinstance(images, np.ndarray):
        raise TypeError(f"Unsupported element type: {type(images)}")
    if images.ndim != 3:
        raise ValueError(f"Expected 3D array (H,W,C), got shape={images.shape}")
    if images.shape[2] not in (1, 3, 4):
        raise ValueError(f"Channel count must be 1/3/4, got {images.shape[2]}")


class LiberoScript:
    """The LIBERO oracle behind StarVLA's conventions (see the module docstring). Each prompt's
    history holds the states it was sent and the commands it answered, all of whose rows are
    taken to have run (the whole chunk, as StarVLA's LIBERO client runs it)."""

    def __init__(self) -> None:
        self.gains = Gains.from_settings(ORACLE_SETTINGS)
        self.histories: dict[str, list[HistoryEntry]] = {}
        self.pending: dict[str, tuple[dict[str, np.ndarray], np.ndarray]] = {}

    def actions(self, example: dict[str, Any], chunk: int, action_dim: int) -> npt.NDArray[np.float32]:
        for image in example["image"]:
            if np.asarray(image).shape[:2] != SCRIPT_IMAGE:
                raise ValueError(f"the scripted model takes {SCRIPT_IMAGE} images, not {np.asarray(image).shape}")
        lang = example["lang"]
        vector = np.asarray(example["oracle_state"], dtype=np.float64).reshape(-1)
        bounds = np.cumsum([0] + [length for _, length in ORACLE_STATE])
        state = {name: vector[bounds[i] : bounds[i + 1]] for i, (name, _) in enumerate(ORACLE_STATE)}
        entries = self.histories.setdefault(lang, [])
        if lang in self.pending:
            sent, commands = self.pending.pop(lang)
            entries.append(HistoryEntry(step=len(entries), state=sent, executed=commands))
        history = History(session_id=lang, episode=policy_pb2.EpisodeMeta(), entries=tuple(entries))
        stalled = descent_stalled(history, state["robot0_eef_pos"], self.gains)
        command = oracle_command(
            state, closed_streak(history), stalled, grasp_attempts(history) > 0, self.gains
        ).astype(np.float32)
        commands = np.repeat(command[None, :], chunk, axis=0)
        self.pending[lang] = (state, commands)
        answered = commands.copy()
        answered[:, 6] = np.where(command[6] < 0, SCRIPT_OPEN, SCRIPT_CLOSED)  # StarVLA's model: 1 = open
        return answered[:, :action_dim]


class Policy:
    """StarVLA's `PolicyServerWrapper.predict_action` interface: a batch of examples in, un-normalized
    actions [B, T, D] out, float32 as its `unapply_actions` returns them (policy_norm_processor.py:360-400)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.mode, self.model, self.chunk, self.action_dim = args.mode, args.model, args.chunk, args.action_dim
        spec = EMBODIMENTS[args.embodiment]
        self.keys: list[str] = spec["available_unnorm_keys"]
        self.default = self.keys[0] if len(self.keys) == 1 else None
        self.record: Path | None = args.record
        self.script = LiberoScript()

    def predict_action(
        self, examples: list[dict[str, Any]], unnorm_key: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        print(f"infer examples={len(examples)}", flush=True)
        print(f"predict kwargs {sorted(kwargs.items())}", flush=True)
        key = unnorm_key if unnorm_key is not None else self.default
        if key is None:
            raise ValueError(f"predict_action: unnorm_key not specified and no default set. Pass one of {self.keys}.")
        if key not in self.keys:
            raise ValueError(f"predict_action: unnorm_key {key!r} is not one of {self.keys}")
        for example in examples:
            check_images(example["image"])
            if "state" in example and np.asarray(example["state"]).ndim != 2:
                raise ValueError(f"state must be (1, state_dim) per example, not {np.asarray(example['state']).shape}")
        if self.mode == "error" or any(example["lang"].startswith("fail:") for example in examples):
            raise ValueError("test policy refuses the examples")
        actions = np.stack([self._model(example, key) for example in examples]).astype(np.float32)
        for example in examples:
            self._record(example, key)
            print(f"answered prompt={example['lang']!r}", flush=True)
        if self.mode == "wrong-batch":
            actions = np.concatenate([actions, actions[:1]])
        if self.mode == "wrong-shape":
            actions = actions[:, :, :-1]
        if self.mode == "nan":
            actions[:, 0, 0] = np.nan
        return {"actions": actions}

    def _model(self, example: dict[str, Any], key: str) -> npt.NDArray[np.generic]:
        if self.model == "hashed":
            return hashed_actions(example, self.chunk, self.action_dim)
        if self.model == "libero-script" and example["lang"] != "warm up":
            return self.script.actions(example, self.chunk, self.action_dim)
        return expected_actions(example, self.keys.index(key), self.chunk, self.action_dim)

    def _record(self, example: dict[str, Any], key: str) -> None:
        if self.record is not None:
            with self.record.open("a") as out:
                out.write(json.dumps(example_record(example, key), sort_keys=True) + "\n")


class Router:
    """StarVLA's `WebsocketPolicyServer._route_message` (websocket_policy_server.py:89-148)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def route(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.policy.mode == "hang":
            threading.Event().wait()
        request_id = message.get("request_id", "default")
        kind = message.get("type", "infer")
        payload = message.get("payload", message)
        if kind == "ping":
            return {"status": "ok", "ok": True, "type": "ping", "request_id": request_id}
        if kind not in ("infer", "predict_action"):
            return _error("unknown", request_id, f"Unsupported message type '{kind}'")
        if not isinstance(payload, dict):
            return _error("inference_result", request_id, "Payload must be a dict")
        try:
            data = self.policy.predict_action(**payload)
        except Exception as exc:  # StarVLA answers any policy exception as data
            return _error("inference_result", request_id, str(exc))
        if self.policy.mode == "wrong-id":
            request_id = f"not-{request_id}"
        return {"status": "ok", "ok": True, "type": "inference_result", "request_id": request_id, "data": data}


def _error(kind: str, request_id: object, message: str) -> dict[str, Any]:
    return {"status": "error", "ok": False, "type": kind, "request_id": request_id, "error": {"message": message}}


class Server:
    """StarVLA's `WebsocketPolicyServer` (websocket_policy_server.py:17-86), restated."""

    def __init__(self, router: Router, port: int, idle_timeout: float, handshake: dict[str, Any]) -> None:
        self.router, self.port, self.idle_timeout, self.handshake = router, port, idle_timeout, handshake
        self.last_active = time.time()

    async def run(self) -> None:
        async with websockets.asyncio.server.serve(
            self.handler, "127.0.0.1", self.port, compression=None, max_size=None
        ) as server:
            if self.idle_timeout > 0:
                await self.watch(server)
            else:
                await server.serve_forever()

    async def watch(self, server: websockets.asyncio.server.Server) -> None:
        while True:
            await asyncio.sleep(IDLE_CHECK_S)
            if time.time() - self.last_active > self.idle_timeout:
                log.info(f"Idle timeout ({self.idle_timeout:g}s) reached, shutting down server.")
                server.close()  # closes every connection with 1001 (going away)
                await server.wait_closed()
                return

    async def handler(self, websocket: websockets.asyncio.server.ServerConnection) -> None:
        log.info(f"Connection from {websocket.remote_address} opened")
        packer = msgpack_numpy.Packer()
        await websocket.send(packer.pack(self.handshake))
        while True:
            try:
                message = msgpack_numpy.unpackb(await websocket.recv())
                self.last_active = time.time()  # only messages count as activity
                await websocket.send(packer.pack(self.router.route(message)))
            except websockets.ConnectionClosed:
                log.info(f"Connection from {websocket.remote_address} closed")
                break
            except Exception:
                await websocket.send(traceback.format_exc())
                await websocket.close(
                    code=websockets.frames.CloseCode.INTERNAL_ERROR,
                    reason="Internal server error. Traceback included in previous frame.",
                )
                raise


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--embodiment", default="libero", choices=sorted(EMBODIMENTS))
    parser.add_argument("--model", default="formula", choices=MODELS)
    parser.add_argument("--mode", default="ok", choices=MODES)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--action-dim", type=int, default=7)
    parser.add_argument("--version", default="1")
    parser.add_argument("--idle-timeout", type=float, default=1800, help="seconds; <= 0: never (StarVLA's -1)")
    parser.add_argument("--record", type=Path, default=None)
    args = parser.parse_args()
    # websockets logs "server listening on HOST:PORT", the line the harness waits for (StarVLA sets
    # websockets.server to INFO, websocket_policy_server.py:37), and this double each connection.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    server = Server(
        Router(Policy(args)), args.port, args.idle_timeout, metadata(args.embodiment, args.chunk, args.version)
    )
    asyncio.run(server.run())


if __name__ == "__main__":
    main()
