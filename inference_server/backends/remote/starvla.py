"""The starvla dialect: StarVLA's policy server (`deployment/model_server/server_policy.py` in
starVLA/starVLA; not on PyPI).

StarVLA serves on openpi's transport and codec (the metadata frame on connect, msgpack with
openpi's numpy extension, a traceback text frame and close code 1011 when its handler itself
fails), so the connection is openpi's (`openpi.open_socket`, `round_trip`). Each message is an
envelope that carries a batch of examples, one per session's step:

    {"type": "infer", "request_id": ..., "payload": {"examples": [{"image": [...], "lang": ...}, ...],
                                                      "unnorm_key": ..., **predict_kwargs}}
    -> {"status": "ok", "ok": true, "type": "inference_result", "request_id": ...,
        "data": {"actions": [B, T, D]}}

A policy exception comes back as data (`"ok": false`, `error.message`) on a connection that stays
open: RemoteRefused, so the pool keeps it. The metadata frame names `available_unnorm_keys` and
`default_unnorm_key`; an `unnorm_key` setting the server does not have is refused at connect, so
at load. Settings of this dialect: `examples_per_request` (how many sessions' steps one message
carries, default 8), `unnorm_key`, `predict_kwargs` (extra payload keys such as StarVLA's LIBERO
client's `use_ddim`, `num_ddim_steps`, `do_sample`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inference_server.backends.remote.dialect import RemoteRefused, RemoteSaid, quote
from inference_server.backends.remote.openpi import Socket, open_socket, round_trip

MAX_EXAMPLES_PER_REQUEST = 256
# Payload keys the dialect writes itself.
RESERVED_KWARGS = ("examples", "unnorm_key")


@dataclass
class StarvlaConnection(Socket):
    payload: dict[str, Any] = field(default_factory=dict)

    def infer(self, requests: Sequence[dict[str, Any]], timeout_s: float) -> list[object]:
        request_id = uuid.uuid4().hex
        message = {"type": "infer", "request_id": request_id, "payload": {"examples": list(requests), **self.payload}}
        reply = round_trip(self.connection, message, timeout_s)
        if "request_id" not in reply:
            raise RemoteSaid(f"the reply is not StarVLA's envelope (it has {sorted(map(str, reply))})")
        if reply["request_id"] != request_id:
            raise RemoteSaid(f"the reply answers request_id {reply['request_id']!r}, not {request_id!r}")
        if reply.get("ok") is not True:
            raise RemoteRefused(f"the server answered {reply.get('status')!r}: {quote(_error_message(reply))}")
        data = reply.get("data")
        actions = data.get("actions") if isinstance(data, dict) else None
        if not isinstance(actions, np.ndarray):
            raise RemoteSaid(f"the reply's data has no actions array (data: {quote(repr(data))})")
        if actions.ndim != 3 or actions.shape[0] != len(requests):
            raise RemoteSaid(
                f"the reply's actions have shape {list(actions.shape)} for {len(requests)} examples, "
                f"expected [{len(requests)}, T, D]"
            )
        return list(actions)


def _error_message(reply: Mapping[str, Any]) -> str:
    error = reply.get("error")
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])
    return repr(error)


@dataclass(frozen=True)
class StarvlaDialect:
    requests_per_message: int = 8
    unnorm_key: str = ""
    predict_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = "starvla"

    def connect(self, url: str, timeout_s: float) -> StarvlaConnection:
        connection, handshake, metadata = open_socket(url, timeout_s)
        try:
            self._check(metadata)
        except RemoteSaid:
            connection.close_socket()
            raise
        payload = {**self.predict_kwargs, **({"unnorm_key": self.unnorm_key} if self.unnorm_key else {})}
        return StarvlaConnection(connection, handshake, payload)

    def _check(self, metadata: Mapping[str, Any]) -> None:
        """The unnorm key against the metadata frame's, when it names them."""
        available = metadata.get("available_unnorm_keys")
        if not isinstance(available, list):
            return
        if self.unnorm_key and self.unnorm_key not in available:
            raise RemoteSaid(
                f"settings.unnorm_key {self.unnorm_key!r} is not one of the server's available_unnorm_keys {available}"
            )
        if not self.unnorm_key and len(available) > 1 and metadata.get("default_unnorm_key") is None:
            raise RemoteSaid(
                f"the server has several available_unnorm_keys {available} and no default_unnorm_key: "
                "set settings.unnorm_key"
            )


# The settings this dialect reads beyond the remote backend's common ones.
SETTINGS: frozenset[str] = frozenset({"examples_per_request", "unnorm_key", "predict_kwargs"})


def from_settings(settings: Mapping[str, Any]) -> StarvlaDialect:
    """The dialect's own settings, checked; ValueError names the first bad one."""
    per_request = settings.get("examples_per_request", 8)
    if (
        isinstance(per_request, bool)
        or not isinstance(per_request, int)
        or not 1 <= per_request <= MAX_EXAMPLES_PER_REQUEST
    ):
        raise ValueError(
            f"settings.examples_per_request must be an integer in [1, {MAX_EXAMPLES_PER_REQUEST}], not {per_request!r}"
        )
    unnorm_key = settings.get("unnorm_key", "")
    if not isinstance(unnorm_key, str):
        raise ValueError(f"settings.unnorm_key must be a string, not {unnorm_key!r}")
    kwargs = settings.get("predict_kwargs", {})
    if not isinstance(kwargs, dict) or not all(
        isinstance(k, str) and isinstance(v, (bool, int, float, str)) for k, v in kwargs.items()
    ):
        raise ValueError(f"settings.predict_kwargs must map names to numbers, booleans or strings, not {kwargs!r}")
    reserved = sorted(set(kwargs) & set(RESERVED_KWARGS))
    if reserved:
        raise ValueError(f"settings.predict_kwargs must not set {', '.join(reserved)} (the dialect writes it)")
    return StarvlaDialect(per_request, unnorm_key, dict(kwargs))
