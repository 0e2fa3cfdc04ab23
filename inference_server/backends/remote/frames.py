"""Websocket frames as the remote dialects send and receive them, with their failures typed.

openpi, StarVLA and vla-eval all speak binary msgpack frames over a websocket; what differs is what
a text frame means (openpi's traceback, anything else's mistake). The transport's failures mean the
same in every dialect, so they are turned into `RemoteDown` here, once: no frame in time, or a
connection that closed. What the frame holds is the dialect's to decode.
"""

from __future__ import annotations

from collections.abc import Callable

import websockets.exceptions
from websockets.sync.client import ClientConnection

from inference_server.backends.remote.dialect import RemoteDown, RemoteSaid


def receive(connection: ClientConnection, timeout_s: float, what: str, text_frame: Callable[[str], str]) -> bytes:
    """The next frame, which must be binary; ``what`` names it in errors. A text frame is what the
    remote said: `RemoteSaid` with the message ``text_frame(frame)``."""
    try:
        frame: str | bytes = connection.recv(timeout=timeout_s)
    except TimeoutError:
        raise RemoteDown(f"no {what} within {timeout_s:g} s") from None
    except websockets.exceptions.ConnectionClosed as exc:
        raise RemoteDown(f"the connection closed before the {what} ({exc})") from None
    if isinstance(frame, str):
        raise RemoteSaid(text_frame(frame))
    return frame


def send(connection: ClientConnection, frame: bytes) -> None:
    """Sends one binary frame; a closed connection is `RemoteDown`."""
    try:
        connection.send(frame)
    except websockets.exceptions.ConnectionClosed as exc:
        raise RemoteDown(f"the connection closed ({exc})") from None
