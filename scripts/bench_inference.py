"""Benchmark of the inference server (prints a table; not a test).

(a) Per-step round trip on loopback: three 320x240 RGB cameras + 14 floats in, a 50x14 chunk out,
    no-op backend; p50/p99 against an openpi-style websocket + msgpack server in the same run.
(b) S concurrent sessions against a backend whose batch costs a flat `--batch-ms` whatever its size
    (as on a GPU that is not saturated): steps/s against S, and the ratio to the model's raw
    batched throughput, min(S, max_batch) / batch_ms.

    .venv/bin/pip install -e '.[bench]' && .venv/bin/python scripts/bench_inference.py
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _ws_baseline import WebsocketClient

from evalfleet.local_fleet import policy_argv
from evalfleet.policy_api.aio_client import AsyncPolicyClient
from evalfleet.policy_api.client import PolicyClient
from evalfleet.processes import ServiceProcess, free_port
from evalfleet.v1 import policy_pb2
from inference_server.checkpoint import seal

CAMERAS = ("head", "left", "right")
STATE_DIM, CHUNK, ACTION_DIM = 14, 50, 14


def settings(height: int, width: int, **extra: float) -> dict:
    return {
        "cameras": [{"name": n, "height": height, "width": width} for n in CAMERAS],
        "state": [{"name": "qpos", "length": STATE_DIM}],
        "action_dim": ACTION_DIM,
        "chunk_length": CHUNK,
        **extra,
    }


def observation_images(height: int, width: int) -> dict[str, np.ndarray]:
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


@contextmanager
def websocket_server() -> Iterator[int]:
    script = Path(__file__).resolve().parent / "_ws_baseline.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "--chunk-length", str(CHUNK), "--action-dim", str(ACTION_DIM)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield int(process.stdout.readline())
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.asarray(seconds) * 1000.0
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def latency(address: str, port: int, steps: int, rounds: int, kind: str) -> dict[str, list[float]]:
    """Alternates one gRPC client (`sync` or `asyncio`) with the websocket client in rounds, so
    that load from elsewhere on the machine falls on both alike; the first round is warmup. Run
    in its own process per kind: a grpc.aio channel in a process slows that process's sync calls."""
    images = observation_images(240, 320)
    state = np.linspace(0, 1, STATE_DIM)
    episode = policy_pb2.EpisodeMeta(benchmark="bench", task="latency", instruction="do nothing")
    times: dict[str, list[float]] = {"grpc": [], "websocket": []}
    websocket = WebsocketClient(port)

    def record(name: str, round_index: int, started: float) -> None:
        if round_index:
            times[name].append(time.perf_counter() - started)

    def websocket_round(round_index: int) -> None:
        for _ in range(steps):
            started = time.perf_counter()
            websocket.act(images, state)
            record("websocket", round_index, started)

    if kind == "sync":
        with PolicyClient(address) as client:
            session = client.open_session(client.identity().digest, episode)
            for round_index in range(rounds + 1):
                for index in range(steps):
                    step = round_index * steps + index
                    started = time.perf_counter()
                    session.act(images, {"qpos": state}, step, 0 if step == 0 else 5)
                    record("grpc", round_index, started)
                websocket_round(round_index)
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
                    websocket_round(round_index)  # blocks the loop: no gRPC call is in flight

        asyncio.run(measure())
    websocket.close()
    return times


def _session_worker(address: str, sessions: int, start_at: float, stop_at: float, height: int, width: int) -> int:
    """One client process driving `sessions` sessions as tasks of one asyncio loop (as a worker
    with several episodes in flight would); returns the steps done inside the window."""
    images = observation_images(height, width)

    async def run(client: AsyncPolicyClient, digest: str, index: int) -> int:
        done = 0
        async with await client.open_session(digest, policy_pb2.EpisodeMeta(episode_id=str(index))) as session:
            step = 0
            while time.time() < stop_at:
                await session.act(images, {"qpos": np.full(STATE_DIM, index)}, step, 0 if step == 0 else 1)
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
    args = parser.parse_args()
    height, width = (int(v) for v in args.throughput_image.split("x"))

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "checkpoints"
        (root / "noop").mkdir(parents=True)
        seal(root / "noop", "noop", settings(240, 320))
        (root / "flat").mkdir()
        seal(root / "flat", "flat-cost", settings(height, width, batch_ms=args.batch_ms))

        steps = args.steps // args.rounds
        with inference_server(root, "noop") as address, websocket_server() as port:
            with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
                results = {
                    kind: pool.apply(latency, (address, port, steps, args.rounds, kind)) for kind in ("sync", "asyncio")
                }
        print(
            "(a) per-step round trip, loopback, 3 x 320x240x3 uint8 + 14 floats -> 50x14 "
            f"float32, no-op backend; {steps * args.rounds} steps per client, interleaved with "
            f"the websocket baseline in {args.rounds} rounds in the same process"
        )
        print("| gRPC client | gRPC p50 ms | gRPC p99 ms | websocket p50 ms | websocket p99 ms |")
        print("|---|---|---|---|---|")
        for kind, label in (("sync", "PolicyClient (sync)"), ("asyncio", "AsyncPolicyClient")):
            grpc_p50, grpc_p99 = percentiles(results[kind]["grpc"])
            ws_p50, ws_p99 = percentiles(results[kind]["websocket"])
            print(f"| {label} | {grpc_p50:.2f} | {grpc_p99:.2f} | {ws_p50:.2f} | {ws_p99:.2f} |")
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
        print("| sessions S | steps/s | x S=1 | mean batch | raw batched steps/s | of raw |")
        print("|---|---|---|---|---|---|")
        first = rates[counts[0]][0]
        for sessions, (rate, mean_batch) in rates.items():
            raw = min(sessions, args.max_batch) / (args.batch_ms / 1000.0)
            print(f"| {sessions} | {rate:.0f} | {rate / first:.1f} | {mean_batch:.1f} | {raw:.0f} | {rate / raw:.0%} |")


if __name__ == "__main__":
    main()
