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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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

from inference_server.backends.remote import frames
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


@dataclass(frozen=True)
class VlaEvalDialect:
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
        except (RemoteDown, RemoteSaid):
            connection.close_socket()
            raise
        handshake = msgpack.packb(hello.payload, default=encode_ndarray, use_bin_type=True)
        return VlaEvalConnection(connection, handshake)


# The settings this dialect reads beyond the remote backend's common ones.
SETTINGS: frozenset[str] = frozenset()


def from_settings(settings: Mapping[str, Any]) -> VlaEvalDialect:
    """vla-eval's dialect has no settings of its own."""
    return VlaEvalDialect()
