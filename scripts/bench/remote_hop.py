"""Benchmark: what the extra hop through evalfleet costs a policy served by openpi's server.

One openpi policy server (openpi-server 0.1.0 serving the no-op numpy policy of
`scripts/bench/openpi_noop_policy.py`) is reached two ways in the same run, alternating in timed rounds so that
load from elsewhere on the machine falls on both alike (the first round is warm-up):

- direct: openpi-client's `WebsocketClientPolicy` -> openpi-server, with the request openpi's
  LIBERO example client builds (two uint8 images resized with padding to 224x224, the 8-D state:
  end-effector position, its rotation as an axis-angle, the gripper's two joints; the prompt);
- evalfleet: `PolicyClient` (one gRPC session per episode) -> an evalfleet inference server with the
  `remote` backend (dialect openpi, openpi's LIBERO mapping, one connection per session) ->
  openpi-server. The renderer worker's view: LIBERO's camera and state names in, a chunk out.

The cameras are `--camera` pixels square: at 224 (the default) openpi-client's `resize_with_pad`
returns them as they are on both paths; at 256 (LIBERO's default) both paths resize, the direct
client before sending and the inference server's mapping after receiving, and the script prints
what resizing two images costs here. With `--sessions S`, S client processes each drive one
session (and, in the direct rounds, one openpi connection) at once; the server's pool has S
connections. openpi's server answers one request at a time, so S > 1 measures queueing as well.

Per path: p50/p90/p99 ms per step, and for evalfleet the server's own split: queue ms (waiting in
the batcher) and model ms (from the batch's hand-off to the model thread until its chunk is back on
the event loop: the `remote` backend's mapping, its pool thread and the round trip to openpi-server).
Every process inherits this script's environment, so glibc's MALLOC_* tunables set on the command
line apply to both paths alike (BENCHMARKS.md).

    .venv/bin/pip install -e '.[bench]' && .venv/bin/python -m scripts.bench.remote_hop [--sessions 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
from openpi_client import image_tools
from openpi_client.websocket_client_policy import WebsocketClientPolicy

from evalfleet.local_fleet import LocalFleet, policy_argv
from evalfleet.policy_api import tensors
from evalfleet.policy_api.client import PolicyClient
from evalfleet.v1 import policy_pb2
from inference_server.backends.remote.mapping import robosuite_axisangle
from inference_server.checkpoint import seal
from scripts.bench.openpi_noop_policy import OPENPI_NOOP_POLICY, READY
from scripts.common.stats import percentile
from scripts.common.tables import markdown

CAMERAS = ("agentview", "robot0_eye_in_hand")
STATE = {"robot0_eef_pos": 3, "robot0_eef_quat": 4, "robot0_gripper_qpos": 2}
OPENPI_SIZE = 224
REMOTE_CHUNK, CHUNK_LENGTH, ACTION_DIM = 10, 5, 7  # pi0.5 LIBERO answers 10 actions; openpi replans every 5
INSTRUCTION = "put both the alphabet soup and the tomato sauce in the basket"
PATHS = ("direct", "evalfleet")


def remote_settings(url: str, camera: int, connections: int) -> dict[str, object]:
    """openpi's LIBERO client, as settings of the `remote` backend (docs/remote.md)."""
    return {
        "url": url,
        "dialect": "openpi",
        "connections": connections,
        "reply_timeout_s": 30,
        "load_timeout_s": 60,
        "cameras": [{"name": name, "height": camera, "width": camera} for name in CAMERAS],
        "state": [{"name": name, "length": length} for name, length in STATE.items()],
        "action_dim": ACTION_DIM,
        "chunk_length": CHUNK_LENGTH,
        "request": [
            {"key": "observation/image", "camera": CAMERAS[0], "resize_with_pad": [OPENPI_SIZE, OPENPI_SIZE]},
            {"key": "observation/wrist_image", "camera": CAMERAS[1], "resize_with_pad": [OPENPI_SIZE, OPENPI_SIZE]},
            {
                "key": "observation/state",
                "state": [
                    "robot0_eef_pos",
                    {"name": "robot0_eef_quat", "as": "axisangle_robosuite"},
                    "robot0_gripper_qpos",
                ],
            },
            {"key": "prompt", "instruction": True},
        ],
    }


def observation(
    rng: np.random.Generator, camera: int
) -> tuple[dict[str, npt.NDArray[np.uint8]], dict[str, npt.NDArray[np.float64]]]:
    """LIBERO-style camera images and state, as the renderer worker sends them."""
    images = {name: rng.integers(0, 256, (camera, camera, 3), dtype=np.uint8) for name in CAMERAS}
    quat = rng.normal(size=4)
    state = {
        "robot0_eef_pos": rng.normal(size=3),
        "robot0_eef_quat": quat / np.linalg.norm(quat),
        "robot0_gripper_qpos": rng.normal(size=2) * 0.04,
    }
    return images, state


def openpi_request(
    images: dict[str, npt.NDArray[np.uint8]], state: dict[str, npt.NDArray[np.float64]]
) -> dict[str, object]:
    """What openpi's LIBERO example client sends for one step (examples/libero/main.py)."""
    return {
        "observation/image": image_tools.convert_to_uint8(
            image_tools.resize_with_pad(images[CAMERAS[0]], OPENPI_SIZE, OPENPI_SIZE)
        ),
        "observation/wrist_image": image_tools.convert_to_uint8(
            image_tools.resize_with_pad(images[CAMERAS[1]], OPENPI_SIZE, OPENPI_SIZE)
        ),
        "observation/state": np.concatenate(
            (state["robot0_eef_pos"], robosuite_axisangle(state["robot0_eef_quat"]), state["robot0_gripper_qpos"])
        ),
        "prompt": INSTRUCTION,
    }


@dataclass
class Measured:
    """Per path, the seconds of each step inside a measured round; for evalfleet the server's split."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: {path: [] for path in PATHS})
    queue_ms: list[float] = field(default_factory=list)
    model_ms: list[float] = field(default_factory=list)

    def add(self, other: Measured) -> None:
        for path in PATHS:
            self.seconds[path] += other.seconds[path]
        self.queue_ms += other.queue_ms
        self.model_ms += other.model_ms


def _client(
    address: str, url: str, index: int, camera: int, episode_steps: int, rounds: list[tuple[str, float, float]]
) -> Measured:
    """One client process: both clients connected up front, then each round's path from its start
    to its stop time (the same wall-clock rounds in every process). A session lasts `episode_steps`
    steps, as an episode would (the server's history grows with the session)."""
    rng = np.random.default_rng(index)
    images, state = observation(rng, camera)
    wire_state = cast(Mapping[str, Sequence[float]], state)  # arrays, read as sequences of floats
    measured = Measured()
    openpi = WebsocketClientPolicy(url)
    with PolicyClient(address) as client:
        digest = client.identity().digest
        session, step = None, 0
        for number, (path, start_at, stop_at) in enumerate(rounds):
            time.sleep(max(0.0, start_at - time.time()))
            while time.time() < stop_at:
                if path == "direct":
                    started = time.perf_counter()
                    reply = openpi.infer(openpi_request(images, state))
                    elapsed = time.perf_counter() - started
                    if reply["actions"].shape != (REMOTE_CHUNK, ACTION_DIM):
                        raise RuntimeError(f"openpi-server answered actions of shape {reply['actions'].shape}")
                else:
                    if session is None or step == episode_steps:
                        if session is not None:
                            session.close()
                        meta = policy_pb2.EpisodeMeta(
                            benchmark="libero", episode_id=f"{index}", instruction=INSTRUCTION
                        )
                        session, step = client.open_session(digest, meta), 0
                    started = time.perf_counter()
                    request = tensors.observation_request(step, 0 if step == 0 else CHUNK_LENGTH, images, wire_state)
                    answer = session._exchange(request).chunk  # as act(), keeping the server's timings
                    actions = tensors.decode(answer.actions, "chunk.actions")
                    elapsed = time.perf_counter() - started
                    if actions.shape != (CHUNK_LENGTH, ACTION_DIM):
                        raise RuntimeError(f"the inference server answered a chunk of shape {actions.shape}")
                    step += 1
                    if number >= len(PATHS):
                        measured.queue_ms.append(answer.queue_ms)
                        measured.model_ms.append(answer.model_ms)
                if number >= len(PATHS):  # the first round of each path is warm-up
                    measured.seconds[path].append(elapsed)
        if session is not None:
            session.close()
    return measured


def resize_ms(camera: int, repeats: int = 300) -> float:
    """What resizing the two cameras with padding to 224x224 costs here per step (median, ms)."""
    images, _ = observation(np.random.default_rng(0), camera)
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        for image in images.values():
            image_tools.resize_with_pad(image, OPENPI_SIZE, OPENPI_SIZE)
        seconds.append(time.perf_counter() - started)
    return float(np.median(seconds)) * 1000.0


def quantiles(values: list[float], scale: float = 1.0) -> tuple[float, float, float]:
    """p50, p90 and p99 of ``values`` x ``scale``, interpolated as BENCHMARKS.md's figures of this
    benchmark were."""
    scaled = [value * scale for value in values]
    p50, p90, p99 = (percentile(scaled, q, "linear") for q in (50, 90, 99))
    return p50, p90, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1, help="concurrent sessions (client processes)")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds per path, after a warm-up round each")
    parser.add_argument("--round-seconds", type=float, default=1.5)
    parser.add_argument("--camera", type=int, default=OPENPI_SIZE, help="side of the two LIBERO cameras")
    parser.add_argument("--episode-steps", type=int, default=100, help="steps per evalfleet session")
    parser.add_argument("--batch-timeout-ms", type=float, default=5.0, help="the inference server's flag")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, LocalFleet(Path(tmp)) as fleet:
        openpi = fleet.start(
            "openpi-server",
            [*OPENPI_NOOP_POLICY, "--chunk", str(REMOTE_CHUNK), "--action-dim", str(ACTION_DIM)],
            ready=READY,
        )
        url = f"ws://{openpi.address}"
        root = Path(tmp) / "checkpoints"
        (root / "pi05_libero").mkdir(parents=True)
        seal(root / "pi05_libero", "remote", remote_settings(url, args.camera, args.sessions))
        server = fleet.start(
            "inference-server",
            # --port 0 (the last --port wins): the server binds a free port itself and prints it. A port
            # picked beforehand can be picked by another process meanwhile, and gRPC servers share a
            # port (SO_REUSEPORT), so the clients could land on someone else's server.
            policy_argv("pi05_libero", root, "--batch-timeout-ms", str(args.batch_timeout_ms), "--port", "0"),
        )

        start_at = time.time() + 3.0  # the clients start, import and connect meanwhile
        rounds = []
        for number in range(2 * (args.rounds + 1)):
            begin = start_at + number * (args.round_seconds + 0.2)
            rounds.append((PATHS[number % 2], begin, begin + args.round_seconds))
        measured = Measured()
        jobs = [(server.address, url, i, args.camera, args.episode_steps, rounds) for i in range(args.sessions)]
        with multiprocessing.get_context("spawn").Pool(args.sessions) as pool:
            for result in pool.starmap(_client, jobs):
                measured.add(result)

    window = args.rounds * args.round_seconds
    print(
        f"Extra hop through evalfleet, {args.sessions} session(s): 2 x {args.camera}x{args.camera} uint8 cameras + "
        f"LIBERO state -> openpi-server 0.1.0 (no-op numpy policy, {REMOTE_CHUNK}x{ACTION_DIM} actions); "
        f"{args.rounds} rounds of {args.round_seconds:g} s per path, alternating"
    )
    stats = {}
    rows = []
    for path, label in (
        ("direct", "openpi-client -> openpi-server"),
        ("evalfleet", "PolicyClient -> evalfleet remote -> openpi-server"),
    ):
        stats[path] = quantiles(measured.seconds[path], 1000.0)
        count = len(measured.seconds[path])
        p50, p90, p99 = stats[path]
        rows.append([label, f"{count}", f"{count / window:.0f}", f"{p50:.2f}", f"{p90:.2f}", f"{p99:.2f}"])
    print(markdown(["path", "steps", "steps/s", "p50 ms", "p90 ms", "p99 ms"], rows))
    difference = stats["evalfleet"][0] - stats["direct"][0]
    ratio = stats["evalfleet"][0] / stats["direct"][0]
    print(
        f"p50 difference: +{difference:.2f} ms (target <= +1.5 ms: {'met' if difference <= 1.5 else 'not met'}); "
        f"ratio {ratio:.2f}x"
    )
    queue, model = quantiles(measured.queue_ms)[0], quantiles(measured.model_ms)[0]
    rest = stats["evalfleet"][0] - queue - model
    print(
        f"evalfleet server's split, p50: queue {queue:.2f} ms (waiting in the batcher), model {model:.2f} ms "
        "(the batch handed to the model thread, the remote backend's act: mapping, a pool thread, the round trip "
        f"to openpi-server; the chunk back on the event loop); the rest, about {rest:.2f} ms, is"
        " the client, gRPC both ways, the codec and the server's event loop"
    )
    if args.camera != OPENPI_SIZE:
        print(
            f"resize_with_pad of the two {args.camera}x{args.camera} cameras to 224x224 costs "
            f"{resize_ms(args.camera):.2f} ms per step here, paid on both paths"
        )


if __name__ == "__main__":
    main()
