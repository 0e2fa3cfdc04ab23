"""A small synchronous client for the Policy service, as the renderer worker uses it.

    client = PolicyClient("127.0.0.1:9340", token=None)
    digest = client.identity().digest
    with client.open_session(digest, policy_pb2.EpisodeMeta(task="adjust_bottle", ...)) as session:
        chunk = session.act(images, state, step=0, executed=0)      # ndarray [chunk, action_dim]

One client serves many sessions from many threads (one thread per episode). The client pins the
server instance id it first sees; any later reply from another instance raises ServerRestarted,
because the session histories it relied on are gone. A broken stream is resumed once on a new
stream, transparently; the server answers a repeated last step unchanged, so a retry is safe.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from grpc_health.v1 import health_pb2, health_pb2_grpc

from evalfleet.allocator import keep_large_buffers
from evalfleet.auth import bearer_metadata
from evalfleet.channels import channel_options, open_channel
from evalfleet.policy_api import identity, tensors
from evalfleet.policy_api.errors import (
    PolicyError,
    PolicyUnavailable,
    ProtocolViolation,
    ServerRestarted,
    from_proto,
    from_rpc_error,
)
from evalfleet.v1 import policy_pb2, policy_pb2_grpc

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def verified_identity(address: str, response: policy_pb2.GetIdentityResponse) -> policy_pb2.GetIdentityResponse:
    """``response`` if its digest is the hash of the record it carries; ProtocolViolation if not."""
    recomputed = identity.digest(response.identity)
    if response.digest != recomputed:
        raise ProtocolViolation(
            f"{address} reports identity {response.digest[:80]!r}, but the record it sends hashes to {recomputed}",
            field="digest",
            instance_id=response.instance_id,
        )
    return response


def pin_instance(address: str, pinned: str | None, seen: str) -> str | None:
    """The instance id to keep pinned after a reply from `seen` (empty: a reply without one)."""
    if pinned is not None and seen and seen != pinned:
        raise ServerRestarted(
            f"server {address} restarted: instance {pinned} is now {seen}; its sessions are lost", instance_id=seen
        )
    return pinned or seen or None


def open_request(expected: str | policy_pb2.IdentityRecord, episode: policy_pb2.EpisodeMeta) -> policy_pb2.OpenSession:
    """The `open` of a new session on a server that must serve exactly `expected`: a digest, or the
    full identity record, which makes a mismatch name the fields that differ."""
    if isinstance(expected, policy_pb2.IdentityRecord):
        return policy_pb2.OpenSession(
            expected_digest=identity.digest(expected), expected_identity=expected, episode=episode
        )
    return policy_pb2.OpenSession(expected_digest=expected, episode=episode)


def resume_request(opened: policy_pb2.OpenSession, session_id: str) -> policy_pb2.OpenSession:
    request = policy_pb2.OpenSession()
    request.CopyFrom(opened)
    request.resume_session_id = session_id
    return request


class PolicyClient:
    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        timeout_s: float = 60.0,
        tune_allocator: bool = True,
        tls_ca: bytes | None = None,
    ) -> None:
        """`tune_allocator` keeps large freed buffers in this process's heap (see allocator.py):
        several times faster per step, at the cost of holding on to the peak heap."""
        if tune_allocator:
            keep_large_buffers()
        self.address = address
        self._channel = open_channel(address, channel_options(max_message_bytes), tls_ca)
        self._stub = policy_pb2_grpc.PolicyStub(self._channel)
        self._metadata = bearer_metadata(token)
        self.timeout_s = timeout_s
        self._watchdog = _Watchdog(timeout_s)
        self._lock = threading.Lock()
        self.instance_id: str | None = None

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._watchdog.stop()
        self._channel.close()

    def unpin(self) -> None:
        """Forgets the pinned instance, for a caller that watches the server across restarts."""
        with self._lock:
            self.instance_id = None

    def check_instance(self, instance_id: str) -> None:
        """Pins the first instance id seen; a different one later means the server restarted."""
        with self._lock:
            self.instance_id = pin_instance(self.address, self.instance_id, instance_id)

    def rpc_error(self, error: grpc.RpcError) -> PolicyError:
        """The typed error of a failed call, after checking which instance answered."""
        typed = from_rpc_error(error, "")
        self.check_instance(typed.instance_id)
        return typed

    def identity(self) -> policy_pb2.GetIdentityResponse:
        """What the server serves. Its digest must be the hash of the record it sends: a digest is
        pinned in submissions and results and filters claims, so one that is not an evalfleet identity
        (a foreign or broken server) is refused here rather than carried to the scheduler."""
        try:
            response: policy_pb2.GetIdentityResponse = self._stub.GetIdentity(
                policy_pb2.GetIdentityRequest(), metadata=self._metadata, timeout=self.timeout_s
            )
        except grpc.RpcError as error:
            raise self.rpc_error(error) from None
        self.check_instance(response.instance_id)
        return verified_identity(self.address, response)

    def wait_until_serving(self, timeout_s: float) -> None:
        """Blocks until the health service reports SERVING (the model is loaded and warmed)."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        request = health_pb2.HealthCheckRequest(service="evalfleet.v1.Policy")
        try:
            for reply in stub.Watch(request, timeout=timeout_s, wait_for_ready=True):
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.RpcError as error:
            raise from_rpc_error(error, "") from None
        raise PolicyUnavailable(f"{self.address} stopped reporting health before SERVING")

    def open_session(self, expected: str | policy_pb2.IdentityRecord, episode: policy_pb2.EpisodeMeta) -> Session:
        """Opens a session for one episode on a server that must serve exactly `expected` (a digest,
        or the full identity record, which makes a mismatch name the fields that differ)."""
        session = Session(self, open_request(expected, episode))
        session.start()
        return session

    def stream(self) -> _Stream:
        stream = _Stream(self._stub, self._metadata)
        self._watchdog.watch(stream)
        return stream


class _Stream:
    """One bidirectional call driven request by request: send one message, read one reply."""

    def __init__(self, stub: policy_pb2_grpc.PolicyStub, metadata: tuple[tuple[str, str], ...]) -> None:
        self._requests: queue.SimpleQueue[policy_pb2.SessionRequest | None] = queue.SimpleQueue()  # None: the end
        self._call = stub.Session(self._iterate(), metadata=metadata)
        self.waiting_since: float | None = None
        self.expired = False

    def _iterate(self) -> Iterator[policy_pb2.SessionRequest]:
        while (item := self._requests.get()) is not None:
            yield item

    def call(self, request: policy_pb2.SessionRequest) -> policy_pb2.SessionResponse:
        self.waiting_since = time.monotonic()
        self._requests.put(request)
        try:
            reply: policy_pb2.SessionResponse = next(self._call)
            return reply
        finally:
            self.waiting_since = None

    def expire(self) -> None:
        self.expired = True
        self._call.cancel()

    def end(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class _Watchdog:
    """Cancels a stream whose reply is overdue. A gRPC stream has one deadline for its whole life
    (here an episode of minutes), not one per message, so a hung server would otherwise block a
    worker forever."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._streams: weakref.WeakSet[_Stream] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, stream: _Stream) -> None:
        with self._lock:
            self._streams.add(stream)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="policy-watchdog", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while not self._stopped.wait(min(1.0, self._timeout_s / 4)):
            now = time.monotonic()
            with self._lock:
                streams = list(self._streams)
            for stream in streams:
                since = stream.waiting_since
                if since is not None and now - since > self._timeout_s:
                    stream.expire()


class Session:
    """One episode's session. Not thread-safe: one thread drives one episode."""

    def __init__(self, client: PolicyClient, open_request: policy_pb2.OpenSession) -> None:
        self._client = client
        self._open_request = open_request
        self._stream: _Stream | None = None
        self.session_id = ""
        self.digest = ""
        self._closed = False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._attach(self._open_request)

    def _attach(self, open_request: policy_pb2.OpenSession) -> None:
        self._stream = self._client.stream()
        reply = self._exchange(policy_pb2.SessionRequest(open=open_request))
        if reply.WhichOneof("kind") != "opened":
            raise ProtocolViolation(
                f"server answered `open` with {reply.WhichOneof('kind')}", instance_id=reply.instance_id
            )
        self.session_id = reply.opened.session_id
        self.digest = reply.opened.digest

    def _resume(self) -> None:
        self._attach(resume_request(self._open_request, self.session_id))

    def _exchange(self, request: policy_pb2.SessionRequest) -> policy_pb2.SessionResponse:
        """Sends one message and returns its reply; in-band errors and statuses raise typed errors."""
        stream = self._stream
        assert stream is not None
        try:
            reply = stream.call(request)
        except grpc.RpcError as error:
            self._drop_stream()
            if stream.expired:
                raise PolicyUnavailable(
                    f"no reply from {self._client.address} within {self._client.timeout_s:g} s"
                ) from None
            raise self._client.rpc_error(error) from None
        except StopIteration:
            self._drop_stream()
            raise PolicyUnavailable("the server ended the session stream without a reply") from None
        self._client.check_instance(reply.instance_id)
        if reply.WhichOneof("kind") == "error":
            raise from_proto(reply.error, reply.instance_id)
        return reply

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.end()
            self._stream = None

    def act(
        self,
        images: Mapping[str, npt.NDArray[np.generic]],
        state: Mapping[str, npt.ArrayLike],
        step: int,
        executed: int,
    ) -> npt.NDArray[np.floating[Any]]:
        """Sends observation `step` (saying how many commands of the last chunk ran) and returns
        the next chunk [chunk_length, action_dim], in the identity's `action_dtype` (float32 unless
        it declares float64)."""
        request = tensors.observation_request(step, executed, images, state)
        if self._stream is None:
            self._resume()
        try:
            reply = self._exchange(request)
        except PolicyUnavailable:
            self._resume()  # raises ServerRestarted if another instance answers
            reply = self._exchange(request)
        return tensors.decode(reply.chunk.actions, "chunk.actions").copy()

    def close(self) -> None:
        """Ends the session on the server (resuming it first if its stream broke); safe to call
        twice. A session that can no longer be reached is left to the server's idle eviction."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._stream is None:
                self._resume()
            self._exchange(policy_pb2.SessionRequest(close=policy_pb2.CloseSession()))
        except PolicyError:
            pass
        finally:
            self._drop_stream()
