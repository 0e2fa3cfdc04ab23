"""Bearer-token authentication for gRPC servers, and the exposure rule both servers start under.

The token travels as ``authorization: Bearer <token>`` metadata. The health service stays open so
that load balancers and ``grpcurl`` health probes work without a secret; every other method,
reflection included, requires the token once one is configured. Both servers (scheduler and
inference server) install the same interceptor and refuse to start beyond loopback without a token
(`check_exposure`), so a rule changed here holds for both.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

import grpc

from evalfleet.metadata import text_value

HEALTH_PREFIX = "/grpc.health.v1.Health/"

RequestT = TypeVar("RequestT")
ResponseT = TypeVar("ResponseT")


class CredentialError(ValueError):
    """A token, certificate or key file is missing, unreadable or empty; the message names it."""


class TokenError(CredentialError):
    """The token file is missing, unreadable or empty."""


class ExposureError(ValueError):
    """A server's flags would expose it unsafely or inconsistently; the message names the flags."""


def read_token(path: str | Path) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise TokenError(f"token file {path}: {exc.strerror}") from exc
    if not token:
        raise TokenError(f"token file {path} is empty")
    return token


def read_pem(path: str | Path, flag: str) -> bytes:
    """The bytes of a PEM file given as ``flag`` (``--tls-ca``, ``--tls-cert``, ``--tls-key``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CredentialError(f"{flag} {path}: {exc.strerror}") from exc
    if b"-----BEGIN " not in data:
        raise CredentialError(f"{flag} {path}: not a PEM file")
    return data


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, has_token: bool, tls_cert: str | Path | None, tls_key: str | Path | None) -> None:
    """The rule both servers start under: beyond loopback a token is required, and a TLS
    certificate comes with its key. Raises ExposureError naming the flags."""
    if not is_loopback(host) and not has_token:
        raise ExposureError(f"--host {host} is beyond loopback: --token-file is required")
    if bool(tls_cert) != bool(tls_key):
        raise ExposureError("--tls-cert and --tls-key go together")


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without the expected bearer token with UNAUTHENTICATED, every service but
    health (reflection included). ``trailing_metadata`` rides on each refusal: the inference server
    names its typed error's reason, field and instance there, which its clients read."""

    def __init__(self, token: str, trailing_metadata: Sequence[tuple[str, str]] = ()) -> None:
        self._expected = f"Bearer {token}".encode()
        self._trailing_metadata = tuple(trailing_metadata)

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
        return _refusal(handler, message, self._trailing_metadata)


def _refusal(
    handler: grpc.RpcMethodHandler[RequestT, ResponseT], message: str, trailing_metadata: tuple[tuple[str, str], ...]
) -> grpc.RpcMethodHandler[RequestT, ResponseT]:
    """A handler of the same streaming shape as ``handler`` that aborts with UNAUTHENTICATED."""

    async def abort(request: object, context: grpc.aio.ServicerContext[RequestT, ResponseT]) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message, trailing_metadata=trailing_metadata)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)
