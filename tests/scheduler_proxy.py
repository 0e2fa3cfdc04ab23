"""A double of the network between a worker and the scheduler: a gRPC proxy in the test process.

It forwards every ``evalfleet.v1.Scheduler`` call as raw bytes to the real scheduler, with the
status, details and trailing metadata of a refusal (the worker types errors by them), and holds
``UploadArtifact`` calls while told to: a test can keep an upload pending for exactly as long as it
needs, which a real link does only by chance. Told to, it also refuses ``Complete`` calls that
claim, as a scheduler refuses a claim field it cannot take (the scheduler's own error class, so the
same status and trailers), which no well-behaved worker can provoke from a real scheduler. Nothing
else is decoded or changed on the way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from evalfleet.scheduler_api.errors import InvalidArgument
from evalfleet.v1 import scheduler_pb2

SCHEDULER = scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"]
# Metadata gRPC sets itself on each hop.
_HOP_METADATA = ("user-agent", "grpc-")


class HoldingProxy(grpc.GenericRpcHandler):
    def __init__(self, target: str) -> None:
        self._channel = grpc.insecure_channel(target)
        self._open = threading.Event()
        self._open.set()
        self.upload_arrived = threading.Event()
        self.uploads_forwarded = 0
        self._claims_to_refuse = 0
        self.claiming_completes_refused = 0
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self._server.add_generic_rpc_handlers((self,))
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def __enter__(self) -> HoldingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._open.set()
        self._server.stop(grace=None)
        self._channel.close()

    def hold_uploads(self) -> None:
        """Uploads that arrive from now on wait, unforwarded, until ``release_uploads``."""
        self._open.clear()

    def release_uploads(self) -> None:
        self._open.set()

    def refuse_claiming_completes(self, count: int) -> None:
        """The next ``count`` Complete calls that carry ``claim_next`` are refused with
        INVALID_ARGUMENT on ``claim_next.checkpoints[0]``, unforwarded."""
        with self._lock:
            self._claims_to_refuse = count

    def _refuses(self, method: str, request: bytes) -> bool:
        if not method.endswith("/Complete") or not scheduler_pb2.CompleteRequest.FromString(request).HasField(
            "claim_next"
        ):
            return False
        with self._lock:
            if self._claims_to_refuse == 0:
                return False
            self._claims_to_refuse -= 1
            self.claiming_completes_refused += 1
            return True

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = handler_call_details.method
        described = SCHEDULER.methods_by_name.get(method.rsplit("/", 1)[-1])
        if described is None:
            return None
        if described.client_streaming:  # UploadArtifact
            return grpc.stream_unary_rpc_method_handler(self._forward_upload(method))
        if described.server_streaming:  # GetArtifact
            return grpc.unary_stream_rpc_method_handler(self._forward_stream(method))
        return grpc.unary_unary_rpc_method_handler(self._forward(method))

    def _forward(self, method: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        call = self._channel.unary_unary(method)

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            if self._refuses(method, request):
                refusal = InvalidArgument(
                    "must be at most 256 characters without spaces", field="claim_next.checkpoints[0]"
                )
                context.set_trailing_metadata(refusal.trailing_metadata())
                context.abort(refusal.code, str(refusal))
            return _relayed(context, lambda: call(request, **_call_options(context)))

        return forward

    def _forward_stream(self, method: str) -> Callable[[bytes, grpc.ServicerContext], Iterator[bytes]]:
        call = self._channel.unary_stream(method)

        def forward(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
            return iter(_relayed(context, lambda: list(call(request, **_call_options(context)))))

        return forward

    def _forward_upload(self, method: str) -> Callable[[Iterator[bytes], grpc.ServicerContext], bytes]:
        call = self._channel.stream_unary(method)

        def forward(requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
            self.upload_arrived.set()
            self._open.wait()
            response = _relayed(context, lambda: call(requests, **_call_options(context)))
            self.uploads_forwarded += 1
            return response

        return forward


def _call_options(context: grpc.ServicerContext) -> dict[str, Any]:
    metadata = [(k, v) for k, v in context.invocation_metadata() if not k.startswith(_HOP_METADATA)]
    return {"timeout": context.time_remaining(), "metadata": metadata}


def _relayed(context: grpc.ServicerContext, call: Callable[[], Any]) -> Any:
    """The scheduler's answer, or its refusal passed on as it came."""
    try:
        return call()
    except grpc.RpcError as error:
        context.set_trailing_metadata(error.trailing_metadata() or ())
        context.abort(error.code(), error.details())
