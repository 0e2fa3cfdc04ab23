"""Benchmark of the inference server (prints a table; not a test).

(a) Per-step round trip on loopback: three 320x240 RGB cameras + 14 floats in, a 50x14 chunk out,
    no-op backend; p50/p99 against the real openpi policy server (openpi-server, serving a no-op
    numpy policy: scripts/bench/openpi_noop_policy.py) driven by openpi-client's WebsocketClientPolicy,
    in the same run.
(b) S concurrent sessions against a backend whose batch costs a flat `--batch-ms` whatever its size
    (as on a GPU that is not saturated): steps/s against S, and the ratio to the model's raw
    batched throughput, min(S, max_batch) / batch_ms.
(c) --lerobot (or --lerobot-only): a tiny random-weight policy with LIBERO features
    (scripts/lerobot_tiny.py; `--lerobot-policy` act, smolvla or xvla), sealed with the `lerobot`
    backend and served by an inference server run from `--lerobot-python` (.venv-lerobot), two
    256x256 cameras + the LIBERO state: steps/s at S=1 and S=`--lerobot-batch` concurrent sessions,
    against the same policy and processors called directly on batches of 1 and S in a
    `.venv-lerobot` process (no server), measured in alternating rounds. For xvla, which the backend
    calls once per row, the direct rows are both a batched call and one call per row.

    .venv/bin/pip install -e '.[bench]' && .venv/bin/python -m scripts.bench.inference
    make lerobot-venv && .venv/bin/python -m scripts.bench.inference --lerobot-only
    .venv/bin/python -m scripts.bench.inference --lerobot-only --lerobot-policy smolvla --lerobot-batch 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from openpi_client.websocket_client_policy import WebsocketClientPolicy

from evalfleet.local_fleet import policy_argv
from evalfleet.policy_api import tensors
from evalfleet.policy_api.aio_client import AsyncPolicyClient
from evalfleet.policy_api.client import PolicyClient
from evalfleet.processes import ServiceProcess, free_port
from evalfleet.v1 import policy_pb2
from inference_server.checkpoint import seal
from scripts.bench.openpi_noop_policy import openpi_server
from scripts.common.procstat import cpu_seconds
from scripts.common.stats import percentile
from scripts.common.tables import markdown

CAMERAS = ("head", "left", "right")
STATE_DIM, CHUNK, ACTION_DIM = 14, 50, 14


def settings(height: int, width: int, **extra: float) -> dict[str, Any]:
    return {
        "cameras": [{"name": n, "height": height, "width": width} for n in CAMERAS],
        "state": [{"name": "qpos", "length": STATE_DIM}],
        "action_dim": ACTION_DIM,
        "chunk_length": CHUNK,
        **extra,
    }


def observation_images(height: int, width: int) -> dict[str, npt.NDArray[np.uint8]]:
    rng = np.random.default_rng(0)
    return {n: rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for n in CAMERAS}


@contextmanager
def inference_server(root: Path, epoch: str, *extra: str) -> Iterator[str]:
    """A server for ``epoch`` under ``root`` that reports SERVING; its log beside ``root``.

    It logs at WARNING, so it prints no line to wait on: it is waited for on its health service.
    """
    port = free_port()
    argv = policy_argv(epoch, root, "--log-level", "WARNING", *extra, port=port)
    address = f"127.0.0.1:{port}"
    with ServiceProcess(argv, root.parent / f"inference-server-{epoch}.log").spawn() as server:
        with PolicyClient(address) as client:
            try:
                client.wait_until_serving(60)
            except Exception as exc:
                raise RuntimeError(f"{server.name} did not reach SERVING: {exc}\n{server.log_tail()}") from exc
        yield address


def percentiles(seconds: list[float]) -> tuple[float, float]:
    """p50 and p99 in ms, interpolated as BENCHMARKS.md's figures of this benchmark were."""
    ms = [value * 1000.0 for value in seconds]
    return percentile(ms, 50, "linear"), percentile(ms, 99, "linear")


def latency(address: str, url: str, steps: int, rounds: int, kind: str) -> dict[str, list[float]]:
    """Alternates one gRPC client (`sync` or `asyncio`) with openpi's websocket client in rounds, so
    that load from elsewhere on the machine falls on both alike; the first round is warmup. Run
    in its own process per kind: a grpc.aio channel in a process slows that process's sync calls."""
    images = observation_images(240, 320)
    # Arrays of floats go to the clients as they are: they read any sequence of floats.
    state = cast(Sequence[float], np.linspace(0, 1, STATE_DIM))
    episode = policy_pb2.EpisodeMeta(benchmark="bench", task="latency", instruction="do nothing")
    times: dict[str, list[float]] = {"grpc": [], "openpi": []}
    openpi = WebsocketClientPolicy(url)
    openpi_request = {"images": images, "state": state}

    def record(name: str, round_index: int, started: float) -> None:
        if round_index:
            times[name].append(time.perf_counter() - started)

    def openpi_round(round_index: int) -> None:
        for _ in range(steps):
            started = time.perf_counter()
            openpi.infer(openpi_request)
            record("openpi", round_index, started)

    if kind == "sync":
        with PolicyClient(address) as client:
            session = client.open_session(client.identity().digest, episode)
            for round_index in range(rounds + 1):
                for index in range(steps):
                    step = round_index * steps + index
                    started = time.perf_counter()
                    session.act(images, {"qpos": state}, step, 0 if step == 0 else 5)
                    record("grpc", round_index, started)
                openpi_round(round_index)
    else:

        async def measure() -> None:
            async with AsyncPolicyClient(address) as client:
                session = await client.open_session((await client.identity()).digest, episode)
                for round_index in range(rounds + 1):
                    for index in range(steps):
                        step = round_index * steps + index
                        started = time.perf_counter()
                        await session.act(images, {"qpos": state}, step, 0 if step == 0 else 5)
                        record("grpc", round_index, started)
                    openpi_round(round_index)  # blocks the loop: no gRPC call is in flight

        asyncio.run(measure())
    return times  # openpi's client has no close(); the pool's process ends after this task


def _session_worker(address: str, sessions: int, start_at: float, stop_at: float, height: int, width: int) -> int:
    """One client process driving `sessions` sessions as tasks of one asyncio loop (as a worker
    with several episodes in flight would); returns the steps done inside the window."""
    images = observation_images(height, width)

    async def run(client: AsyncPolicyClient, digest: str, index: int) -> int:
        done = 0
        async with await client.open_session(digest, policy_pb2.EpisodeMeta(episode_id=str(index))) as session:
            step = 0
            while time.time() < stop_at:
                qpos = cast(Sequence[float], np.full(STATE_DIM, index))  # an array, read as a sequence
                await session.act(images, {"qpos": qpos}, step, 0 if step == 0 else 1)
                done += start_at <= time.time() < stop_at
                step += 1
        return done

    async def main() -> int:
        async with AsyncPolicyClient(address) as client:
            digest = (await client.identity()).digest
            return sum(await asyncio.gather(*(run(client, digest, i) for i in range(sessions))))

    return asyncio.run(main())


def throughput(
    address: str, sessions: int, processes: int, seconds: float, height: int, width: int
) -> tuple[float, float]:
    """Steps/s of `sessions` concurrent sessions spread over client processes (like workers), and
    the mean batch size the server formed meanwhile."""
    with PolicyClient(address) as client:
        before = client.identity().load
    processes = min(processes, sessions)
    shares = [sessions // processes + (i < sessions % processes) for i in range(processes)]
    start_at = time.time() + 2.0  # sessions open and warm up before the window
    stop_at = start_at + seconds
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        steps = pool.starmap(_session_worker, [(address, n, start_at, stop_at, height, width) for n in shares])
    with PolicyClient(address) as client:
        after = client.identity().load
    mean_batch = (after.steps_served - before.steps_served) / max(1, after.batches_served - before.batches_served)
    return sum(steps) / seconds, mean_batch


LEROBOT_TINY = Path(__file__).resolve().parents[1] / "lerobot_tiny.py"
LIBERO_CAMERAS = ("agentview", "robot0_eye_in_hand")


def lerobot_observation(
    rng: np.random.Generator, camera: int, policy: str = "act"
) -> tuple[dict[str, npt.NDArray[np.uint8]], dict[str, npt.NDArray[np.float64]]]:
    """Upright LIBERO camera images and the state entries the lerobot backend reads (for xvla, the
    end effector's position and rotation matrix)."""
    images = {name: rng.integers(0, 256, (camera, camera, 3), dtype=np.uint8) for name in LIBERO_CAMERAS}
    if policy == "xvla":
        mat, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        return images, {"robot0_eef_pos": rng.normal(size=3), "robot0_eef_mat": mat.ravel()}
    quat = rng.normal(size=4)
    state = {
        "robot0_eef_pos": rng.normal(size=3),
        "robot0_eef_quat": quat / np.linalg.norm(quat),
        "robot0_gripper_qpos": rng.normal(size=2) * 0.04,
    }
    return images, state


def run_lerobot_python(python: Path, *args: str) -> str:
    done = subprocess.run([str(python), *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{python} {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def build_tiny(python: Path, root: Path, camera: int, policy_size: int, policy: str = "act") -> Path:
    """The tests' tiny `policy` (act, smolvla, xvla), built and saved by LeRobot, sealed with the
    `lerobot` backend's LIBERO settings for `camera`-pixel cameras (resized to `policy_size` by the
    backend)."""
    folder = root / policy
    argv = ("build", str(folder), "--policy", policy, "--size", str(policy_size))
    run_lerobot_python(python, str(LEROBOT_TINY), *argv)
    code = (
        "import json; from inference_server.backends.lerobot import libero_settings; "
        f"print(json.dumps(libero_settings({policy!r}, {camera})))"
    )
    settings = json.loads(run_lerobot_python(python, "-c", code).strip().splitlines()[-1])
    seal(folder, "lerobot", settings)
    return folder


@contextmanager
def lerobot_server(
    python: Path, root: Path, threads: int, *extra: str, epoch: str = "act"
) -> Iterator[tuple[str, int]]:
    """An inference server run from the lerobot virtualenv with `threads` torch threads, waited for
    on its health service; yields its address and pid."""
    port = free_port()
    argv = [str(python), *policy_argv(epoch, root, "--log-level", "WARNING", *extra, port=port)[1:]]
    address = f"127.0.0.1:{port}"
    env = {"OMP_NUM_THREADS": str(threads)}
    with ServiceProcess(argv, root.parent / "inference-server-lerobot.log", env).spawn() as server:
        with PolicyClient(address) as client:
            try:
                client.wait_until_serving(300)
            except Exception as exc:
                raise RuntimeError(f"{server.name} did not reach SERVING: {exc}\n{server.log_tail()}") from exc
        yield address, server.pid


@dataclass
class Served:
    """Steps done inside the window, and per step what the server reported for its batch."""

    steps: int = 0
    batch_sizes: int = 0
    model_ms: float = 0.0
    queue_ms: float = 0.0

    def add(self, other: Served) -> None:
        self.steps += other.steps
        self.batch_sizes += other.batch_sizes
        self.model_ms += other.model_ms
        self.queue_ms += other.queue_ms


def _lerobot_session_worker(
    address: str,
    sessions: int,
    first: int,
    start_at: float,
    stop_at: float,
    camera: int,
    chunk: tuple[int, int],
    policy: str = "act",
) -> Served:
    """One client process driving `sessions` LIBERO sessions as tasks of one asyncio loop. The
    replies are read whole (the session's `_exchange`, as the backend's test does) for the batch
    size and model time the server reports with each chunk."""

    async def run(client: AsyncPolicyClient, digest: str, index: int) -> Served:
        images, vectors = lerobot_observation(np.random.default_rng(index), camera, policy)
        state = cast(Mapping[str, Sequence[float]], vectors)  # arrays, read as sequences of floats
        meta = policy_pb2.EpisodeMeta(
            benchmark="libero", episode_id=str(index), instruction=f"put object {index} in the basket"
        )
        served = Served()
        async with await client.open_session(digest, meta) as session:
            step = 0
            while time.time() < stop_at:
                request = tensors.observation_request(step, 0 if step == 0 else chunk[0], images, state)
                reply = await session._exchange(request)
                actions = tensors.decode(reply.chunk.actions, "chunk.actions")
                if actions.shape != chunk or not np.isfinite(actions).all():
                    raise RuntimeError(f"session {index} step {step}: a {actions.shape} chunk, expected {chunk}")
                if start_at <= time.time() < stop_at:
                    served.add(Served(1, reply.chunk.batch_size, reply.chunk.model_ms, reply.chunk.queue_ms))
                step += 1
        return served

    async def main() -> Served:
        total = Served()
        async with AsyncPolicyClient(address) as client:
            digest = (await client.identity()).digest
            for served in await asyncio.gather(*(run(client, digest, first + i) for i in range(sessions))):
                total.add(served)
        return total

    return asyncio.run(main())


def lerobot_served(
    address: str,
    server_pid: int,
    sessions: int,
    processes: int,
    seconds: float,
    camera: int,
    chunk: tuple[int, int],
    policy: str = "act",
) -> tuple[Served, float]:
    """`sessions` concurrent sessions over client processes for a `seconds` window (after 3 s to
    open and warm up); what they got, and the server's CPU seconds meanwhile."""
    processes = min(processes, sessions)
    shares = [sessions // processes + (i < sessions % processes) for i in range(processes)]
    firsts = [sum(shares[:i]) for i in range(processes)]
    start_at = time.time() + 3.0
    stop_at = start_at + seconds
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pending = pool.starmap_async(
            _lerobot_session_worker,
            [
                (address, n, first, start_at, stop_at, camera, chunk, policy)
                for n, first in zip(shares, firsts, strict=True)
            ],
        )
        time.sleep(max(0.0, start_at - time.time()))
        cpu_before = cpu_seconds(server_pid)
        time.sleep(max(0.0, stop_at - time.time()))
        cpu = cpu_seconds(server_pid) - cpu_before
        total = Served()
        for served in pending.get():
            total.add(served)
    return total, cpu


class DirectLeRobot:
    """The policy and its processors called directly, no server: a `lerobot_tiny.py throughput`
    process of the lerobot virtualenv with `threads` torch threads, kept loaded between measurements."""

    def __init__(self, python: Path, folder: Path, camera: int, threads: int, rows: bool = False) -> None:
        argv = [str(python), str(LEROBOT_TINY), "throughput", str(folder), "--camera", str(camera)]
        argv += ["--rows"] if rows else []
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._read(lambda line: line.strip() == "ready")

    def _read(self, accept: Callable[[str], bool]) -> str:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if accept(line):
                return line
        raise RuntimeError(f"lerobot_tiny.py throughput exited {self.process.wait()}")

    def measure(self, batch: int, seconds: float) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{batch} {seconds}\n")
        self.process.stdin.flush()
        reply: dict[str, Any] = json.loads(self._read(lambda line: line.startswith("{")))
        if reply["chunk_shape"][0] != batch:
            raise RuntimeError(f"a direct batch of {batch} answered {reply['chunk_shape']}")
        return reply

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


POLICY_TITLES = {
    "act": "ACT (random weights, ResNet-18 backbone)",
    "smolvla": "SmolVLA (random weights, LeRobot's default action expert over a 4-layer 64-wide SmolVLM2-shaped VLM)",
    "xvla": "X-VLA (random weights, toy-width Florence-2 and action head, 10 denoising steps)",
}


def lerobot_section(args: argparse.Namespace) -> None:
    """(c): the served tiny policy at S=1 and S=batch against direct batches of 1 and `batch`, in
    alternating rounds so that load from elsewhere on the machine falls on each alike."""
    python = Path(args.lerobot_python).absolute()
    if not python.exists():
        sys.exit(f"bench_inference: {python} does not exist (make lerobot-venv, or pass --lerobot-python)")
    batch, camera, seconds, policy = args.lerobot_batch, args.lerobot_camera, args.lerobot_seconds, args.lerobot_policy
    counts = (1, batch)
    # The direct ways of calling the policy: a batched call, and for xvla (served a row at a time)
    # also one call per row of the batch.
    modes = ("batched", "per row") if policy == "xvla" else ("batched",)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "checkpoints"
        folder = build_tiny(python, root, camera, args.lerobot_policy_size, policy)
        config = json.loads((folder / "config.json").read_text())
        action_dim = 7 if policy == "xvla" else config["output_features"]["action"]["shape"][0]  # env postprocessor
        chunk = (config["chunk_size"], action_dim)
        served = {s: Served() for s in counts}
        server_cpu = dict.fromkeys(counts, 0.0)
        direct: dict[tuple[str, int], list[dict[str, Any]]] = {(m, b): [] for m in modes for b in counts}
        extra: tuple[str, ...] = ("--max-batch", str(batch), "--max-sessions", str(batch + 8))
        extra += ("--batch-timeout-ms", str(args.lerobot_batch_timeout_ms))
        processes = {m: DirectLeRobot(python, folder, camera, args.lerobot_threads, m == "per row") for m in modes}
        try:
            with lerobot_server(python, root, args.lerobot_threads, *extra, epoch=policy) as (address, pid):
                for _ in range(args.lerobot_rounds):
                    for m in modes:
                        for b in counts:
                            direct[m, b].append(processes[m].measure(b, seconds))
                    for s in counts:
                        got, cpu = lerobot_served(
                            address, pid, s, args.lerobot_client_processes, seconds, camera, chunk, policy
                        )
                        served[s].add(got)
                        server_cpu[s] += cpu
        finally:
            for process in processes.values():
                process.close()
    window = seconds * args.lerobot_rounds

    def direct_ms(key: tuple[str, int], stage: str) -> float:
        return float(np.mean([r["ms"][stage] for r in direct[key]]))

    stages = ("inputs", "preprocessor", "policy", "postprocessor")
    direct_rate = {
        key: key[1] * len(runs) / sum(sum(r["ms"].values()) / 1000.0 for r in runs) for key, runs in direct.items()
    }
    rate = {s: served[s].steps / window for s in counts}
    print(
        f"(c) LeRobot tiny {POLICY_TITLES[policy]}, {args.lerobot_policy_size}x{args.lerobot_policy_size} policy "
        f"input, lerobot backend served from {args.lerobot_python}, 2 x {camera}x{camera} cameras + LIBERO state, "
        f"CPU, {args.lerobot_threads} torch thread(s) in the server and the direct process, max batch {batch}, "
        f"batch timeout {args.lerobot_batch_timeout_ms:g} ms, {args.lerobot_client_processes} client processes; "
        f"{args.lerobot_rounds} alternating rounds of {seconds:g} s per row"
    )
    rows = []
    for s in counts:
        got = served[s]
        steps = max(1, got.steps)
        rows.append(
            [
                f"served, S={s}", f"{rate[s]:.1f}", f"{rate[s] / rate[1]:.1f}", f"{got.batch_sizes / steps:.1f}",
                f"{got.model_ms / steps:.0f}", f"{got.queue_ms / steps:.1f}", f"{100 * server_cpu[s] / window:.0f}",
            ]
        )  # fmt: skip
    base = direct_rate[modes[-1], 1]
    for m in modes:
        for b in counts:
            total = sum(direct_ms((m, b), stage) for stage in stages)
            scale = direct_rate[m, b] / base
            rows.append([f"direct {m}, batch {b}", f"{direct_rate[m, b]:.1f}", f"{scale:.1f}", f"{b}", f"{total:.0f}"])
            rows[-1] += ["", ""]
    header = ["row", "steps/s", "x S=1", "mean batch", "ms per batch (model)", "queue ms / step", "server CPU % core"]
    print(markdown(header, rows))
    print()
    print("direct, ms per batch by stage (inputs: uint8 HWC -> float CHW, resize, the env's LIBERO processor):")
    rows = []
    for m in modes:
        for b in counts:
            ms = [direct_ms((m, b), stage) for stage in stages]
            rows.append([f"{m}, {b}", *(f"{v:.1f}" for v in ms), f"{sum(ms):.1f}", f"{sum(ms) / b:.1f}"])
    print(markdown(["call, batch", *stages, "total", "ms per step"], rows))
    print()
    served_mode = modes[-1]  # what the backend does: per row for xvla, batched for the others
    ratio = rate[batch] / rate[1]
    share, ceiling = rate[batch] / direct_rate[served_mode, batch], direct_rate["batched", batch] / base
    print(
        f"S={batch} / S=1: {ratio:.1f}x (direct batched batch {batch} / direct {served_mode} batch 1, the most "
        f"batching can give this model here: {ceiling:.1f}x)"
    )
    print(f"S={batch} of direct {served_mode} batch {batch}: {share:.0%}")
    if policy == "xvla":
        per_row = direct_rate["per row", batch] / direct_rate["batched", batch]
        print(f"xvla, direct per-row calls / one batched call at batch {batch}: {per_row:.2f}x the steps/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sessions", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--batch-ms", type=float, default=20.0)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument("--throughput-image", default="240x320", help="HxW of the three cameras in (b)")
    parser.add_argument("--lerobot", action="store_true", help="also run (c), the LeRobot tiny policy rows")
    parser.add_argument("--lerobot-policy", choices=tuple(POLICY_TITLES), default="act", help="the tiny policy of (c)")
    parser.add_argument("--lerobot-only", action="store_true", help="run (c) only")
    parser.add_argument("--lerobot-python", default=".venv-lerobot/bin/python", help="the lerobot virtualenv's python")
    parser.add_argument("--lerobot-batch", type=int, default=16, help="S and the direct batch compared with S=1")
    parser.add_argument("--lerobot-camera", type=int, default=256, help="side of the two LIBERO cameras in (c)")
    parser.add_argument("--lerobot-policy-size", type=int, default=64, help="side of the policy's image input")
    parser.add_argument("--lerobot-seconds", type=float, default=6.0, help="window per row per round in (c)")
    parser.add_argument("--lerobot-rounds", type=int, default=2)
    parser.add_argument("--lerobot-client-processes", type=int, default=2)
    parser.add_argument("--lerobot-batch-timeout-ms", type=float, default=5.0, help="the server's --batch-timeout-ms")
    parser.add_argument(
        "--lerobot-threads", type=int, default=1, help="OMP_NUM_THREADS of the server and the direct process"
    )
    args = parser.parse_args()
    if args.lerobot_only:
        lerobot_section(args)
        return
    height, width = (int(v) for v in args.throughput_image.split("x"))

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "checkpoints"
        (root / "noop").mkdir(parents=True)
        seal(root / "noop", "noop", settings(240, 320))
        (root / "flat").mkdir()
        seal(root / "flat", "flat-cost", settings(height, width, batch_ms=args.batch_ms))

        steps = args.steps // args.rounds
        openpi_log = Path(tmp) / "openpi-server.log"
        with inference_server(root, "noop") as address, openpi_server(openpi_log, CHUNK, ACTION_DIM) as url:
            with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
                results = {
                    kind: pool.apply(latency, (address, url, steps, args.rounds, kind)) for kind in ("sync", "asyncio")
                }
        print(
            "(a) per-step round trip, loopback, 3 x 320x240x3 uint8 + 14 floats -> 50x14 "
            f"float32, no-op backend; {steps * args.rounds} steps per client, interleaved with "
            f"openpi-client -> openpi-server 0.1.0 (no-op numpy policy) in {args.rounds} rounds in the same process"
        )
        rows = []
        for kind, label in (("sync", "PolicyClient (sync)"), ("asyncio", "AsyncPolicyClient")):
            grpc_p50, grpc_p99 = percentiles(results[kind]["grpc"])
            openpi_p50, openpi_p99 = percentiles(results[kind]["openpi"])
            rows.append([label, f"{grpc_p50:.2f}", f"{grpc_p99:.2f}", f"{openpi_p50:.2f}", f"{openpi_p99:.2f}"])
        print(markdown(["gRPC client", "gRPC p50 ms", "gRPC p99 ms", "openpi p50 ms", "openpi p99 ms"], rows))
        print()

        counts = [int(s) for s in args.sessions.split(",")]
        rates = {}
        with inference_server(
            root, "flat", "--max-batch", str(args.max_batch), "--max-sessions", str(max(counts) + 8)
        ) as address:
            for sessions in counts:
                rates[sessions] = throughput(address, sessions, args.client_processes, args.seconds, height, width)
        print(
            f"(b) concurrent sessions, backend costs {args.batch_ms:g} ms per batch of any size, "
            f"max batch {args.max_batch}, batch timeout 5 ms, cameras 3 x {height}x{width}, "
            f"{args.client_processes} client processes (AsyncPolicyClient)"
        )
        first = rates[counts[0]][0]
        rows = []
        for sessions, (rate, mean_batch) in rates.items():
            raw = min(sessions, args.max_batch) / (args.batch_ms / 1000.0)
            rows.append(
                [
                    f"{sessions}",
                    f"{rate:.0f}",
                    f"{rate / first:.1f}",
                    f"{mean_batch:.1f}",
                    f"{raw:.0f}",
                    f"{rate / raw:.0%}",
                ]
            )
        print(markdown(["sessions S", "steps/s", "x S=1", "mean batch", "raw batched steps/s", "of raw"], rows))
    if args.lerobot:
        print()
        lerobot_section(args)


if __name__ == "__main__":
    main()
