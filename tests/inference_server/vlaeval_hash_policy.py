"""A vla-eval model server (PyPI `vla-eval` 0.8.0's own `PredictModelServer` and `serve`) whose
actions are a hash of the observation it consumed, recording every EPISODE_START and observation
it receives (and each EPISODE_END's result), for the closed-loop test `test_libero_closed_loop.py`.

It asks what vla-eval's pi0 server asks of LIBERO (`send_state`, `send_wrist_image` in its HELLO
`observation_params`) and consumes what its observation spec names: both images, `states` and
`task_description`. Every observation is recorded (`request_digest.describe` of all its keys,
consumed or not) before vla-eval's chunk buffer decides whether to infer; an inference's chunk is
`request_digest.actions_for` the digest of the consumed keys. With `--chunk-size N` vla-eval keeps
the first N rows and answers one action per observation, inferring again when they run out, as its
ready-made servers do (pi0: 10).

With `--replay FILE` (JSON: "suite/task_id/episode_idx" -> actions, one list per step) it answers
the episode's recorded actions from the step it is at instead (after the last, still with the
gripper as last commanded): the scripted oracle's commands, which solve the trial, so that both
clients' success is compared on a success. It records every request all the same.

    python vlaeval_hash_policy.py --port 8000 --record FILE [--chunk 10] [--chunk-size 5] [--replay FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import request_digest
from vla_eval.model_servers.predict import PredictModelServer
from vla_eval.model_servers.serve import serve
from vla_eval.specs import IMAGE_RGB, LANGUAGE, STATE_EEF_POS_AA_GRIP, DimSpec

ACTION_DIM = 7
CONSUMED = ("images", "states", "task_description")


class HashPolicy(PredictModelServer):
    def __init__(self, record: Path, chunk: int, chunk_size: int | None, replay: dict[str, list[list[float]]]) -> None:
        super().__init__(chunk_size=chunk_size)
        self.record, self.chunk, self.replay = record, chunk, replay
        self.episodes: dict[str, str] = {}  # session -> its episode's "suite/task_id/episode_idx"

    def get_observation_params(self) -> dict[str, Any]:
        return {"send_state": True, "send_wrist_image": True}

    def get_action_spec(self) -> dict[str, DimSpec]:
        return {"actions": DimSpec("actions", ACTION_DIM, "raw", description="hash of the observation")}

    def get_observation_spec(self) -> dict[str, DimSpec]:
        return {"agentview": IMAGE_RGB, "wrist": IMAGE_RGB, "states": STATE_EEF_POS_AA_GRIP, "language": LANGUAGE}

    async def on_episode_start(self, config: dict[str, Any], ctx: Any) -> None:
        task = config.get("task") or {}
        request_digest.record(self.record, {"event": "start", "session": ctx.session_id, "task": task})
        self.episodes[ctx.session_id] = f"{task.get('suite')}/{task.get('task_id')}/{task.get('episode_idx')}"
        await super().on_episode_start(config, ctx)

    async def on_episode_end(self, result: dict[str, Any], ctx: Any) -> None:
        request_digest.record(self.record, {"event": "end", "session": ctx.session_id, "result": result})
        await super().on_episode_end(result, ctx)

    async def on_observation(self, obs: dict[str, Any], ctx: Any) -> None:
        entry = {"event": "observation", "session": ctx.session_id, "step": ctx.step, **request_digest.describe(obs)}
        request_digest.record(self.record, entry)
        await super().on_observation(obs, ctx)

    def predict(self, obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
        recorded = self.replay.get(self.episodes.get(ctx.session_id, ""))
        if recorded is not None:
            return {"actions": request_digest.replayed(recorded, ctx.step, self.chunk)}
        consumed = {key: obs[key] for key in CONSUMED}
        return {
            "actions": request_digest.actions_for(request_digest.describe(consumed)["digest"], self.chunk, ACTION_DIM)
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--chunk-size", type=int, default=None, help="vla-eval's chunk_size (default: None)")
    parser.add_argument("--replay", type=Path, default=None, help="recorded actions by episode (see the module)")
    args = parser.parse_args()
    # websockets logs "server listening on HOST:PORT", the line the harness waits for.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    replay = json.loads(args.replay.read_text()) if args.replay else {}
    serve(HashPolicy(args.record, args.chunk, args.chunk_size, replay), host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
