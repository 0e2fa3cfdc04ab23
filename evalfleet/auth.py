"""Bearer-token authentication for gRPC servers.

The token travels as ``authorization: Bearer <token>`` metadata. The health service stays open so
that load balancers and ``grpcurl`` health probes work without a secret; every other method,
reflection included, requires the token once one is configured.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import grpc

from evalfleet.metadata import text_value

HEALTH_PREFIX = "/grpc.health.v1.Health/"

RequestT = TypeVar("RequestT")
ResponseT = TypeVar("ResponseT")


class TokenError(ValueError):
    """The token file is missing, unreadable or empty."""


def read_token(path: str | Path) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise TokenError(f"token file {path}: {exc.strerror}") from exc
    if not token:
        raise TokenError(f"token file {path} is empty")
    return token


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without the expected bearer token with UNAUTHENTICATED."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[RequestT, ResponseT] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[RequestT, ResponseT] | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(HEALTH_PREFIX):
            return handler
        presented = text_value(handler_call_details.invocation_metadata, "authorization")
        if hmac.compare_digest(presented.encode(), self._expected):
            return handler
        message = "missing authorization metadata" if not presented else "wrong bearer token"
        return _refusal(handler, message)


def _refusal(
    handler: grpc.RpcMethodHandler[RequestT, ResponseT], message: str
) -> grpc.RpcMethodHandler[RequestT, ResponseT]:
    """A handler of the same streaming shape as ``handler`` that aborts with UNAUTHENTICATED."""

    async def abort(request: object, context: grpc.aio.ServicerContext[RequestT, ResponseT]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)
