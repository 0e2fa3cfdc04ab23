"""A small numpy policy served by vla-eval's real model server (PyPI `vla-eval`: its
`PredictModelServer` and `serve`), for the `remote` backend's vla-eval tests.

Its actions are a function of the observation and of the server's own per-episode step counter:
`actions[t, d] = base + 0.01 t + 0.001 d` with `base = mean(images.agentview) / 255 +
mean(images.wrist) / 510 + sum(states) + len(task_description) + 10 * step`, where `step` is how
many observations this connection's episode has seen (vla-eval's `ctx.step`). So an answer also
shows that each session's steps reached its own remote episode. An observation on a connection
that sent no EPISODE_START fails. It prints one line per `predict_batch` call (`predict_batch
size=N`), per answer, and per episode start (two: its id and name, then `episode_task` and the
EPISODE_START's task as JSON) and end, lines tests wait on and count.

`--mode` makes it misbehave: `wrong-shape` answers [T, D - 1], `raise` raises (vla-eval answers an
ERROR message and keeps the connection), `hang` never answers. Independently of the mode, an
observation whose first state value is `REFUSE` raises. `--version` goes into the HELLO's
`action_spec`, so a restart with another version is another handshake; `--observation-params`
(JSON) is what its HELLO asks of the benchmark, as vla-eval's own servers declare theirs.

    python vlaeval_policy.py --port 8000 [--mode ok] [--max-batch-size 1] [--chunk 10]
        [--action-dim 7] [--version 1] [--chunk-size N] [--observation-params JSON]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from typing import Any

import numpy as np
import numpy.typing as npt
from vla_eval.model_servers.predict import PredictModelServer
from vla_eval.model_servers.serve import serve
from vla_eval.specs import IMAGE_RGB, LANGUAGE, STATE_EEF_POS_AA_GRIP, DimSpec

REFUSE = 99.0


def say(line: str) -> None:
    """One line on stdout in one write: print's text and its newline are two, between which the
    server's own log (stderr, the same pipe in the tests) may land."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def expected_actions(observation: dict[str, Any], step: int, chunk: int, action_dim: int) -> npt.NDArray[np.float64]:
    """What the policy answers to `observation` as its episode's `step`-th (the tests' formula)."""
    base = (
        float(np.asarray(observation["images"]["agentview"], dtype=np.float64).mean()) / 255.0
        + float(np.asarray(observation["images"]["wrist"], dtype=np.float64).mean()) / 510.0
        + float(np.asarray(observation["states"], dtype=np.float64).sum())
        + len(observation["task_description"])
        + 10.0 * step
    )
    t = np.arange(chunk, dtype=np.float64)[:, None] * 0.01
    d = np.arange(action_dim, dtype=np.float64)[None, :] * 0.001
    return base + t + d


def action_spec(action_dim: int, version: str) -> dict[str, DimSpec]:
    return {"actions": DimSpec("actions", action_dim, "raw", description=f"evalfleet test policy v{version}")}


def observation_spec() -> dict[str, DimSpec]:
    return {"agentview": IMAGE_RGB, "wrist": IMAGE_RGB, "states": STATE_EEF_POS_AA_GRIP, "language": LANGUAGE}


class TestPolicy(PredictModelServer):
    def __init__(
        self,
        mode: str,
        max_batch_size: int,
        chunk: int,
        action_dim: int,
        version: str,
        chunk_size: int | None,
        observation_params: dict[str, Any] | None = None,
    ) -> None:
        # chunk_size=None: every observation is answered with the whole chunk; with a chunk_size,
        # vla-eval answers one action per observation from a chunk it buffers per episode.
        super().__init__(chunk_size=chunk_size, max_batch_size=max_batch_size, max_wait_time=0.05)
        self.mode, self.chunk, self.action_dim, self.version = mode, chunk, action_dim, version
        self.episodes: dict[str, str] = {}  # vla-eval's per-connection session id -> evalfleet episode id
        self.observation_params = observation_params or {}

    def get_observation_params(self) -> dict[str, Any]:
        return dict(self.observation_params)

    def get_action_spec(self) -> dict[str, DimSpec]:
        return action_spec(self.action_dim, self.version)

    def get_observation_spec(self) -> dict[str, DimSpec]:
        return observation_spec()

    async def on_episode_start(self, config: dict[str, Any], ctx: Any) -> None:
        await super().on_episode_start(config, ctx)
        task = config.get("task", {})
        self.episodes[ctx.session_id] = task.get("episode_id", "")
        say(f"episode_start episode={task.get('episode_id')} name={task.get('name')!r}")
        say(f"episode_task {json.dumps(task, sort_keys=True)}")  # the whole task, as it came

    async def on_episode_end(self, result: dict[str, Any], ctx: Any) -> None:
        episode = self.episodes.pop(ctx.session_id, None)
        say(f"episode_end episode={episode} result={result}")
        await super().on_episode_end(result, ctx)

    def predict_batch(self, obs_batch: list[dict[str, Any]], ctx_batch: list[Any]) -> list[dict[str, Any]]:
        say(f"predict_batch size={len(obs_batch)}")
        return [self._answer(obs, ctx) for obs, ctx in zip(obs_batch, ctx_batch, strict=True)]

    def _answer(self, obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if ctx.session_id not in self.episodes:
            raise RuntimeError("an observation before EPISODE_START")
        if self.mode == "hang":
            threading.Event().wait()
        if self.mode == "raise" or float(obs["states"][0]) == REFUSE:
            raise ValueError("test policy refuses the observation")
        actions = expected_actions(obs, ctx.step, self.chunk, self.action_dim)
        say(f"answered prompt={obs['task_description']!r} step={ctx.step}")
        if self.mode == "wrong-shape":
            actions = actions[:, :-1]
        return {"actions": actions}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="ok", choices=("ok", "wrong-shape", "raise", "hang"))
    parser.add_argument("--max-batch-size", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--action-dim", type=int, default=7)
    parser.add_argument("--version", default="1")
    parser.add_argument("--chunk-size", type=int, default=None, help="vla-eval's chunk_size (default: None)")
    parser.add_argument("--observation-params", type=json.loads, default=None, help="the HELLO's observation_params")
    args = parser.parse_args()
    # websockets logs "server listening on HOST:PORT", the line the harness waits for; vla-eval
    # logs each connection, HELLO, EPISODE_START and EPISODE_END.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    policy = TestPolicy(
        args.mode,
        args.max_batch_size,
        args.chunk,
        args.action_dim,
        args.version,
        args.chunk_size,
        args.observation_params,
    )
    serve(policy, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
