"""lerobot-eval 0.4.4 on Meta-World, its real CLI, with what each episode did written down.

lerobot-eval records no actions, so this runs its ``main`` (the ``lerobot-eval`` entry point) in
this process with records added around LeRobot's ``MetaworldEnv``, and nothing else changed:

- per reset of a ``MetaworldEnv`` (lerobot-eval's own, or the one ``MetaworldEnv.step`` does after
  a success), a record: the seed it was passed, whether it was such an automatic reset, and the start
  vectors each ``reset_model`` call of Meta-World's reset drew;
- per ``MetaworldEnv.step``, the action (as the float32 values it was given) and the success it
  reports;
- per episode, evalfleet's own trace digest (``benchmarks.metaworld.sim.add_state``: the start
  vectors, then the simulator state and Meta-World's observation after the reset and after every
  step), the digest evalfleet's Meta-World adapter stores with each result, so the two sides'
  trajectories compare without recording evalfleet's actions: equal digests are equal states at
  every step.

``--max-steps N`` (before lerobot-eval's options) sets each env's ``_max_episode_steps``, the step
limit lerobot-eval's rollout reads from it (Meta-World's 500 otherwise, which no option changes);
evalfleet's manifest then says ``max_steps: N``. Run it in .venv-lerobot with Meta-World on the
path (``make lerobot-metaworld``):

    python -m scripts.proofs.lerobot_eval_metaworld RECORD.json [--max-steps N] --policy.path=... \\
        --env.type=metaworld --env.task=reach-v3 ...

RECORD.json holds the records in reset order; lerobot-eval's own output (``eval_info.json``) is
written where its ``--output_dir`` says.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.base import TraceDigest
from benchmarks.metaworld.sim import add_state
from benchmarks.metaworld.tasks import LEROBOT_VERSION


@dataclass
class Episode:
    """What one reset of a LeRobot Meta-World env led to, up to that env's next reset."""

    seed: int | None
    auto_reset: bool
    starts: list[list[float]] = field(default_factory=list)
    actions: list[list[float]] = field(default_factory=list)
    success: bool = False
    trace: TraceDigest = field(default_factory=TraceDigest)

    def record(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "auto_reset": self.auto_reset,
            "starts": self.starts,
            "policy_steps": len(self.actions),
            "success": self.success,
            "trace_digest": self.trace.hexdigest(),
            "actions": self.actions,
        }


def run(record: Path, max_steps: int | None, lerobot_eval_argv: Sequence[str]) -> None:
    import lerobot
    import lerobot.envs.metaworld as lerobot_metaworld
    from lerobot.scripts.lerobot_eval import main as lerobot_eval_main

    if lerobot.__version__ != LEROBOT_VERSION:
        raise SystemExit(f"lerobot {lerobot.__version__} is installed; this proof reads lerobot {LEROBOT_VERSION}")
    episodes: list[Episode] = []
    current: dict[int, Episode] = {}  # id(LeRobot env) -> its episode
    in_step: set[int] = set()
    env_class = lerobot_metaworld.MetaworldEnv
    init, reset, step = env_class.__init__, env_class.reset, env_class.step

    def recorded_init(env: Any, *args: Any, **kwargs: Any) -> None:
        init(env, *args, **kwargs)
        if max_steps is not None:
            env._max_episode_steps = max_steps
        _trace_inner(env._env, lambda: current[id(env)])

    def recorded_reset(env: Any, seed: int | None = None, **kwargs: Any) -> Any:
        episode = current[id(env)] = Episode(seed=seed, auto_reset=id(env) in in_step)
        episodes.append(episode)
        return reset(env, seed=seed, **kwargs)

    def recorded_step(env: Any, action: Any) -> Any:
        episode = current[id(env)]
        episode.actions.append([float(x) for x in np.asarray(action, dtype=np.float32)])
        in_step.add(id(env))
        try:
            result = step(env, action)
        finally:
            in_step.discard(id(env))
        episode.success = episode.success or bool(result[4]["is_success"])
        return result

    env_class.__init__, env_class.reset, env_class.step = recorded_init, recorded_reset, recorded_step
    sys.argv = ["lerobot-eval", *lerobot_eval_argv]
    try:
        lerobot_eval_main()
    finally:
        env_class.__init__, env_class.reset, env_class.step = init, reset, step
        record.write_text(json.dumps([e.record() for e in episodes], indent=1) + "\n", encoding="utf-8")


def _trace_inner(inner: Any, episode: Any) -> None:
    """Traces Meta-World's env under a LeRobot env as evalfleet's adapter traces its own: the start
    vectors of a reset, then the state after it and after every step."""
    reset, step, reset_model = inner.reset, inner.step, inner.reset_model
    drawn: list[list[float]] = []

    def traced_reset_model() -> Any:
        result = reset_model()
        drawn.append(np.array(inner._last_rand_vec, dtype=np.float64).tolist())
        return result

    def traced_reset(*args: Any, **kwargs: Any) -> Any:
        drawn.clear()
        result = reset(*args, **kwargs)
        current: Episode = episode()
        current.starts = list(drawn)
        for start in drawn:
            current.trace.add("start", np.array(start, dtype=np.float64))
        add_state(current.trace, inner, np.asarray(result[0], dtype=np.float64))
        return result

    def traced_step(*args: Any, **kwargs: Any) -> Any:
        result = step(*args, **kwargs)
        add_state(episode().trace, inner, np.asarray(result[0], dtype=np.float64))
        return result

    inner.reset, inner.step, inner.reset_model = traced_reset, traced_step, traced_reset_model


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        usage = "RECORD.json [--max-steps N] LEROBOT_EVAL_OPTIONS..."
        print(f"usage: python -m scripts.proofs.lerobot_eval_metaworld {usage}", file=sys.stderr)
        return 2
    record, rest = Path(args[0]), args[1:]
    max_steps = None
    if rest[:1] == ["--max-steps"]:
        max_steps, rest = int(rest[1]), rest[2:]
    run(record, max_steps, rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
