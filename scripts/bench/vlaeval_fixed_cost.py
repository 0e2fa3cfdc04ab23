"""A vla-eval model server whose every `predict_batch` costs a fixed time whatever its size (as a
GPU that is not saturated), for scripts.bench.remote_batching. It answers zeros and prints one
line per batch (`predict_batch size=N`).

    python -m scripts.bench.vlaeval_fixed_cost --port 8000 --batch-ms 50 --max-batch-size 8 [--max-wait-ms 10]
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

import numpy as np
from vla_eval.model_servers.predict import PredictModelServer
from vla_eval.model_servers.serve import serve


class FixedCost(PredictModelServer):  # type: ignore[misc]  # vla-eval ships no type information
    def __init__(self, batch_ms: float, max_batch_size: int, max_wait_ms: float, chunk: int, action_dim: int) -> None:
        super().__init__(chunk_size=None, max_batch_size=max_batch_size, max_wait_time=max_wait_ms / 1000.0)
        self.batch_s, self.chunk, self.action_dim = batch_ms / 1000.0, chunk, action_dim

    def predict_batch(self, obs_batch: list[dict[str, Any]], ctx_batch: list[Any]) -> list[dict[str, Any]]:
        time.sleep(self.batch_s)
        print(f"predict_batch size={len(obs_batch)}", flush=True)
        return [{"actions": np.zeros((self.chunk, self.action_dim), dtype=np.float32)} for _ in obs_batch]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--batch-ms", type=float, default=50.0)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-wait-ms", type=float, default=10.0, help="vla-eval's max_wait_time (default 10 ms)")
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--action-dim", type=int, default=7)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("websockets.server").setLevel(logging.INFO)  # "server listening on HOST:PORT"
    policy = FixedCost(args.batch_ms, args.max_batch_size, args.max_wait_ms, args.chunk, args.action_dim)
    serve(policy, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
