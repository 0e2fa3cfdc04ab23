"""GPU rendering check: each GPU's EGL device, then real LIBERO and RoboTwin episodes rendered on it.

On a machine with NVIDIA GPUs (a few minutes; figures go to BENCHMARKS.md):

1. for every GPU NVML lists, the EGL device the worker would render on (by the GPU's UUID), what EGL
   says of it (device UUID, CUDA device's UUID), and a check that no two GPUs got the same EGL device;
2. a real evaluation of one LIBERO trial on the first GPU (or --gpu-uuid): `scheduler manifest build`
   (rendering with the GPU's environment too), a scheduler, an inference server with the
   `deterministic` reference policy reading both cameras, and one `renderer-worker --gpu-uuid`, as
   processes (evalfleet.local_fleet); then per-step and per-episode time from the episode's log and
   the scheduler's summary;
3. with ``--robotwin-root``, one real RoboTwin episode on the same GPU: ``stack_blocks_two``'s first
   accepted seed, scanned with RoboTwin's own expert by ``--robotwin-python`` (a virtualenv with the
   official GPU stack, SAPIEN 3.0.0b1 and CuRobo; where CuRobo is absent it is the CPU stack, and
   the report says which), the expert's joint rows recorded, then ``scheduler run`` of a spec that
   scans the task again and plays the rows through the `replay` backend on one worker rendering on
   the GPU; the report names the stack, the episode's success and steps, and whether the run's scan
   equals the first.

    .venv/bin/python scripts/gpu_check.py [--suite libero_spatial] [--task 0] [--camera-size 256]
        [--max-steps 0] [--chunk 1] [--gpu-uuid GPU-...] [--robotwin-root DIR [--robotwin-python PY]]

Without an NVIDIA GPU it prints one line on stderr and exits 2 at once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.robotwin.root import RootError, open_root  # light: reads the checkout's files only
from renderer_worker import device, egl  # light: no gRPC, no simulator

REPO = Path(__file__).resolve().parents[1]

EXIT_NO_GPU = 2
ROBOTWIN_TASK = "stack_blocks_two"  # one of the block tasks whose assets the CPU stack has too


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=REPO / "runs" / "gpu_check")
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--camera-size", type=int, default=256, help="both cameras, height and width")
    parser.add_argument("--max-steps", type=int, default=0, help="policy step limit (0: the suite's standard)")
    parser.add_argument("--chunk", type=int, default=1, help="actions per policy call")
    parser.add_argument("--gpu-uuid", default="", help="render on this GPU (default: the first NVML lists)")
    parser.add_argument("--timeout", type=float, default=420.0, help="give up on the episode after this many seconds")
    parser.add_argument(
        "--cpu", action="store_true", help="no GPU check; the same episode with `renderer-worker --cpu` (a baseline)"
    )
    parser.add_argument("--robotwin-root", type=Path, help="a RoboTwin checkout at c3ddfa8: run its episode too")
    parser.add_argument(
        "--robotwin-python",
        type=Path,
        default=REPO / ".venv-robotwin" / "bin" / "python",
        help="the python of RoboTwin's stack (default: make robotwin's, the CPU stack)",
    )
    return parser.parse_args()


def check_egl_choice() -> dict[str, device.RenderDevice]:
    """Each GPU's render device; exits 2 with one line where there is no GPU or a GPU is no EGL device."""
    try:
        found = device.gpus()
    except device.DeviceError as exc:
        _fail(f"no usable NVIDIA GPU here ({exc})")
    if not found:
        _fail("no NVIDIA GPU here (neither NVML nor nvidia-smi lists one); run this on a GPU machine")
    chosen: dict[str, device.RenderDevice] = {}
    for uuid, nvml_index in sorted(found.items(), key=lambda item: item[1]):
        try:
            listed = egl.devices_in_child(device.egl_query_environment(uuid))
            chosen[uuid] = device.RenderDevice(uuid, nvml_index, device.egl_device_index(uuid, listed))
        except (device.DeviceError, egl.EglQueryError) as exc:
            _fail(str(exc))
        mine = listed[chosen[uuid].egl_index]
        print(f"GPU {nvml_index} {uuid}: EGL device {mine.describe()}, of {len(listed)} EGL devices")
    egl_indexes = [render.egl_index for render in chosen.values()]
    if len(set(egl_indexes)) != len(egl_indexes):
        _fail(f"two GPUs got the same EGL device: {egl_indexes}")
    return chosen


def _fail(line: str) -> None:
    print(f"gpu_check: {line}", file=sys.stderr)
    sys.exit(EXIT_NO_GPU)


def build_manifest(args: argparse.Namespace, render: device.RenderDevice) -> Path:
    """One trial of one task, scanned once (with the GPU's render environment) and reused."""
    out: Path = args.run_dir / "manifests" / f"{args.suite}-{args.task}-cam{args.camera_size}-steps{args.max_steps}"
    if not (out / "BUILT").exists():
        command = [sys.executable, "-m", "scheduler.cli", "manifest", "build", "libero", "--out", str(out)]
        command += ["--suite", args.suite, "--tasks", str(args.task), "--trials", "1"]
        command += ["--camera-size", str(args.camera_size), "--max-steps", str(args.max_steps)]
        subprocess.run(command, check=True, env=_environment(render), cwd=REPO)
        (out / "BUILT").touch()
    return out


def _environment(render: device.RenderDevice) -> dict[str, str]:
    return {**os.environ, **render.environment, "PYTHONPATH": str(REPO)}


def seal_checkpoint(args: argparse.Namespace) -> Path:
    """The `deterministic` reference policy reading both LIBERO cameras and the gripper."""
    from inference_server.checkpoint import seal

    root: Path = args.run_dir / "checkpoints"
    cameras = [
        {"name": name, "height": args.camera_size, "width": args.camera_size}
        for name in ("agentview", "robot0_eye_in_hand")
    ]
    settings = {
        "cameras": cameras,
        "state": [{"name": "robot0_eef_pos", "length": 3}, {"name": "robot0_gripper_qpos", "length": 2}],
        "action_dim": 7,
        "chunk_length": args.chunk,
    }
    (root / "gpu-check").mkdir(parents=True, exist_ok=True)
    seal(root / "gpu-check", "deterministic", settings)
    return root


def run_episode(args: argparse.Namespace, render: device.RenderDevice, manifests: Path, checkpoint_root: Path) -> int:
    from evalfleet.local_fleet import WORKER_LINE, LocalFleet, policy_argv, scheduler_argv, worker_argv
    from evalfleet.policy_api.client import PolicyClient
    from evalfleet.scheduler_api.client import SchedulerClient
    from evalfleet.v1 import scheduler_pb2 as pb
    from manifests import format as manifest_format

    db = args.run_dir / "scheduler.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    episodes_dir = args.run_dir / "episodes" / str(int(time.time()))
    loaded = [manifest_format.read(path) for path in sorted(manifests.glob("*.json"))]
    with LocalFleet(args.run_dir) as fleet:
        scheduler = fleet.start("scheduler", scheduler_argv(db))
        policy = fleet.start("inference-server", policy_argv("gpu-check", checkpoint_root))
        where = ["--gpu-uuid", render.gpu_uuid] if render.gpu_uuid else ["--cpu"]
        worker_flags = [*where, "--routes", "libero", "--worker-id", "gpu-check"]
        worker_flags += ["--output", str(episodes_dir)]
        fleet.start("worker", worker_argv(scheduler.address, [policy.address], *worker_flags), ready=WORKER_LINE)
        with PolicyClient(policy.address) as policy_client:
            digest = policy_client.identity().digest
        client = SchedulerClient(scheduler.address)
        submitted = time.monotonic()
        client.submit(loaded, "libero", batch_size=1, submission_id="gpu-check", checkpoint=digest)
        deadline = submitted + args.timeout
        while True:
            tasks = client.status("gpu-check").tasks
            if tasks.succeeded + tasks.failed == tasks.total:
                break
            if time.monotonic() > deadline:
                _fail(f"the episode did not finish within {args.timeout:.0f}s; logs in {args.run_dir / 'logs'}")
            time.sleep(0.5)
        total = time.monotonic() - submitted
        summary = client.summary("gpu-check")
        if tasks.failed:
            (task,) = client.tasks(pb.TaskSelector(submission_id="gpu-check")).tasks
            _fail(f"the episode failed: {task.last_error}; logs in {args.run_dir / 'logs'}")
        client.close()
    report(args, render, episodes_dir, summary, total)
    return 0


def step_timings(episodes_dir: Path) -> tuple[str, bool]:
    """Per step, from the one episode's JSON-lines log (one record per policy step), and its success."""
    (log_path,) = sorted(episodes_dir.rglob("episode-*.jsonl"))
    records = [json.loads(line) for line in log_path.read_text().splitlines()]
    start = next(r for r in records if r["event"] == "start")
    end = next(r for r in records if r["event"] == "end")
    steps = [r for r in records if r["event"] == "step"]
    policy_step_s = [b["t"] - a["t"] for a, b in zip([start, *steps[:-1]], steps, strict=True)]
    env_steps = sum(r["executed"] for r in steps)
    rollout = end["t"] - start["t"]
    line = (
        f"{1000 * rollout / max(env_steps, 1):.1f} ms per env step over {env_steps} env steps "
        f"({rollout:.1f} s rollout); policy round trip p50 {1000 * statistics.median(policy_step_s):.1f} ms, "
        f"max {1000 * max(policy_step_s):.1f} ms ({len(steps)} policy steps)"
    )
    return line, bool(end["success"])


def report(
    args: argparse.Namespace, render: device.RenderDevice, episodes_dir: Path, summary: Any, total: float
) -> None:
    """Per step from the episode's log; per episode from the scheduler."""
    (manifest,) = summary.manifests
    print(
        f"{args.suite} task {args.task}, trial 0, two {args.camera_size}x{args.camera_size} cameras, "
        f"{args.chunk} action(s) per policy call, rendered on {_where(render)}:"
    )
    timings, success = step_timings(episodes_dir)
    print(f"  per step: {timings}")
    print(
        f"  per episode: {manifest.episode_wall_seconds_mean:.1f} s in the episode process (environment build, "
        f"reset, rollout); {total:.1f} s from submission to result; success {success}"
    )


def _where(render: device.RenderDevice) -> str:
    return f"{render.gpu_uuid} (EGL device {render.egl_index})" if render.gpu_uuid else "the CPU"


def run_robotwin_episode(args: argparse.Namespace, render: device.RenderDevice) -> int:
    """ROBOTWIN_TASK's first accepted seed: scanned and its expert's rows recorded by
    ``--robotwin-python``, then scanned again and played by ``scheduler run`` on one worker rendering
    where ``render`` says. Every step runs RoboTwin's own code on that python's stack."""
    folder: Path = args.run_dir / "robotwin" / str(int(time.time()))  # each run scans on its own stack
    root = str(args.robotwin_root.resolve())
    python = str(args.robotwin_python)
    manifests = folder / "manifests"
    _run_step(
        [python, "-m", "scheduler.cli", "manifest", "build", "robotwin", "--robotwin-root", root,
         "--tasks", ROBOTWIN_TASK, "--settings", "clean-seen", "--episodes", "1", "--max-candidates", "5",
         "--out", str(manifests)],
        render,
    )  # fmt: skip
    (manifest_path,) = manifests.glob("*.json")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    rows = folder / "expert" / "rows.npz"
    _run_step(
        [python, "-m", "benchmarks.robotwin.expert", "--robotwin-root", root, "--out", str(rows), str(manifest_path)],
        render,
    )
    output = folder / "run"
    spec = {
        "id": "gpu-check-robotwin",
        "output": str(output),
        "checkpoint": {"path": str(rows.parent), "backend": "replay", "settings": {"chunk_length": 10}},
        "benchmark": {
            "robotwin": {
                "root": root,
                "tasks": [ROBOTWIN_TASK],
                "settings": ["clean-seen"],
                "episodes": 1,
                "max_candidates": 5,
            }
        },
        "fleet": {"workers": 1, "gpus": [render.gpu_uuid] if render.gpu_uuid else []},
    }
    spec_path = folder / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    submitted = time.monotonic()
    _run_step([python, "-m", "scheduler.cli", "run", str(spec_path)], render)
    total = time.monotonic() - submitted
    results = json.loads((output / "RESULTS.json").read_text(encoding="utf-8"))
    scanned = [path.stem for path in (output / "manifests").rglob("*.json") if path.name != "BUILT.json"]
    same_scan = scanned == [manifest_path.stem]  # a manifest file is named by its content's hash
    versions = manifest["versions"]
    stack = ", ".join(f"{key} {versions[key]}" for key in sorted(versions) if key.startswith(("robotwin", "sapien")))
    overall = results["overall"]
    print(f"RoboTwin {ROBOTWIN_TASK}, seed {manifest['episodes'][0]['seed']}, the expert's rows, on {_where(render)}:")
    print(f"  stack: {stack}")
    print(f"  per step: {step_timings(output / 'episodes')[0]}")
    print(
        f"  per episode: solved {overall['succeeded']}/{overall['completed']}; {total:.1f} s for `scheduler run` "
        f"(scan, services, episode); the run's scan {'equals' if same_scan else 'DIFFERS from'} the first"
    )
    return 0 if overall["succeeded"] == 1 and same_scan else 1


def _run_step(command: list[str], render: device.RenderDevice) -> None:
    """One step of the RoboTwin check as a process; its output is shown, and a failure ends the check."""
    run = subprocess.run(command, env=_environment(render), cwd=REPO, check=False)
    if run.returncode != 0:
        _fail(f"{' '.join(command[1:4])} ... exited {run.returncode}")


def main() -> int:
    args = parse_args()
    if args.robotwin_root is not None:
        try:
            open_root(args.robotwin_root)
        except RootError as exc:
            _fail(f"--robotwin-root {exc.message}")
        if not args.robotwin_python.is_file():
            _fail(f"--robotwin-python {args.robotwin_python} does not exist (make robotwin builds the CPU stack's)")
    if args.cpu:
        render = device.cpu()
    else:
        chosen = check_egl_choice()
        uuid = args.gpu_uuid or next(iter(chosen))
        if uuid not in chosen:
            _fail(f"--gpu-uuid {uuid} is not on this machine (GPUs here: {', '.join(chosen)})")
        render = chosen[uuid]
    args.run_dir.mkdir(parents=True, exist_ok=True)
    manifests = build_manifest(args, render)
    status = run_episode(args, render, manifests, seal_checkpoint(args))
    if args.robotwin_root is None:
        print("RoboTwin: not run (--robotwin-root names a checkout)")
        return status
    return max(status, run_robotwin_episode(args, render))


if __name__ == "__main__":
    sys.exit(main())
