"""REFERENCE: StarVLA's own LIBERO and RoboTwin evaluation clients, restated from its code at
commit 0ed0aad2c83f (starVLA/starVLA; not on PyPI, so it cannot be imported here) for the tests
that compare evalfleet's `remote` path with them (`test_starvla_client_steps.py`).

This is the reference, not evalfleet code: each function does what the cited lines do, in their
order and with their dtypes, and nothing else. Paths are in StarVLA's checkout:
`LIBERO/` is `examples/simBenchmarks/LIBERO/eval_files/`, `Robotwin/` is
`examples/simBenchmarks/Robotwin/eval_files/`, `client` is `deployment/model_server/tools/
websocket_policy_client.py`, whose codec (`tools/msgpack_numpy.py`) is openpi-client's.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import websockets.sync.client
from openpi_client import msgpack_numpy
from PIL import Image


class WebsocketClientPolicy:
    """client:68-135: connect without compression or pings, read the metadata frame, then one
    flat msgpack message per `predict_action`, answered by one frame."""

    def __init__(self, url: str) -> None:
        self._ws = websockets.sync.client.connect(
            url, compression=None, max_size=None, open_timeout=30, ping_interval=None
        )
        self._packer = msgpack_numpy.Packer()
        self._metadata = msgpack_numpy.unpackb(self._ws.recv(timeout=30))

    def get_server_metadata(self) -> dict[str, Any]:
        return self._metadata

    def predict_action(self, query: dict[str, Any]) -> dict[str, Any]:
        self._ws.send(self._packer.pack(query))
        response = self._ws.recv(timeout=30)
        if isinstance(response, str):
            raise RuntimeError(f"Error in inference server:\n{response}")
        reply: dict[str, Any] = msgpack_numpy.unpackb(response)
        return reply

    def close(self) -> None:
        self._ws.close()


class LiberoModelClient:
    """LIBERO/model2libero_interface.py `ModelClient` with its defaults (28-83): image_size (224,
    224), use_ddim, 10 DDIM steps, unnorm_key None (eval_libero.py:55, 91-95); `step` is 101-165."""

    def __init__(self, url: str) -> None:
        self.client = WebsocketClientPolicy(url)
        self.action_chunk_size = int(self.client.get_server_metadata()["action_chunk_size"])  # 45-46
        self.image_size = (224, 224)
        self.unnorm_key = None
        self.use_ddim, self.num_ddim_steps = True, 10
        self.task_description: str | None = None
        self.raw_actions: np.ndarray | None = None

    def reset(self, task_description: str) -> None:  # 89-99
        self.task_description = task_description
        self.raw_actions = None

    def step(self, example: dict[str, Any], step: int) -> dict[str, np.ndarray]:
        task_description = example.get("lang", None)  # 111-113
        if task_description != self.task_description:
            self.reset(task_description)
        if self.image_size and example.get("image"):  # 115-128
            resized = []
            target_hw = self.image_size
            for img in example["image"]:
                arr = np.asarray(img)
                if arr.shape[:2] != target_hw:
                    arr = np.asarray(Image.fromarray(arr).resize((target_hw[1], target_hw[0]), Image.BILINEAR))
                resized.append(arr)
            example = {**example, "image": resized}
        if step % self.action_chunk_size == 0 or self.raw_actions is None:  # 131-157
            vla_input = {
                "examples": [example],
                "unnorm_key": self.unnorm_key,
                "do_sample": False,
                "use_ddim": self.use_ddim,
                "num_ddim_steps": self.num_ddim_steps,
            }
            response = self.client.predict_action(vla_input)
            self.raw_actions = np.asarray(response["data"]["actions"])[0]
        raw_actions = self.raw_actions[step % self.action_chunk_size][None]  # 159-165
        return {
            "world_vector": np.array(raw_actions[0, :3]),
            "rotation_delta": np.array(raw_actions[0, 3:6]),
            "open_gripper": np.array(raw_actions[0, 6:7]),
        }


def binarize_gripper_open(open_val: np.ndarray) -> np.ndarray:
    """LIBERO/eval_libero.py:23-27."""
    arr = np.asarray(open_val, dtype=np.float32).reshape(-1)
    v = float(arr[0])
    bin_val = 1.0 - 2.0 * (v > 0.5)
    return np.asarray([bin_val], dtype=np.float32)


def libero_policy_step(client: LiberoModelClient, obs: dict[str, np.ndarray], lang: str, step: int) -> np.ndarray:
    """One policy step of LIBERO/eval_libero.py's loop (144-204), given robosuite's raw observation
    (images upside down): what it passes to `env.step`, as the float32 array it lists."""
    img = np.ascontiguousarray(obs["agentview_image"][::-1, ::-1])  # 145-146
    wrist_img = np.ascontiguousarray(obs["robot0_eye_in_hand_image"][::-1, ::-1])
    example_dict = {"image": [img, wrist_img], "lang": lang}  # 159-170 (the state is built, never sent)
    raw_action = client.step(example=example_dict, step=step)  # 174, 180
    world_vector_delta = np.asarray(raw_action.get("world_vector"), dtype=np.float32).reshape(-1)  # 182-185
    rotation_delta = np.asarray(raw_action.get("rotation_delta"), dtype=np.float32).reshape(-1)
    open_gripper = np.asarray(raw_action.get("open_gripper"), dtype=np.float32).reshape(-1)
    gripper = binarize_gripper_open(open_gripper)
    return np.concatenate([world_vector_delta, rotation_delta, gripper], axis=0)  # 198, 204


class RobotwinModelClient:
    """Robotwin/model2robotwin_interface.py `ModelClient` (15-180) with its defaults: image_size
    [224, 224], use_ddim, 10 DDIM steps, and `unnorm_key` / `action_mode` from deploy_policy.yml."""

    def __init__(self, url: str, unnorm_key: str, action_mode: str) -> None:
        self.client = WebsocketClientPolicy(url)
        self.unnorm_key = unnorm_key
        self.use_ddim, self.num_ddim_steps = True, 10
        self.image_size = [224, 224]
        self.action_mode = action_mode
        self.initial_state: np.ndarray | None = None
        self.prev_action: np.ndarray | None = None
        self.task_description: str | None = None
        self.raw_actions: np.ndarray | None = None
        self.action_chunk_size = self.client.get_server_metadata()["action_chunk_size"]  # 69-70

    def reset(self, task_description: str) -> None:  # 77-86
        self.task_description = task_description
        self.raw_actions = None
        self.initial_state = None
        self.prev_action = None

    def step(self, example: dict[str, Any], step: int = 0) -> np.ndarray:  # 88-163
        state = example.get("state", None)
        if self.action_mode in ["delta", "rel"] and self.initial_state is None:
            if state is None:
                raise ValueError(f"action_mode='{self.action_mode}' requires state to be provided in example")
            self.initial_state = np.array(state).copy()
        task_description = example.get("lang", None)
        images = example["image"]
        if example is not None:
            if task_description != self.task_description:
                self.reset(task_description)
                if self.action_mode in ["delta", "rel"] and state is not None:
                    self.initial_state = np.array(state).copy()
        images = [self._resize_image(image) for image in images]
        example["image"] = images
        example_copy = example.copy()
        example_copy.pop("state")
        vla_input = {
            "examples": [example_copy],
            "do_sample": False,
            "use_ddim": self.use_ddim,
            "num_ddim_steps": self.num_ddim_steps,
        }
        vla_input["unnorm_key"] = self.unnorm_key
        action_chunk_size = self.action_chunk_size
        if step % action_chunk_size == 0 or self.raw_actions is None:
            response = self.client.predict_action(vla_input)
            raw_actions = np.array(response["data"]["actions"][0])
            if self.action_mode == "delta":
                self.raw_actions = self._delta_to_absolute(raw_actions, state)
            elif self.action_mode == "rel":
                self.raw_actions = self._rel_to_absolute(raw_actions)
            else:
                self.raw_actions = raw_actions
        action_idx = step % action_chunk_size
        current_action = self.raw_actions[action_idx]
        if self.action_mode == "delta":
            self.prev_action = current_action.copy()
        current_action = current_action[[0, 1, 2, 3, 4, 5, 12, 6, 7, 8, 9, 10, 11, 13]]
        return current_action

    def _delta_to_absolute(self, delta_actions: np.ndarray, current_state: np.ndarray) -> np.ndarray:  # 165-172
        abs_actions = np.zeros_like(delta_actions)
        base = self.prev_action if self.prev_action is not None else self.initial_state
        for i in range(len(delta_actions)):
            abs_actions[i] = delta_actions[i] + base
            base = abs_actions[i]
        return abs_actions

    def _rel_to_absolute(self, rel_actions: np.ndarray) -> np.ndarray:  # 174-176
        assert self.initial_state is not None
        return rel_actions + self.initial_state

    def _resize_image(self, image: np.ndarray) -> np.ndarray:  # 178-180
        return cv2.resize(image, tuple(self.image_size), interpolation=cv2.INTER_AREA)


def robotwin_eval(
    model: RobotwinModelClient, observation: dict[str, Any], instruction: str, take_action_cnt: int
) -> np.ndarray:
    """Robotwin/model2robotwin_interface.py:211-233 `eval`: what it passes to `TASK_ENV.take_action`."""
    head_img = observation["observation"]["head_camera"]["rgb"]
    left_img = observation["observation"]["left_camera"]["rgb"]
    right_img = observation["observation"]["right_camera"]["rgb"]
    images = [head_img, left_img, right_img]
    state = observation["joint_action"]["vector"]
    example = {"lang": str(instruction), "image": images, "state": state}
    return model.step(example, step=take_action_cnt)
