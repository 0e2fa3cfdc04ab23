"""Chaos run (``python -m scripts.chaos``): an evaluation while its processes are killed at seeded
moments, then reconciled with the same evaluation without faults; exit 1 if they differ.

`--benchmark synthetic` (the default) kills workers, the scheduler and the inference server
(``scripts.chaos.synthetic``). `--benchmark libero` makes the same claim on real LIBERO episodes
(simulator processes, renders, traces), with per-episode steps compared too, and two more faults:
the episode process under a worker killed, and (as root with iproute2) a worker's host unplugged
past its lease and plugged back (``scripts.chaos.libero``).

    python -m scripts.chaos --episodes 1000 --seed 7
    MUJOCO_GL=osmesa python -m scripts.chaos --benchmark libero --tasks 0-1 --trials 5
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
import tempfile
from pathlib import Path

from scripts.chaos.libero import LiberoConfig, libero_chaos_run, libero_report
from scripts.chaos.synthetic import chaos_run, report, seal_checkpoint
from scripts.common.signals import interrupt_on


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", choices=("synthetic", "libero"), default="synthetic")
    parser.add_argument("--episodes", type=int, default=1000, help="synthetic: episodes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--faults-per-target",
        type=int,
        default=2,
        help="kills of each of worker, scheduler, policy (libero: and episode process)",
    )
    parser.add_argument("--workers", type=int, default=None, help="renderer workers (synthetic 3, libero 2)")
    parser.add_argument("--suite", default=LiberoConfig.suite, help="libero: the suite")
    parser.add_argument("--tasks", default=LiberoConfig.tasks, help="libero: task ids of the suite")
    parser.add_argument("--trials", type=int, default=LiberoConfig.trials, help="libero: trials per task")
    parser.add_argument("--camera-size", type=int, default=LiberoConfig.camera, help="libero: camera pixels")
    parser.add_argument(
        "--max-steps", type=int, default=LiberoConfig.max_steps, help="libero: policy step budget (0: the suite's)"
    )
    parser.add_argument(
        "--wait-steps", type=int, default=LiberoConfig.wait_steps, help="libero: settle steps before the policy acts"
    )
    parser.add_argument("--lease-seconds", type=float, default=LiberoConfig.lease_seconds, help="libero")
    parser.add_argument(
        "--partitions", type=int, default=LiberoConfig.partitions, help="libero: worker hosts cut off past the lease"
    )
    parser.add_argument(
        "--network",
        choices=("auto", "on", "off"),
        default="auto",
        help="libero: services on network-namespace hosts (auto: where root and iproute2 allow)",
    )
    parser.add_argument("--run-dir", type=Path, default=None, help="keeps databases and logs (default: a temp dir)")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds before the stacks are dumped and the run exits"
    )
    args = parser.parse_args(argv)
    counts = ("episodes", "trials", "camera_size", "max_steps", "wait_steps", "faults_per_target", "partitions")
    for name in (*counts, "workers"):
        least = 0 if name in ("max_steps", "wait_steps", "faults_per_target", "partitions") else 1
        if getattr(args, name) is not None and getattr(args, name) < least:
            parser.error(f"--{name.replace('_', '-')} must be >= {least}, not {getattr(args, name)}")
    if args.lease_seconds <= 0 or args.timeout <= 0:
        parser.error("--lease-seconds and --timeout must be > 0")
    # A hang anywhere (a harness bug or a fleet that stopped making progress) ends with the stacks.
    faulthandler.dump_traceback_later(args.timeout, exit=True)
    # SIGTERM (and SIGINT, even where a background shell ignores it) unwinds, so that every process
    # and network namespace the run started goes with it.
    interrupt_on(signal.SIGTERM, signal.SIGINT)
    with tempfile.TemporaryDirectory(prefix="chaos-") as scratch:
        run_dir = args.run_dir or Path(scratch)
        if args.benchmark == "libero":
            os.environ.setdefault("MUJOCO_GL", "osmesa")
            config = LiberoConfig(
                suite=args.suite,
                tasks=args.tasks,
                trials=args.trials,
                camera=args.camera_size,
                max_steps=args.max_steps,
                wait_steps=args.wait_steps,
                workers=args.workers or LiberoConfig.workers,
                lease_seconds=args.lease_seconds,
                seed=args.seed,
                faults_per_target=args.faults_per_target,
                partitions=args.partitions,
                timeout=args.timeout,
            )
            use_network = {"auto": None, "on": True, "off": False}[args.network]
            libero_chaotic, libero_calm, problems, layout = libero_chaos_run(run_dir, config, use_network)
            print(libero_report(libero_chaotic, libero_calm, problems, layout))
            return 1 if problems else 0
        root = seal_checkpoint(run_dir / "checkpoints")
        chaotic, calm, problems = chaos_run(
            run_dir, root, args.episodes, args.seed, args.faults_per_target, args.workers or 3
        )
        print(report(chaotic, calm, problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
