"""Malformed request bytes are the caller's error: INVALID_ARGUMENT, not grpc's UNKNOWN.

grpc's Python server deserializes a unary request before the servicer runs, and a DecodeError
there surfaces as UNKNOWN with a traceback in the server log, the same as a server bug. This
interceptor swaps in a deserializer that turns unparseable bytes into a marker and a behavior
that refuses the marker with INVALID_ARGUMENT, so UNKNOWN and INTERNAL keep meaning "server bug".
The same holds for the one request of a server-streaming call (its behavior writes its responses
with ``context.write``). Calls with a request stream are left as they are: their messages are read
inside the servicer, which refuses unparseable ones itself (inference_server.service._read).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, cast

import grpc
from google.protobuf.message import DecodeError


class _Malformed:
    """Stands in for a request whose bytes did not parse."""

    def __init__(self, error: DecodeError) -> None:
        self.error = error


class MalformedRequestInterceptor(grpc.aio.ServerInterceptor):
    # The handler returned for a unary call takes a request or a _Malformed marker: its request type
    # is no longer the continuation's, hence Any.
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _refusing(handler.unary_unary),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None and not inspect.isasyncgenfunction(handler.unary_stream):
            # Under grpc.aio a coroutine that writes with context.write; the stubs type grpc's sync form.
            behavior = cast(Callable[..., Awaitable[Any]], handler.unary_stream)
            return grpc.unary_stream_rpc_method_handler(
                _refusing(behavior),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler


def _lenient(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as error:
            return _Malformed(error)

    return parse


def _refusing(behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def refuse_or_run(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, _Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request does not parse: {request.error}")
        return await behavior(request, context)

    return refuse_or_run
