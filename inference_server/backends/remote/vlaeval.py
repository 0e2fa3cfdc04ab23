"""The vla-eval dialect: a model server built on vla-eval's `PredictModelServer` (PyPI `vla-eval`).

Every frame is `msgpack({"type", "payload", "seq", "timestamp"})`, packed and unpacked with
vla-eval's own `pack_message` / `unpack_message`: arrays with its numpy codec (str keys; only bool,
int and float dtypes decode, nothing is unpickled) and HWC uint8 images as PNG, its default. On
connect the client sends HELLO and the server answers HELLO with what it serves (`model_server`,
`harness_version`, `protocol_version`, `observation_spec`, `action_spec`, ...): that payload,
packed again, is the handshake. Nothing in it varies per connection (the frame's `seq` and
`timestamp` do, and are left out).

Then, per episode: EPISODE_START (the server answers only if it fails), OBSERVATION answered by
ACTION with the same `seq`, EPISODE_END. A policy exception comes back as an ERROR message and the
connection stays open. The server keeps episode state per connection (its step counter, a chunk
buffer, whatever the model keeps), so a connection carries one session's episode: see
`episodes.py`. With `max_batch_size > 1` the server batches observations across connections.

A server with `chunk_size=None` answers each observation with the model's whole chunk [T, D]; one
with a `chunk_size` answers one action [D] per observation, from a chunk it buffers per episode,
which is a chunk of one here (a checkpoint with `chunk_length: 1`).

The server's HELLO may carry `observation_params`: what the model asks of the benchmark, which
vla-eval's orchestrator passes to the benchmark's constructor unless its eval config sets them
(vla_eval/orchestrator.py:90-112, 277-278). evalfleet's eval config is the sealed settings, so
each param is checked against them at connect, and a difference refuses the server in one line
naming the param (`ObservationParams`); none is ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np
import websockets.exceptions
from vla_eval.protocol.messages import (
    PROTOCOL_VERSION,
    Message,
    MessageType,
    make_hello_payload,
    pack_message,
    unpack_message,
)
from vla_eval.protocol.numpy_codec import encode_ndarray
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect

from inference_server.backends.remote import frames, mapping
from inference_server.backends.remote.dialect import RemoteDown, RemoteSaid, quote

# How long the closing handshake after EPISODE_END may take before the socket is just closed.
CLOSE_TIMEOUT_S = 2.0


def _send(connection: ClientConnection, message: Message) -> None:
    frames.send(connection, pack_message(message))


def _received(connection: ClientConnection, timeout_s: float, what: str) -> Message:
    """The next message; a frame that is not vla-eval's is what the remote said."""
    frame = frames.receive(
        connection, timeout_s, what, lambda text: f"the {what} is a text frame, not vla-eval's msgpack: {quote(text)}"
    )
    try:
        message = unpack_message(frame)
    except ValueError as exc:  # vla-eval wraps every decoding failure in ValueError
        raise RemoteSaid(f"the {what} is not a vla-eval message: {exc}") from None
    if not isinstance(message.payload, dict):
        raise RemoteSaid(f"the {what}'s payload is a {type(message.payload).__name__}, not a map")
    return message


def _error(message: Message) -> str:
    return quote(str(message.payload.get("error", message.payload)))


@dataclass
class VlaEvalConnection:
    connection: ClientConnection
    handshake: bytes
    seq: int = 1  # the HELLO's
    episode_seq: int = 0  # the EPISODE_START's, whose ERROR (if it fails) comes before the ACTION

    def _next(self, kind: MessageType, payload: dict[str, Any]) -> int:
        self.seq += 1
        _send(self.connection, Message(type=kind, payload=payload, seq=self.seq))
        return self.seq

    def start_episode(self, episode: dict[str, Any]) -> None:
        self.episode_seq = self._next(MessageType.EPISODE_START, episode)

    def infer(self, requests: Sequence[dict[str, Any]], timeout_s: float) -> list[object]:
        (request,) = requests
        seq = self._next(MessageType.OBSERVATION, request)
        reply = _received(self.connection, timeout_s, "reply")
        if reply.type is MessageType.ERROR and reply.seq == self.episode_seq:
            self.close()  # the reply to the observation is still to come: this connection is out of step
            raise RemoteSaid(f"the server refused EPISODE_START: {_error(reply)}")
        if reply.type is MessageType.ERROR and reply.seq == seq:
            raise RemoteSaid(f"the server answered ERROR: {_error(reply)}")
        if reply.type is not MessageType.ACTION or reply.seq != seq:
            self.close()
            raise RemoteSaid(f"expected the ACTION for seq {seq}, got {reply.type.value} with seq {reply.seq}")
        if "actions" not in reply.payload:
            raise RemoteSaid(f"the ACTION has no 'actions' (it has {sorted(map(str, reply.payload))})")
        actions = reply.payload["actions"]
        # A server with a chunk_size answers one action [D] per observation from its chunk buffer:
        # a chunk of one, for a checkpoint whose chunk_length is 1.
        return [actions[None] if isinstance(actions, np.ndarray) and actions.ndim == 1 else actions]

    def end_episode(self, result: dict[str, Any]) -> None:
        try:
            self._next(MessageType.EPISODE_END, result)
            self.connection.close()  # the closing handshake; the server reads EPISODE_END first
        except (RemoteDown, OSError, TimeoutError):
            self.close()

    def is_open(self) -> bool:
        return self.connection.state is State.OPEN

    def close(self) -> None:
        # At once, without the closing handshake (see OpenpiConnection.close).
        self.connection.close_socket()


# The params a request mapping decides, as vla-eval's LIBERO benchmark reads them
# (vla_eval/benchmarks/libero/benchmark.py:103-118, 269-284): `send_state` adds `states`,
# `send_wrist_image` adds `images.wrist`, `quat_no_antipodal` picks the axis-angle of `states`.
STATES_KEY = ("states",)
WRIST_KEY = ("images", "wrist")
AXISANGLE_FOR = {False: "axisangle_vlaeval", True: "axisangle_vlaeval_no_antipodal"}
MAPPED_PARAMS = ("send_state", "send_wrist_image", "quat_no_antipodal")


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


@dataclass(frozen=True)
class ObservationParams:
    """What the settings make of a server's HELLO `observation_params`.

    `send_state`, `send_wrist_image` and `quat_no_antipodal` (true or false) are honoured by the
    request mapping, which must send what vla-eval's LIBERO benchmark would send under them: a
    `states` entry exactly when `send_state` is true, an `images.wrist` entry exactly when
    `send_wrist_image` is, and, where `states` is sent, its quaternion as `axisangle_vlaeval_no_antipodal`
    when `quat_no_antipodal` is true and `axisangle_vlaeval` when false. Every other param
    (`env_seed`, `seed`, `num_steps_wait`, `max_steps`, ...) is the benchmark's, which evalfleet's
    manifests fix: the settings must declare it, with the server's value, in `observation_params`,
    the sealed statement (in the digest) that the evaluation applies it (OFT's server asks
    `env_seed: 0`: manifests built with `--seed 0`). A declared param the server does not ask is
    refused as well."""

    sends_state: bool = False
    sends_wrist: bool = False
    axisangle: tuple[str, ...] = ()  # the transforms of the `states` entry's quaternion parts
    declared: Mapping[str, object] = field(default_factory=dict)

    def check(self, params: object) -> None:
        """RemoteSaid names the first param the settings do not honour."""
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RemoteSaid(f"the server's HELLO observation_params is a {type(params).__name__}, not a map")
        for name, value in sorted(params.items(), key=lambda item: str(item[0])):
            asked = f"the server's HELLO asks observation_params {name}={value!r}"
            if name in MAPPED_PARAMS:
                self._mapped(str(name), value, asked)
            elif name not in self.declared:
                raise RemoteSaid(
                    f"{asked}, which the benchmark side applies (the manifests fix it, not the request "
                    f"mapping): once the evaluation does, declare settings.observation_params.{name}: {_json(value)}"
                )
            elif _json(self.declared[name]) != _json(value):
                raise RemoteSaid(f"{asked}, but settings.observation_params.{name} is {_json(self.declared[name])}")
        stale = sorted(set(self.declared) - set(params))
        if stale:
            raise RemoteSaid(
                f"settings.observation_params.{stale[0]} is declared, but the server's HELLO does not ask it "
                f"(its observation_params: {_json(params)})"
            )

    def _mapped(self, name: str, value: object, asked: str) -> None:
        if not isinstance(value, bool):
            raise RemoteSaid(f"{asked}, which is not true or false")
        if name == "send_state" and value != self.sends_state:
            sent = "sends `states`" if self.sends_state else "sends no `states`"
            raise RemoteSaid(f"{asked}, but settings.request {sent}")
        if name == "send_wrist_image" and value != self.sends_wrist:
            sent = "sends `images.wrist`" if self.sends_wrist else "sends no `images.wrist`"
            raise RemoteSaid(f"{asked}, but settings.request {sent}")
        if name == "quat_no_antipodal" and self.sends_state and set(self.axisangle) != {AXISANGLE_FOR[value]}:
            raise RemoteSaid(
                f"{asked}, so vla-eval's LIBERO benchmark sends the quaternion of `states` as "
                f"{AXISANGLE_FOR[value]}, but settings.request's `states` has {list(self.axisangle) or 'no axis-angle'}"
            )


def observation_params(settings: Mapping[str, Any]) -> ObservationParams:
    """The request mapping's answers to the params, and the declared ones; ValueError names a bad
    `observation_params` setting (the request itself is already checked)."""
    declared = settings.get("observation_params", {})
    if not isinstance(declared, dict) or not all(isinstance(name, str) and name for name in declared):
        raise ValueError(f"settings.observation_params must map parameter names to values, not {declared!r}")
    mapped = sorted(set(declared) & set(MAPPED_PARAMS))
    if mapped:
        raise ValueError(
            f"settings.observation_params.{mapped[0]} is decided by settings.request, which is checked "
            "against the server's: leave it out"
        )
    raw = settings.get("request")
    entries = [mapping.parse_entry(item, f"settings.request[{i}]") for i, item in enumerate(raw or [])]
    states = [entry for entry in entries if entry.key == STATES_KEY]
    return ObservationParams(
        sends_state=bool(states),
        sends_wrist=any(entry.key == WRIST_KEY for entry in entries),
        axisangle=tuple(
            part.transform for entry in states for part in entry.state if part.transform in mapping.AXISANGLE
        ),
        declared=dict(declared),
    )


@dataclass(frozen=True)
class VlaEvalDialect:
    params: ObservationParams = ObservationParams()
    name: str = "vla-eval"
    requests_per_message: int = 1

    def connect(self, url: str, timeout_s: float) -> VlaEvalConnection:
        try:
            connection = connect(
                url,
                open_timeout=timeout_s,
                close_timeout=CLOSE_TIMEOUT_S,
                compression=None,
                max_size=None,
                ping_interval=None,  # as vla-eval's own client: a server in inference cannot answer pings
            )
        except (OSError, TimeoutError, websockets.exceptions.InvalidHandshake) as exc:
            raise RemoteDown(f"cannot connect: {exc}") from None
        try:
            _send(connection, Message(type=MessageType.HELLO, payload=make_hello_payload(client="evalfleet"), seq=1))
            hello = _received(connection, timeout_s, "HELLO")
            if hello.type is not MessageType.HELLO:
                raise RemoteSaid(f"the server answered HELLO with {hello.type.value}: {_error(hello)}")
            version = hello.payload.get("protocol_version")
            if version != PROTOCOL_VERSION:
                raise RemoteSaid(f"the server speaks vla-eval protocol {version!r}, this client {PROTOCOL_VERSION}")
            self.params.check(hello.payload.get("observation_params"))
        except (RemoteDown, RemoteSaid):
            connection.close_socket()
            raise
        handshake = msgpack.packb(hello.payload, default=encode_ndarray, use_bin_type=True)
        return VlaEvalConnection(connection, handshake)


# The settings this dialect reads beyond the remote backend's common ones.
SETTINGS: frozenset[str] = frozenset({"observation_params"})


def from_settings(settings: Mapping[str, Any]) -> VlaEvalDialect:
    """The dialect's one setting of its own, `observation_params` (see `ObservationParams`)."""
    return VlaEvalDialect(observation_params(settings))
