"""A double of StarVLA's policy server (starVLA/starVLA `deployment/model_server/server_policy.py`),
for the `remote` backend's starvla dialect tests.

Why a double: StarVLA is not on PyPI and pins torch 2.6 and transformers 4.57, so its server cannot
run here. What it reproduces, read from StarVLA's source (commit 0ed0aad): StarVLA's server is a
copy of openpi's websocket server and of openpi's msgpack numpy codec
(`deployment/model_server/tools/`: metadata frame on connect, arrays as maps with bytes keys, a
traceback text frame and close code 1011 when the handler itself fails) with a message router in
front of the policy. This double runs the real openpi-server transport (PyPI `openpi-server`, whose
`WebsocketPolicyServer` calls `policy.infer(message)` and sends back what it returns) with a copy
of StarVLA's routing rules as the "policy": `{"type", "request_id", "payload"}` envelopes, a flat
map taken as an infer payload, `ping`, unknown types and policy exceptions answered as error data
(`"status": "error", "ok": false, "error": {"message"}`) on a connection that stays open, and the
metadata keys of StarVLA's `PolicyServerWrapper` (`ckpt_path`, `action_chunk_size`,
`available_unnorm_keys`, `default_unnorm_key`, the image contract). Not reproduced: StarVLA's
`--idle_timeout`; and openpi-server adds a `server_timing` key to each reply and answers
`GET /healthz`, which StarVLA's copy of the server does not.

The policy answers `actions[b, t, d] = base + 0.01 t + 0.001 d` for example b, with `base =
mean(image[0]) / 255 + mean(image[1]) / 510 + sum(state) + len(lang) + 10 * index(unnorm_key)`,
so a test computes the answer from the same observation. It prints `infer examples=N` per request
(the batch size, a line tests count), the request's other predict kwargs, and `answered
prompt=...` per example. An example whose `lang`
starts with "fail:" makes the policy raise (error data); `--mode` makes every request misbehave:
`error` (error data), `wrong-batch` (one chunk too many), `wrong-shape` ([B, T, D - 1]), `nan`,
`wrong-id` (another request_id), `hang` (never answers, blocking the event loop as a stuck model
would). `--version` goes into the metadata, so a restart with another version is another handshake.

    python starvla_double.py --port 10093 [--mode ok] [--chunk 10] [--action-dim 7] [--version 1]
"""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

import numpy as np
import numpy.typing as npt
from openpi_server import WebsocketPolicyServer

UNNORM_KEYS = ["libero_object", "libero_goal"]
MODES = ("ok", "error", "wrong-batch", "wrong-shape", "nan", "wrong-id", "hang")


def expected_actions(example: dict[str, Any], unnorm_key: str, chunk: int, action_dim: int) -> npt.NDArray[np.float64]:
    """What the policy answers to one example (the same formula the tests check against)."""
    first, second = (np.asarray(image, dtype=np.float64) for image in example["image"])
    base = (
        float(first.mean()) / 255.0
        + float(second.mean()) / 510.0
        + float(np.asarray(example.get("state", 0.0), dtype=np.float64).sum())
        + len(example["lang"])
        + 10.0 * UNNORM_KEYS.index(unnorm_key)
    )
    t = np.arange(chunk, dtype=np.float64)[:, None] * 0.01
    d = np.arange(action_dim, dtype=np.float64)[None, :] * 0.001
    return base + t + d


class Policy:
    """StarVLA's `PolicyServerWrapper.predict_action` interface: a batch of examples in, un-normalized
    actions [B, T, D] out."""

    def __init__(self, mode: str, chunk: int, action_dim: int) -> None:
        self.mode, self.chunk, self.action_dim = mode, chunk, action_dim

    def predict_action(
        self, examples: list[dict[str, Any]], unnorm_key: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        print(f"infer examples={len(examples)}", flush=True)
        print(f"predict kwargs {sorted(kwargs.items())}", flush=True)
        if unnorm_key is None or unnorm_key not in UNNORM_KEYS:  # StarVLA: several keys and no default
            raise ValueError(f"predict_action: unnorm_key {unnorm_key!r} is not one of {UNNORM_KEYS}")
        if self.mode == "error" or any(example["lang"].startswith("fail:") for example in examples):
            raise ValueError("test policy refuses the examples")
        actions = np.stack([expected_actions(e, unnorm_key, self.chunk, self.action_dim) for e in examples])
        for example in examples:
            print(f"answered prompt={example['lang']!r}", flush=True)
        if self.mode == "wrong-batch":
            actions = np.concatenate([actions, actions[:1]])
        if self.mode == "wrong-shape":
            actions = actions[:, :, :-1]
        if self.mode == "nan":
            actions[:, 0, 0] = np.nan
        return {"actions": actions}


class Router:
    """StarVLA's `WebsocketPolicyServer._route_message`, as the policy openpi-server calls."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def infer(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.policy.mode == "hang":
            threading.Event().wait()
        request_id = message.get("request_id", "default")
        kind = message.get("type", "infer")
        payload = message.get("payload", message)
        if kind == "ping":
            return {"status": "ok", "ok": True, "type": "ping", "request_id": request_id}
        if kind not in ("infer", "predict_action"):
            return _error("unknown", request_id, f"Unsupported message type '{kind}'")
        if not isinstance(payload, dict):
            return _error("inference_result", request_id, "Payload must be a dict")
        try:
            data = self.policy.predict_action(**payload)
        except Exception as exc:  # StarVLA answers any policy exception as data
            return _error("inference_result", request_id, str(exc))
        if self.policy.mode == "wrong-id":
            request_id = f"not-{request_id}"
        return {"status": "ok", "ok": True, "type": "inference_result", "request_id": request_id, "data": data}

    def reset(self) -> None:
        pass


def _error(kind: str, request_id: object, message: str) -> dict[str, Any]:
    return {"status": "error", "ok": False, "type": kind, "request_id": request_id, "error": {"message": message}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="ok", choices=MODES)
    parser.add_argument("--chunk", type=int, default=10)
    parser.add_argument("--action-dim", type=int, default=7)
    parser.add_argument("--version", default="1")
    args = parser.parse_args()
    # websockets logs "server listening on HOST:PORT", the line the harness waits for; openpi-server
    # logs each connection it opens.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    metadata = {
        "env": "starvla_policy_server",
        "ckpt_path": f"evalfleet-starvla-double-v{args.version}",
        "action_chunk_size": args.chunk,
        "available_unnorm_keys": UNNORM_KEYS,
        "default_unnorm_key": None,
        "training_obs_image_size": [224, 224],
        "eval_image_contract": "Eval clients must explicitly choose image count and order.",
    }
    router = Router(Policy(args.mode, args.chunk, args.action_dim))
    WebsocketPolicyServer(router, host="127.0.0.1", port=args.port, metadata=metadata).serve_forever()


if __name__ == "__main__":
    main()
