"""The asyncio twin of `evalfleet.policy_api.client`, for a worker that runs its episodes in one loop.

    async with AsyncPolicyClient("127.0.0.1:9340") as client:
        digest = (await client.identity()).digest
        async with await client.open_session(digest, episode) as session:
            chunk = await session.act(images, state, step=0, executed=0)

Same contract as the synchronous client: the first server instance id seen is pinned and any other
raises ServerRestarted; a broken stream is resumed once; each reply has a deadline. It is cheaper
per step (no request-iterator thread), which matters most on small machines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from grpc_health.v1 import health_pb2, health_pb2_grpc

from evalfleet.allocator import keep_large_buffers
from evalfleet.auth import bearer_metadata
from evalfleet.channels import channel_options, open_aio_channel
from evalfleet.policy_api import tensors
from evalfleet.policy_api.client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    open_request,
    pin_instance,
    resume_request,
    verified_identity,
)
from evalfleet.policy_api.errors import PolicyError, PolicyUnavailable, ProtocolViolation, from_proto, from_rpc_error
from evalfleet.v1 import policy_pb2, policy_pb2_grpc

SessionCall = grpc.aio.StreamStreamCall[policy_pb2.SessionRequest, policy_pb2.SessionResponse]


class AsyncPolicyClient:
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
        if tune_allocator:
            keep_large_buffers()
        self.address = address
        self.timeout_s = timeout_s
        self._channel = open_aio_channel(address, channel_options(max_message_bytes), tls_ca)
        self._stub = policy_pb2_grpc.PolicyStub(self._channel)
        self._metadata = bearer_metadata(token)
        self.instance_id: str | None = None

    async def __aenter__(self) -> AsyncPolicyClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def check_instance(self, instance_id: str) -> None:
        self.instance_id = pin_instance(self.address, self.instance_id, instance_id)

    def rpc_error(self, error: grpc.aio.AioRpcError) -> PolicyError:
        """The typed error of a failed call, after checking which instance answered."""
        typed = from_rpc_error(error, "")
        self.check_instance(typed.instance_id)
        return typed

    async def identity(self) -> policy_pb2.GetIdentityResponse:
        try:
            response: policy_pb2.GetIdentityResponse = await self._stub.GetIdentity(
                policy_pb2.GetIdentityRequest(), metadata=self._metadata, timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as error:
            raise self.rpc_error(error) from None
        self.check_instance(response.instance_id)
        return verified_identity(self.address, response)

    async def wait_until_serving(self, timeout_s: float) -> None:
        stub = health_pb2_grpc.HealthStub(self._channel)
        request = health_pb2.HealthCheckRequest(service="evalfleet.v1.Policy")
        try:
            async for reply in stub.Watch(request, timeout=timeout_s, wait_for_ready=True):
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.aio.AioRpcError as error:
            raise from_rpc_error(error, "") from None
        raise PolicyUnavailable(f"{self.address} stopped reporting health before SERVING")

    async def open_session(
        self, expected: str | policy_pb2.IdentityRecord, episode: policy_pb2.EpisodeMeta
    ) -> AsyncSession:
        session = AsyncSession(self, open_request(expected, episode))
        await session.attach(session.open_request)
        return session

    def stream(self) -> SessionCall:
        call: SessionCall = self._stub.Session(metadata=self._metadata)
        return call


class AsyncSession:
    """One episode's session; one task drives it at a time."""

    def __init__(self, client: AsyncPolicyClient, open_request: policy_pb2.OpenSession) -> None:
        self._client = client
        self.open_request = open_request
        self._call: SessionCall | None = None
        self.session_id = ""
        self.digest = ""
        self._closed = False

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def attach(self, request: policy_pb2.OpenSession) -> None:
        self._call = self._client.stream()
        reply = await self._exchange(policy_pb2.SessionRequest(open=request))
        if reply.WhichOneof("kind") != "opened":
            raise ProtocolViolation(
                f"server answered `open` with {reply.WhichOneof('kind')}", instance_id=reply.instance_id
            )
        self.session_id = reply.opened.session_id
        self.digest = reply.opened.digest

    async def _exchange(self, request: policy_pb2.SessionRequest) -> policy_pb2.SessionResponse:
        """Sends one message and awaits its reply within the client's deadline."""
        call = self._call
        assert call is not None
        try:
            await call.write(request)
            reply = await asyncio.wait_for(call.read(), self._client.timeout_s)
        except asyncio.TimeoutError:
            self._drop_call()
            raise PolicyUnavailable(
                f"no reply from {self._client.address} within {self._client.timeout_s:g} s"
            ) from None
        except grpc.aio.AioRpcError as error:
            self._drop_call()
            raise self._client.rpc_error(error) from None
        except asyncio.InvalidStateError:  # the stream had already ended: report how it ended
            status = grpc.aio.AioRpcError(
                await call.code(), await call.initial_metadata(), await call.trailing_metadata(), await call.details()
            )
            self._drop_call()
            raise self._client.rpc_error(status) from None
        if not isinstance(reply, policy_pb2.SessionResponse):  # grpc.aio.EOF: the stream ended
            self._drop_call()
            raise PolicyUnavailable("the server ended the session stream without a reply")
        self._client.check_instance(reply.instance_id)
        if reply.WhichOneof("kind") == "error":
            raise from_proto(reply.error, reply.instance_id)
        return reply

    def _drop_call(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def act(
        self,
        images: Mapping[str, npt.NDArray[np.generic]],
        state: Mapping[str, npt.ArrayLike],
        step: int,
        executed: int,
    ) -> npt.NDArray[np.floating[Any]]:
        """Sends observation `step` and returns the next chunk [chunk_length, action_dim], in the
        identity's `action_dtype` (float32 unless it declares float64)."""
        request = tensors.observation_request(step, executed, images, state)
        if self._call is None:
            await self.attach(resume_request(self.open_request, self.session_id))
        try:
            reply = await self._exchange(request)
        except PolicyUnavailable:
            await self.attach(resume_request(self.open_request, self.session_id))
            reply = await self._exchange(request)
        return tensors.decode(reply.chunk.actions, "chunk.actions").copy()

    async def close(self) -> None:
        """Ends the session on the server (resuming it first if its stream broke); safe twice."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._call is None:
                await self.attach(resume_request(self.open_request, self.session_id))
            await self._exchange(policy_pb2.SessionRequest(close=policy_pb2.CloseSession()))
        except PolicyError:
            pass
        finally:
            self._drop_call()
