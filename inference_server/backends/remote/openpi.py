"""The openpi dialect: openpi's `serve_policy.py` websocket server (PyPI `openpi-server`).

On connect the server sends one msgpack frame of metadata (the handshake); then strictly one
request, one reply per connection, both msgpack with openpi's numpy extension
(`openpi_client.msgpack_numpy`, which never unpickles). A policy exception comes back as a text
frame holding the traceback, after which the server closes the connection with code 1011. The
server runs inference on its event loop, so it answers one request at a time in all: a pool of
connections overlaps the network transfers and the encoding, not the inference.

StarVLA's server runs on the same transport with an envelope of its own: `open_socket`,
`round_trip` and `Socket` are what `starvla.py` shares with this dialect.

Keepalive pings are off: a server busy in inference cannot answer them, and its long first
(compiling) call would otherwise end the connection. The reply timeout finds a dead server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import websockets.exceptions
from openpi_client import msgpack_numpy
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect

from inference_server.backends.remote import frames
from inference_server.backends.remote.dialect import RemoteDown, RemoteSaid, quote


def _traceback(text: str) -> str:
    """What a text frame from openpi's server says: it is the policy's traceback."""
    return f"the policy raised:\n{quote(text)}"


def _decoded(frame: bytes, what: str) -> dict[str, Any]:
    try:
        value = msgpack_numpy.unpackb(frame)
    except (msgpack.UnpackException, ValueError, TypeError, KeyError) as exc:
        raise RemoteSaid(f"the {what} is not openpi's msgpack: {exc}") from None
    if not isinstance(value, dict):
        raise RemoteSaid(f"the {what} is a {type(value).__name__}, not a map")
    return value


def open_socket(url: str, timeout_s: float) -> tuple[ClientConnection, bytes, dict[str, Any]]:
    """A connection to an openpi-transport server, its raw metadata frame and that frame decoded."""
    try:
        connection = connect(url, open_timeout=timeout_s, compression=None, max_size=None, ping_interval=None)
    except (OSError, TimeoutError, websockets.exceptions.InvalidHandshake) as exc:
        raise RemoteDown(f"cannot connect: {exc}") from None
    try:
        handshake = frames.receive(connection, timeout_s, "metadata frame", _traceback)
        return connection, handshake, _decoded(handshake, "metadata frame")
    except (RemoteDown, RemoteSaid):
        connection.close_socket()
        raise


def round_trip(connection: ClientConnection, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Sends one msgpack message and returns the decoded reply map."""
    frames.send(connection, msgpack_numpy.packb(message))
    return _decoded(frames.receive(connection, timeout_s, "reply", _traceback), "reply")


@dataclass
class Socket:
    """An open openpi-transport connection and its handshake; what every such dialect's connection
    shares."""

    connection: ClientConnection
    handshake: bytes

    def is_open(self) -> bool:
        return self.connection.state is State.OPEN

    def close(self) -> None:
        # At once, without the closing handshake: a connection is dropped because it broke, and a
        # stuck server would make close() wait out its timeout on the batch's thread.
        self.connection.close_socket()


@dataclass
class OpenpiConnection(Socket):
    action_key: str

    def infer(self, requests: Sequence[dict[str, Any]], timeout_s: float) -> list[object]:
        (request,) = requests
        reply = round_trip(self.connection, request, timeout_s)
        if self.action_key not in reply:
            raise RemoteSaid(f"the reply has no {self.action_key!r} (it has {sorted(map(str, reply))})")
        return [reply[self.action_key]]


@dataclass(frozen=True)
class OpenpiDialect:
    action_key: str = "actions"
    name: str = "openpi"
    requests_per_message: int = 1

    def connect(self, url: str, timeout_s: float) -> OpenpiConnection:
        connection, handshake, _ = open_socket(url, timeout_s)
        return OpenpiConnection(connection, handshake, self.action_key)


# The settings this dialect reads beyond the remote backend's common ones.
SETTINGS: frozenset[str] = frozenset()


def from_settings(settings: Mapping[str, Any]) -> OpenpiDialect:
    """openpi's dialect has no settings of its own."""
    return OpenpiDialect()
