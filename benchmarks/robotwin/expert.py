"""RoboTwin's scripted expert as a policy to serve: its joint rows for every episode of some manifests.

``python -m benchmarks.robotwin.expert --robotwin-root ROOT --out FOLDER/rows.npz MANIFEST...``
lets the expert play each entry's seed again, as the scan did when it accepted the seed, and
records the 14 joint values RoboTwin's own datasets record of it (``RoboTwinRuntime.expert_rows``).
The file is what the ``replay`` backend serves from a checkpoint folder: sealed with
``backend: replay``, it is the RoboTwin counterpart of the LIBERO oracle, a policy that solves
the episodes through the whole fleet. A seed the expert no longer solves (another stack or
assets than the scan's) is refused, naming the entry: its rows would not be the scan's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from benchmarks.base import BenchmarkError
from benchmarks.robotwin.config import eval_setup
from benchmarks.robotwin.manifest import BENCHMARK, check_stack, episode_spec
from benchmarks.robotwin.root import open_root
from benchmarks.robotwin.runtime import ExpertCheck, RoboTwinRuntime
from manifests.format import Manifest, ManifestError, read


def entry_rows(runtime: RoboTwinRuntime, manifest: Manifest, index: int) -> tuple[ExpertCheck, npt.NDArray[np.float64]]:
    """The expert's check of entry ``index``'s seed, and the rows [T, 14] it played."""
    spec = episode_spec(manifest, index, runtime.root.commit)
    setup = eval_setup(runtime.root, spec.task, spec.task_config)
    env = runtime.acquire(spec.task)
    try:
        return runtime.expert_rows(env, setup, spec.seed, index)
    finally:
        runtime.release(spec.task, env)


def expert_rows(runtime: RoboTwinRuntime, manifests: Sequence[Manifest]) -> dict[str, npt.NDArray[np.float64]]:
    """Episode id -> the expert's rows [T, 14] for every entry of ``manifests``."""
    rows: dict[str, npt.NDArray[np.float64]] = {}
    for manifest in manifests:
        check_stack(manifest, runtime.stack)
        for index in range(len(manifest.episodes)):
            spec = episode_spec(manifest, index, runtime.root.commit)
            if spec.episode_id in rows:
                raise BenchmarkError(f"episode id {spec.episode_id} is in more than one manifest", field="manifests")
            check, played = entry_rows(runtime, manifest, index)
            if not check.accepted:
                raise BenchmarkError(
                    f"{spec.episode_id}: the expert now ends seed {spec.seed} as {check.outcome} {check.detail}; "
                    "the scan accepted it (another stack or assets than the manifest's?)",
                    field=f"episodes[{index}].seed",
                )
            rows[spec.episode_id] = played
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.robotwin.expert",
        description="Records RoboTwin's expert rows for the episodes of RoboTwin manifests "
        "(a replay checkpoint's rows.npz).",
    )
    parser.add_argument("manifests", nargs="+", type=Path, metavar="MANIFEST", help="RoboTwin manifest files")
    parser.add_argument("--robotwin-root", type=Path, required=True, help="RoboTwin checkout at commit c3ddfa8")
    parser.add_argument("--out", type=Path, required=True, help="the .npz to write (a replay checkpoint's rows.npz)")
    args = parser.parse_args(argv)
    try:
        manifests = [read(path) for path in args.manifests]
        for path, manifest in zip(args.manifests, manifests, strict=True):
            if manifest.benchmark != BENCHMARK:
                raise BenchmarkError(f"{path} is a {manifest.benchmark} manifest, not {BENCHMARK}", field="benchmark")
        rows = expert_rows(RoboTwinRuntime(open_root(args.robotwin_root)), manifests)
    except (BenchmarkError, ManifestError) as exc:
        print(f"expert: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    with partial.open("wb") as f:
        np.savez(f, **rows)
    partial.replace(args.out)
    total = sum(len(r) for r in rows.values())
    print(f"{args.out}: expert rows of {len(rows)} episodes ({total} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
