"""LIBERO protocol presets: what one harness's evaluator fixes about its trials, as data, with sources.

A LIBERO number depends on constants every harness fixes in its own code: how the reset's RNG is
seeded (once per task, or per episode), which init-state row each trial takes, how many trials a
task gets, the step limit per suite, the settle steps, the camera size, and the simulator stack
the harness ran on. ``scheduler manifest build libero --protocol NAME`` takes them from one of the
presets here; each preset names the harness and version it reproduces and, for every constant,
the file and line it comes from (docs/benchmarks.md tabulates them; docs/reproducing.md says what
each harness does on the policy side, which no manifest fixes).

Explicit build options override a preset's value: the manifest then records the preset's value,
the value built, and a label naming the override (``openpi+trials=10``), so a manifest never
claims a harness's protocol it does not follow. The ``evalfleet`` preset is the exception: it
names no harness, so its constants are simply the options' defaults and its manifests carry no
preset record, byte for byte the manifests built before presets existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from benchmarks.base import BenchmarkError
from benchmarks.libero.definition import base_suite
from benchmarks.libero.runtime import SUITE_MAX_STEPS

# How each trial's reset() draws from numpy's global RNG (the fixture poses it places).
TASK_STREAM = "task"  # np.random seeded once per task; trial i resets after i earlier resets
EPISODE_SEED = "episode"  # np.random seeded with seed + i right before trial i's reset
# The words a manifest's ``protocol.trial_stream`` holds for each (the first is what every
# manifest built before presets says, so it must not change).
TRIAL_STREAMS: Mapping[str, str] = MappingProxyType(
    {
        TASK_STREAM: "env.seed(seed) once per task, then reset() per trial; fixture poses recorded",
        EPISODE_SEED: "env.seed(seed + trial) before each trial's reset(); fixture poses recorded",
    }
)
INIT_STATE_ROW = "row = trial"
# The build options a preset's constants answer to, in the order reports list them.
OPTIONS = ("seed", "trials", "max_steps", "wait_steps", "camera_size")


@dataclass(frozen=True)
class Stack:
    """A simulator stack as a harness ran it, in a form a manifest's ``versions`` compares with.

    ``distributions`` maps a distribution name (as ``importlib.metadata`` spells it, plus
    ``python``) to the version the harness pinned ("3.2.3", "3.8": any 3.8.x), or to what it left
    open: a range (">=3.0.0"), ``*`` (unconstrained) or a git URL. Only pinned versions can be
    matched; ``manifests.presets.compare_stack`` says which are and which differ.
    """

    id: str
    distributions: Mapping[str, str]
    source: str

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "distributions": dict(self.distributions), "source": self.source}


@dataclass(frozen=True)
class Preset:
    """One harness's LIBERO protocol: its constants and where each comes from."""

    name: str
    harness: str  # the evaluator and the version or commit read
    trial_stream: str  # TASK_STREAM or EPISODE_SEED
    seed: int
    trials: int
    max_steps: Mapping[str, int]  # per suite
    wait_steps: int
    camera_size: int
    stack: Stack | None  # None: evalfleet's own pinned stack (the `libero` extra)
    sources: Mapping[str, str]  # constant -> file:line in the harness
    notes: tuple[str, ...] = field(default=())

    def constants(self, suite: str) -> dict[str, Any]:
        """The preset's value of every constant it fixes, for ``suite``."""
        return {
            "trial_stream": self.trial_stream,
            "seed": self.seed,
            "init_state": INIT_STATE_ROW,
            "trials": self.trials,
            "max_steps": self.max_steps[suite],
            "wait_steps": self.wait_steps,
            "camera_size": self.camera_size,
        }


@dataclass(frozen=True)
class Resolved:
    """A preset with the build options applied: the constants a manifest is built with."""

    preset: Preset
    suite: str
    seed: int
    trials: int
    max_steps: int
    wait_steps: int
    camera_size: int
    overridden: Mapping[str, int]  # option -> value built, where it differs from the preset's

    @property
    def label(self) -> str:
        """The preset's name, plus each override (``openpi+trials=10``)."""
        parts = [self.preset.name] + [f"{name.replace('_', '-')}={value}" for name, value in self.overridden.items()]
        return "+".join(parts)

    def record(self) -> dict[str, Any] | None:
        """What the manifest's ``protocol.preset`` holds; None for ``evalfleet`` (see the module)."""
        preset = self.preset
        if preset.name == EVALFLEET.name:
            return None
        return {
            "name": preset.name,
            "label": self.label,
            "harness": preset.harness,
            "constants": preset.constants(self.suite),
            "sources": dict(preset.sources),
            "overridden": dict(self.overridden),
            "notes": list(preset.notes),
            "stack": None if preset.stack is None else preset.stack.record(),
        }


def resolve(
    name: str,
    suite: str,
    *,
    seed: int | None,
    trials: int | None,
    max_steps: int | None,
    wait_steps: int | None,
    camera_size: int | None,
) -> Resolved:
    """The constants of preset ``name`` for ``suite``, each explicit option (not None) in place of
    the preset's value; ``max_steps`` 0 is the preset's limit for the suite. BenchmarkError names
    ``--protocol`` for an unknown preset."""
    preset = PRESETS.get(name)
    if preset is None:
        raise BenchmarkError(f"unknown protocol preset {name!r}; known: {', '.join(PRESETS)}", field="--protocol")
    chosen = {
        "seed": seed,
        "trials": trials,
        "max_steps": max_steps or None,
        "wait_steps": wait_steps,
        "camera_size": camera_size,
    }
    values = {
        "seed": preset.seed,
        "trials": preset.trials,
        "max_steps": preset.max_steps[suite],
        "wait_steps": preset.wait_steps,
        "camera_size": preset.camera_size,
    }
    overridden = {
        option: value for option in OPTIONS if (value := chosen[option]) is not None and value != values[option]
    }
    values.update(overridden)
    return Resolved(preset=preset, suite=suite, overridden=overridden, **values)


# openpi's and openvla's table (examples/libero/main.py:60-69), evalfleet's default.
_LIBERO_MAX_STEPS = MappingProxyType(dict(SUITE_MAX_STEPS))
# lerobot's table changes libero_spatial alone; a perturbation suite takes its base suite's limit.
_LEROBOT_MAX_STEPS = MappingProxyType(
    {suite: 280 if base_suite(suite) == "libero_spatial" else steps for suite, steps in SUITE_MAX_STEPS.items()}
)
_UPSTREAM_LIBERO = "git+https://github.com/Lifelong-Robot-Learning/LIBERO"

EVALFLEET = Preset(
    name="evalfleet",
    harness="evalfleet's own default: openpi's constants on evalfleet's pinned stack",
    trial_stream=TASK_STREAM,
    seed=7,
    trials=50,
    max_steps=_LIBERO_MAX_STEPS,
    wait_steps=10,
    camera_size=256,
    stack=None,
    sources=MappingProxyType(
        {
            "trial_stream": "benchmarks/libero/build.py (build_task_manifest)",
            "seed": "benchmarks/libero/protocols.py (EVALFLEET), openpi's value",
            "init_state": "benchmarks/libero/build.py (build_task_manifest)",
            "trials": "benchmarks/libero/protocols.py (EVALFLEET)",
            "max_steps": "benchmarks/libero/runtime.py (SUITE_MAX_STEPS), openpi's table",
            "wait_steps": "benchmarks/libero/protocols.py (EVALFLEET); wait action benchmarks/libero/manifest.py",
            "camera_size": "benchmarks/libero/protocols.py (EVALFLEET)",
        }
    ),
)

OPENPI = Preset(
    name="openpi",
    harness="openpi examples/libero/main.py at 15a9616",
    trial_stream=TASK_STREAM,
    seed=7,
    trials=50,
    max_steps=_LIBERO_MAX_STEPS,
    wait_steps=10,
    camera_size=256,
    stack=Stack(
        id="openpi-libero@15a9616",
        distributions=MappingProxyType(
            {
                "libero": f"{_UPSTREAM_LIBERO}@f78abd68ee283de9f9be3c8f7e2a9ad60246e95c",
                "mujoco": "3.2.3",
                "robosuite": "1.4.1",
                "numpy": "1.22.4",
                "bddl": "1.0.1",
                "python": "3.8",
            }
        ),
        source=(
            "openpi examples/libero/requirements.txt:43 (mujoco), :47 (numpy), :90 (robosuite); "
            "Dockerfile:45 (python 3.8); third_party/libero at f78abd6, its requirements.txt:11 (bddl)"
        ),
    ),
    sources=MappingProxyType(
        {
            "trial_stream": "examples/libero/main.py:85 (one env per task), :195 (env.seed), :93 (reset per trial)",
            "seed": "examples/libero/main.py:45 (seed 7), :50 (np.random.seed), :195 (env.seed(seed))",
            "init_state": "examples/libero/main.py:82, :97 (initial_states[episode_idx])",
            "trials": "examples/libero/main.py:38 (num_trials_per_task 50), :89",
            "max_steps": "examples/libero/main.py:60-69, :104",
            "wait_steps": "examples/libero/main.py:37 (num_steps_wait 10), :17 (LIBERO_DUMMY_ACTION), :108-111",
            "camera_size": "examples/libero/main.py:18 (LIBERO_ENV_RESOLUTION 256), :85, :193",
        }
    ),
    notes=(
        "vla-eval 0.8.0's LIBEROBenchmark runs the same stream unsharded (benchmarks/libero/benchmark.py:"
        "106, 200, 205, 210, 45, 48); its sharding splits and reorders each task's episodes "
        "(orchestrator.py:63-72), which no preset reproduces",
        "a simulator exception ends openpi's episode as a failure (main.py:160-162); evalfleet retries it",
    ),
)

OFT = Preset(
    name="oft",
    harness="OpenVLA-OFT experiments/robot/libero/run_libero_eval.py at 213c5ff",
    trial_stream=TASK_STREAM,
    seed=0,
    trials=50,
    max_steps=_LIBERO_MAX_STEPS,
    wait_steps=10,
    camera_size=256,
    stack=Stack(
        id="openvla-oft-libero@213c5ff",
        distributions=MappingProxyType(
            {
                "libero": _UPSTREAM_LIBERO,
                "mujoco": "*",
                "robosuite": "1.4.1",
                "numpy": "*",
                "bddl": "*",
                "python": "3.10.14",
            }
        ),
        source=(
            "openvla-oft experiments/robot/libero/libero_requirements.txt:2 (robosuite), :3 (bddl, unpinned); "
            "LIBERO.md:24-25 (LIBERO cloned at no fixed commit), :86 (Python 3.10.14)"
        ),
    ),
    sources=MappingProxyType(
        {
            "trial_stream": "experiments/robot/libero/run_libero_eval.py:384 (one env per task), "
            ":293 (reset per trial)",
            "seed": "experiments/robot/libero/libero_utils.py:24 (env.seed(0); the cfg.seed 7 of :128 seeds the model)",
            "init_state": "experiments/robot/libero/run_libero_eval.py:394 (initial_states[episode_idx]), :297",
            "trials": "experiments/robot/libero/run_libero_eval.py:114 (num_trials_per_task 50)",
            "max_steps": "experiments/robot/libero/run_libero_eval.py:63-69, :316",
            "wait_steps": "experiments/robot/libero/run_libero_eval.py:113, :318-321; libero_utils.py:28-30",
            "camera_size": "experiments/robot/libero/run_libero_eval.py:116 (env_img_res 256); libero_utils.py:22",
        }
    ),
    notes=("a simulator exception ends OFT's episode as a failure (run_libero_eval.py:356-357); evalfleet retries it",),
)

LEROBOT = Preset(
    name="lerobot",
    harness="lerobot-eval 0.4.4 (src/lerobot/envs/libero.py, scripts/lerobot_eval.py)",
    trial_stream=EPISODE_SEED,
    seed=1000,
    trials=10,
    max_steps=_LEROBOT_MAX_STEPS,
    wait_steps=10,
    camera_size=256,
    stack=Stack(
        id="lerobot-0.4.4-hf-libero",
        distributions=MappingProxyType(
            {
                "hf-libero": ">=0.1.3,<0.2.0",
                "mujoco": ">=3.0.0",
                "robosuite": "1.4.0",
                "numpy": "*",
                "bddl": "1.0.1",
                "python": ">=3.10",
            }
        ),
        source=(
            "lerobot 0.4.4 pyproject.toml:167 (hf-libero), :32 (python); "
            "hf-libero 0.1.3 pyproject.toml:22 (robosuite), :23 (bddl), :26 (numpy), :38 (mujoco)"
        ),
    ),
    sources=MappingProxyType(
        {
            "trial_stream": "envs/libero.py:296-299 (reset: env.seed(seed), then reset()); "
            "scripts/lerobot_eval.py:141 (env.reset(seed=seeds)), :333-338 (seeds start_seed + k)",
            "seed": "configs/eval.py:38 (seed 1000); scripts/lerobot_eval.py:562 (start_seed=cfg.seed, per task)",
            "init_state": "envs/libero.py:151, :301-302 (row init_state_id, then += n_envs); "
            "fixed only when a task's episodes run in one batch (see notes)",
            "trials": "docs/source/libero.mdx:151 (--eval.n_episodes=10)",
            "max_steps": "envs/libero.py:88-94 (TASK_SUITE_MAX_STEPS: libero_spatial 280), :154-159",
            "wait_steps": "envs/libero.py:117 (num_steps_wait 10), :80-82 (dummy action), :307-308",
            "camera_size": "envs/libero.py:109-110 (256); envs/configs.py:341-346 (the size is not passed)",
        }
    ),
    notes=(
        "lerobot-eval 0.4.4 at --eval.batch_size 1 (its docs' command, docs/source/libero.mdx:150) gives "
        "episode k the init row k plus the number of earlier episodes that succeeded (envs/libero.py:301-302 "
        "and the extra reset after a success, :348): that set depends on the policy's outcomes and cannot be "
        "built in advance. This preset is the set 0.4.4 gives when all of a task's episodes run in one batch "
        "(--eval.batch_size equal to --eval.n_episodes: row k, seed 1000 + k), which is also lerobot-0.6's",
        "0.4.4 counts an episode as a success when check_success() holds after a step (envs/libero.py:330)",
    ),
)

LEROBOT_06 = Preset(
    name="lerobot-0.6",
    harness="lerobot-eval 0.6.1 (src/lerobot/envs/libero.py, scripts/lerobot_eval.py)",
    trial_stream=EPISODE_SEED,
    seed=1000,
    trials=10,
    max_steps=_LEROBOT_MAX_STEPS,
    wait_steps=10,
    camera_size=360,
    stack=Stack(
        id="lerobot-0.6.1-hf-libero",
        distributions=MappingProxyType(
            {
                "hf-libero": ">=0.1.4,<0.2.0",
                "mujoco": ">=3.0.0,<3.9.0",
                "robosuite": "1.4.0",
                "numpy": "*",
                "bddl": "1.0.1",
                "python": ">=3.12",
            }
        ),
        source=(
            "lerobot 0.6.1 pyproject.toml:271 (hf-libero), :32 (python); hf-libero 0.1.4 METADATA "
            "(robosuite==1.4.0, bddl==1.0.1, mujoco>=3.0.0,<3.9.0, numpy unpinned)"
        ),
    ),
    sources=MappingProxyType(
        {
            "trial_stream": "envs/libero.py:339-343 (reset: env.seed(seed), then reset()); "
            "scripts/lerobot_eval.py:223 (env.reset(seed=seeds)), :528-533 (seeds start_seed + k)",
            "seed": "configs/eval.py:39 (seed 1000)",
            "init_state": "envs/libero.py:175, :344-346 (row init_state_id, then += n_envs); :387-389 (no reset "
            "after termination); envs/utils.py:186-238 (FreezeAfterEpisodeEnd absorbs the autoreset)",
            "trials": "docs/source/libero.mdx:52, :131 (10 episodes per task)",
            "max_steps": "envs/libero.py:98-104 (libero_spatial 280), :188-193",
            "wait_steps": "envs/libero.py:127 (num_steps_wait 10), :351-352",
            "camera_size": "envs/configs.py:333-334 (observation_height/width 360), :419-420 (passed to the env)",
        }
    ),
    notes=(
        "0.6.1 gives episode k seed 1000 + k and row k at --eval.batch_size 1 and with its default "
        "asynchronous environments; with --eval.use_async_envs=false and a batch above 1, an environment "
        "that finishes early is reset by Gymnasium's autoreset (envs/libero.py:525-526), which may advance "
        "its row (not verified)",
    ),
)

PRESETS: Mapping[str, Preset] = MappingProxyType(
    {preset.name: preset for preset in (EVALFLEET, OPENPI, OFT, LEROBOT, LEROBOT_06)}
)
