"""RoboTwin 2.0 for evalfleet: the episode adapter, the manifest builder, and the subset importer.

Targets RoboTwin's classic evaluation (``script/eval_policy.py`` and ``envs/_base_task.py`` at
commit c3ddfa8) loaded from a checkout given as ``--robotwin-root``. Building manifests runs
upstream's expert-check scan (it needs RoboTwin's GPU stack: CuRobo for the expert planner);
running an episode needs SAPIEN rendering. The scheduler CLI wires ``add_build_arguments`` /
``build_manifests`` into ``manifest build robotwin`` and ``import_subset`` into
``manifest import robotwin-subset``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.base import Benchmark, BenchmarkError, observation_digest
from benchmarks.robotwin.config import DEFAULT_SETTINGS, SETTINGS, EvalSetup, eval_setup, tasks
from benchmarks.robotwin.episode import RoboTwinEpisode
from benchmarks.robotwin.manifest import (
    BENCHMARK,
    PROTOCOL,
    EpisodeSpec,
    entry,
    entry_spec,
    episode_id,
    episode_spec,
    seal,
)
from benchmarks.robotwin.root import open_root
from benchmarks.robotwin.runtime import UPSTREAM_TEST_NUM, RoboTwinRuntime
from benchmarks.robotwin.scan import ScanResult, scan
from benchmarks.robotwin.subset import import_subset
from manifests.format import Manifest

__all__ = ["RoboTwinBenchmark", "add_build_arguments", "build_manifests", "import_subset"]

CANDIDATES_PER_EPISODE = 50
DEFAULT_ROOT = "third_party/RoboTwin"


class RoboTwinBenchmark(Benchmark):
    """Rebuilds RoboTwin episodes from manifest entries, against a root verified at construction.

    Workers pass the root as ``--adapter-option robotwin.robotwin_root=PATH``; without it the
    adapter looks where the published evaluations keep RoboTwin, ``third_party/RoboTwin``.
    """

    name = BENCHMARK

    def __init__(self, robotwin_root: str | Path = DEFAULT_ROOT) -> None:
        self.root = open_root(robotwin_root)
        self._runtime: RoboTwinRuntime | None = None

    @property
    def runtime(self) -> RoboTwinRuntime:
        """RoboTwin imported into this process, on first use (importing it loads SAPIEN and CuRobo)."""
        if self._runtime is None:
            self._runtime = RoboTwinRuntime(self.root)
        return self._runtime

    def open_episode(self, manifest: Manifest, index: int) -> RoboTwinEpisode:
        spec = episode_spec(manifest, index, self.root.commit)
        setup = self._setup(spec.task, spec.task_config)
        if setup.step_limit != spec.step_limit:
            raise BenchmarkError(
                f"the root's step limit for {spec.task} is {setup.step_limit}, the manifest says {spec.step_limit}",
                field=f"episodes[{index}].step_limit",
            )
        return RoboTwinEpisode(self.runtime, setup, spec)

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.drop_idle()

    def build(
        self,
        task_names: list[str],
        settings: list[str],
        *,
        episodes: int,
        seed: int,
        max_candidates: int,
        record_digests: bool = False,
    ) -> list[Manifest]:
        """Scans seeds per task x task config and seals one manifest per task x setting.

        Every task and setting is checked before the first scan starts; settings that share a task
        config share its scan, since accepted seeds do not depend on the instruction pool. With
        ``record_digests`` each entry also gets the digest of its episode's first observation,
        taken by resetting the episode exactly as a worker will (upstream's replay ``setup_demo``).
        """
        known = tasks(self.root)
        names = known if task_names == ["all"] else task_names
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise BenchmarkError(f"unknown RoboTwin tasks {unknown}; known: {', '.join(known)}", field="--tasks")
        bad = sorted(set(settings) - set(SETTINGS))
        if bad:
            raise BenchmarkError(f"unknown settings {bad}; known: {', '.join(SETTINGS)}", field="--settings")
        setups = {(t, s): self._setup(t, SETTINGS[s].task_config) for t in names for s in settings}
        scans: dict[tuple[str, str], ScanResult] = {}
        manifests = []
        for (task, setting), setup in setups.items():
            key = (task, setup.task_config)
            if key not in scans:
                scans[key] = scan(self.runtime, setup, seed=seed, episodes=episodes, max_candidates=max_candidates)
            manifests.append(self._seal(setup, setting, scans[key], seed, record_digests))
        return manifests

    def _seal(self, setup: EvalSetup, setting: str, result: ScanResult, seed: int, record_digests: bool) -> Manifest:
        pool = SETTINGS[setting].instruction_type
        entries = []
        for index, check in enumerate(result.accepted):
            data = entry(
                episode_id=episode_id(setup.task, setting, index),
                seed=check.seed,
                instruction=self.runtime.instruction(
                    setup.task, check.info, pool, material=f"{setup.task}/{setup.task_config}/{check.seed}/{pool}"
                ),
                setting=setting,
                step_limit=setup.step_limit,
            )
            if record_digests:
                data["initial_observation_digest"] = self._initial_digest(
                    setup, entry_spec(setup.task, setting, index, data)
                )
            entries.append(data)
        source = {
            "builder": "robotwin-scan",
            "seed": seed,
            "first_seed": result.first_seed,
            "rejected": result.rejected,
        }
        return seal(task=setup.task, setting=setting, entries=entries, source=source)

    def _initial_digest(self, setup: EvalSetup, spec: EpisodeSpec) -> str:
        episode = RoboTwinEpisode(self.runtime, setup, spec)
        try:
            return observation_digest(episode.reset())
        finally:
            episode.close()

    def _setup(self, task: str, task_config: str) -> EvalSetup:
        setup = eval_setup(self.root, task, task_config)
        if setup.action_dim != PROTOCOL["action_dim"]:
            raise BenchmarkError(
                f"{task}: the root's embodiment takes {setup.action_dim}-dim actions, not {PROTOCOL['action_dim']}",
                field="robotwin_root",
            )
        return setup


def add_build_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``scheduler manifest build robotwin`` (the caller adds ``--out``)."""
    parser.add_argument(
        "--robotwin-root",
        type=Path,
        required=True,
        help="RoboTwin checkout at commit c3ddfa8 (e.g. third_party/RoboTwin)",
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        required=True,
        metavar="TASK",
        help="task names, or 'all' for every task in task_config/_eval_step_limit.yml",
    )
    parser.add_argument(
        "--settings",
        nargs="+",
        choices=sorted(SETTINGS),
        default=list(DEFAULT_SETTINGS),
        metavar="SETTING",
        help="task config x instruction pool, one manifest per task and setting "
        f"(choices: {', '.join(SETTINGS)}; default: {' '.join(DEFAULT_SETTINGS)})",
    )
    parser.add_argument(
        "--episodes",
        type=_positive_int,
        default=UPSTREAM_TEST_NUM,
        help="accepted seeds per task (upstream test_num: 100)",
    )
    parser.add_argument(
        "--seed", type=_non_negative_int, default=0, help="upstream --seed: the scan starts at 100000 * (1 + seed)"
    )
    parser.add_argument(
        "--max-candidates",
        type=_positive_int,
        default=None,
        help=f"seeds to try per task before giving up (default: {CANDIDATES_PER_EPISODE} x episodes)",
    )
    parser.add_argument(
        "--observation-digest",
        action="store_true",
        help="record each episode's initial observation digest, checked by workers before a rollout "
        "(only reproducible on the renderer the workers use)",
    )


def build_manifests(args: argparse.Namespace) -> list[Manifest]:
    """Runs the expert-check scans that ``add_build_arguments`` describes; needs RoboTwin's GPU stack."""
    return RoboTwinBenchmark(args.robotwin_root).build(
        list(args.tasks),
        list(args.settings),
        episodes=args.episodes,
        seed=args.seed,
        max_candidates=args.max_candidates or CANDIDATES_PER_EPISODE * args.episodes,
        record_digests=args.observation_digest,
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value
