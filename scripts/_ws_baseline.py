"""The openpi-style baseline the benchmark compares against: websocket + msgpack with numpy arrays.

Mirrors openpi's `WebsocketPolicyServer` / `msgpack_numpy` wire format (also StarVLA's): one
websocket per client, a metadata message on connect, then each request is a msgpack map whose
arrays travel as {b"__ndarray__": True, b"data", b"dtype", b"shape"}, answered with the actions.
Benchmark only: `websockets` and `msgpack` come from the `bench` extra.
"""

from __future__ import annotations

import threading
from typing import Any

import msgpack
import numpy as np
from websockets.sync.client import connect
from websockets.sync.server import Server, ServerConnection, serve


def _pack_array(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    return obj


def _unpack_array(obj: dict) -> Any:
    if b"__ndarray__" in obj:
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
    return obj


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_pack_array)


def unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, object_hook=_unpack_array)


class NoopWebsocketServer:
    """Answers every observation with a zero chunk, like the gRPC no-op backend."""

    def __init__(self, chunk_length: int, action_dim: int) -> None:
        self._chunk = np.zeros((chunk_length, action_dim), dtype=np.float32)
        self._server: Server = serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None)
        self.port: int = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, websocket: ServerConnection) -> None:
        websocket.send(packb({"action_chunk_size": int(self._chunk.shape[0])}))
        for message in websocket:
            observation = unpackb(message)
            assert all(isinstance(v, np.ndarray) for v in observation["images"].values())
            websocket.send(packb({"actions": self._chunk}))

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)


class WebsocketClient:
    def __init__(self, port: int) -> None:
        self._ws = connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None)
        self.metadata = unpackb(self._ws.recv())

    def act(self, images: dict[str, np.ndarray], state: np.ndarray) -> np.ndarray:
        self._ws.send(packb({"images": images, "state": state}))
        return unpackb(self._ws.recv())["actions"]

    def close(self) -> None:
        self._ws.close()


def main() -> None:
    """Runs the server in its own process and prints its port, as the benchmark needs."""
    import argparse
    import signal

    parser = argparse.ArgumentParser()
    parser.add_argument("--chunk-length", type=int, default=50)
    parser.add_argument("--action-dim", type=int, default=14)
    args = parser.parse_args()
    server = NoopWebsocketServer(args.chunk_length, args.action_dim)
    print(server.port, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.close()


if __name__ == "__main__":
    main()
