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
open: RemoteRefused, so the pool keeps it.

The metadata frame (`policy_wrapper.py:139-159` in StarVLA) is checked at connect, so at load,
against what the settings can know: an `unnorm_key` the server does not have, or none when it has
several and no default; a `chunk_length` other than its `action_chunk_size` (StarVLA's clients run
the whole chunk, so a shorter one would replan more often than they do) unless
`chunk_length_differs` says why; more `action_keys` than `action_dim` (a key is at least one
dimension: LIBERO's are one each, RoboTwin's are groups, and the handshake does not say which);
and, when the settings name them, `expected_action_keys` / `expected_state_keys` equal to the
server's (which it declares only for a checkpoint with a default key).

Settings of this dialect: `examples_per_request` (how many sessions' steps one message carries,
default 8), `unnorm_key`, `predict_kwargs` (extra payload keys such as StarVLA's LIBERO client's
`use_ddim`, `num_ddim_steps`, `do_sample`), `chunk_length_differs`, `expected_action_keys`,
`expected_state_keys`.
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
class HandshakeChecks:
    """What the settings say the metadata frame must agree with."""

    chunk_length: int
    action_dim: int
    chunk_length_differs: str = ""
    expected_action_keys: tuple[str, ...] = ()
    expected_state_keys: tuple[str, ...] = ()

    def check(self, metadata: Mapping[str, Any]) -> None:
        self._chunk(metadata.get("action_chunk_size"))
        actions, states = metadata.get("action_keys"), metadata.get("state_keys")
        if isinstance(actions, list) and len(actions) > self.action_dim:
            raise RemoteSaid(
                f"the server declares {len(actions)} action_keys {actions} for settings.action_dim "
                f"{self.action_dim}: each key is at least one dimension"
            )
        self._keys("action_keys", actions, self.expected_action_keys)
        self._keys("state_keys", states, self.expected_state_keys)

    def _chunk(self, size: object) -> None:
        if not isinstance(size, int) or isinstance(size, bool):
            return
        if size != self.chunk_length and not self.chunk_length_differs:
            raise RemoteSaid(
                f"settings.chunk_length {self.chunk_length} is not the server's action_chunk_size {size}, "
                f"whose whole chunk StarVLA's clients run: set chunk_length: {size}, or say why in "
                "settings.chunk_length_differs"
            )
        if size == self.chunk_length and self.chunk_length_differs:
            raise RemoteSaid(
                f"settings.chunk_length_differs says why chunk_length differs from the server's "
                f"action_chunk_size, but both are {size}"
            )

    @staticmethod
    def _keys(name: str, declared: object, expected: tuple[str, ...]) -> None:
        if not expected:
            return
        if not isinstance(declared, list):
            raise RemoteSaid(
                f"settings.expected_{name} is set but the server declares no {name} "
                "(StarVLA declares them only for a checkpoint with a default_unnorm_key)"
            )
        if tuple(declared) != expected:
            raise RemoteSaid(f"settings.expected_{name} {list(expected)} are not the server's {name} {declared}")


@dataclass(frozen=True)
class StarvlaDialect:
    checks: HandshakeChecks
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
        """The settings against the metadata frame, where it says something they can be checked against."""
        self.checks.check(metadata)
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
SETTINGS: frozenset[str] = frozenset(
    {"examples_per_request", "unnorm_key", "predict_kwargs"}
    | {"chunk_length_differs", "expected_action_keys", "expected_state_keys"}
)


def _names(settings: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = settings.get(name, [])
    if not isinstance(value, list) or not all(isinstance(key, str) and key for key in value):
        raise ValueError(f"settings.{name} must be a list of key names, not {value!r}")
    return tuple(value)


def handshake_checks(settings: Mapping[str, Any]) -> HandshakeChecks:
    """What the metadata frame is checked against (`chunk_length` and `action_dim` are the
    contract's, already read)."""
    differs = settings.get("chunk_length_differs", "")
    if not isinstance(differs, str) or ("chunk_length_differs" in settings and not differs.strip()):
        raise ValueError(f"settings.chunk_length_differs must be a non-empty text saying why, not {differs!r}")
    return HandshakeChecks(
        chunk_length=int(settings["chunk_length"]),
        action_dim=int(settings["action_dim"]),
        chunk_length_differs=differs,
        expected_action_keys=_names(settings, "expected_action_keys"),
        expected_state_keys=_names(settings, "expected_state_keys"),
    )


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
    return StarvlaDialect(handshake_checks(settings), per_request, unnorm_key, dict(kwargs))
