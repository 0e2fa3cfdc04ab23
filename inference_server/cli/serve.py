"""`inference-server`: serve one verified checkpoint over gRPC on one device.

Order of events: verify the checkpoint's hashes and describe the backend (all that `--dry-run`
does, printing the identity record), then open the port NOT_SERVING, load and warm the model on a
worker thread, and only then report SERVING.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from evalfleet.allocator import keep_large_buffers
from evalfleet.auth import read_token
from evalfleet.policy_api import identity
from inference_server.backends import Backend, BackendError, RuntimeOptions, resolve
from inference_server.checkpoint import Checkpoint, CheckpointError
from inference_server.checkpoint import load as load_checkpoint
from inference_server.identity import build as build_identity
from inference_server.service import Loaded, PolicyService, ServerConfig, build_server, evict_idle_sessions, set_serving

log = logging.getLogger("inference_server")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="inference-server", description=__doc__.splitlines()[0])
    parser.add_argument("--epoch", required=True, help="checkpoint name under --checkpoint-root")
    parser.add_argument("--checkpoint-root", type=Path, default=Path("checkpoints"))
    parser.add_argument("--port", type=int, default=9340)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--backend", help="override the manifest's backend: a name or module:factory")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--attn-impl", default="sdpa", choices=("eager", "sdpa", "flash_attention_2"))
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 matmuls on CUDA")
    parser.add_argument("--autocast", action="store_true", help="run under torch.autocast")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--batch-timeout-ms", type=float, default=5.0)
    parser.add_argument("--max-sessions", type=int, default=256)
    parser.add_argument("--session-idle-seconds", type=float, default=300.0)
    parser.add_argument("--max-message-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--token-file", type=Path, help="file holding the bearer token clients must send")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics on this port of --host (0 picks one; off by default)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="verify the checkpoint, print its identity as JSON, and exit"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if args.max_batch < 1 or args.max_sessions < 1 or args.batch_timeout_ms < 0:
        parser.error("--max-batch and --max-sessions must be >= 1, --batch-timeout-ms >= 0")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        parser.error(f"--metrics-port {args.metrics_port} is outside [0, 65535]")
    return args


def runtime_options(args: argparse.Namespace) -> RuntimeOptions:
    return RuntimeOptions(
        device=args.device,
        dtype=args.dtype,
        attn_impl=args.attn_impl,
        compile=args.compile,
        tf32=args.tf32,
        autocast=args.autocast,
    )


def describe(args: argparse.Namespace) -> tuple[Checkpoint, Backend, Loaded]:
    """Verifies the checkpoint and builds (without loading) its backend and identity."""
    checkpoint = load_checkpoint(args.checkpoint_root / args.epoch, name=args.epoch)
    backend_name = args.backend or checkpoint.backend
    backend = resolve(backend_name)(checkpoint, runtime_options(args))
    record = build_identity(checkpoint, backend_name, backend)
    return checkpoint, backend, Loaded(backend=backend, record=record, digest=identity.digest(record))


async def serve(args: argparse.Namespace) -> None:
    config = ServerConfig(
        max_batch=args.max_batch,
        batch_timeout_s=args.batch_timeout_ms / 1000.0,
        max_sessions=args.max_sessions,
        session_idle_seconds=args.session_idle_seconds,
        token=read_token(args.token_file) if args.token_file else None,
        max_message_bytes=args.max_message_bytes,
    )
    service = PolicyService(config)
    server, health_servicer = build_server(service)
    await set_serving(health_servicer, False)
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"  # with --port 0, the free port that was bound
    await server.start()
    log.info("listening on %s (instance %s), NOT_SERVING until loaded", address, service.instance_id)
    if args.metrics_port is not None:
        metrics_port = service.metrics.serve(args.host, args.metrics_port)
        log.info("metrics on http://%s:%d/metrics", args.host, metrics_port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def load() -> Loaded:
        _, backend, loaded = describe(args)
        backend.load()
        return loaded

    loaded = await loop.run_in_executor(None, load)
    tasks = [asyncio.create_task(service.serve(loaded).run()), asyncio.create_task(evict_idle_sessions(service))]
    await set_serving(health_servicer, True)
    log.info("SERVING %s identity %s", loaded.record.epoch, loaded.digest)
    await stop.wait()
    await set_serving(health_servicer, False)
    await server.stop(grace=2.0)
    for task in tasks:
        task.cancel()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    keep_large_buffers()
    try:
        if args.dry_run:
            _, _, loaded = describe(args)
            print(identity.to_json(loaded.record))
            return 0
        asyncio.run(serve(args))
    except (CheckpointError, BackendError, ValueError, OSError) as exc:
        print(f"inference-server: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
