"""`scheduler serve`: launch the scheduler server on a SQLite database.

The server and its dependencies are imported only when this command runs, so the operator and
manifest commands start without them.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path
from typing import TYPE_CHECKING

from evalfleet.auth import ExposureError, check_exposure, read_pem, read_token
from scheduler.artifacts import ArtifactLimits, ArtifactStoreError, check_root, default_root
from scheduler.cli.common import UsageError

if TYPE_CHECKING:
    from scheduler.cli.common import Subcommands


def add_commands(commands: Subcommands) -> None:
    serve = commands.add_parser("serve", help="run the scheduler server")
    serve.add_argument("--db", type=Path, required=True, help="SQLite database file (created if missing)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=50051, help="0 picks a free port (printed at start)")
    serve.add_argument("--lease-seconds", type=float, default=60.0)
    serve.add_argument(
        "--synchronous",
        choices=("normal", "full"),
        default="normal",
        help="normal survives a process crash; full also survives power loss (slower commits)",
    )
    serve.add_argument("--token-file", type=Path, help="require this bearer token (needed beyond loopback)")
    serve.add_argument("--tls-cert", type=Path)
    serve.add_argument("--tls-key", type=Path)
    serve.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="serve the web dashboard and /metrics on this port, same host and token (0 picks one; off by default)",
    )
    serve.add_argument(
        "--artifacts-dir",
        type=Path,
        default=None,
        help="where episode artifacts (videos) are stored, by sha256 (default: DB.artifacts beside the database)",
    )
    serve.add_argument(
        "--max-artifact-bytes",
        type=byte_size,
        default=ArtifactLimits.per_artifact_bytes,
        metavar="SIZE",
        help="largest artifact accepted, e.g. 512M (default 512M)",
    )
    serve.add_argument(
        "--max-artifacts-total-bytes",
        type=byte_size,
        default=ArtifactLimits.total_bytes,
        metavar="SIZE",
        help="all stored artifacts together, e.g. 64G (default 64G); `scheduler gc` frees space",
    )
    serve.set_defaults(func=cmd_serve)


_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def byte_size(text: str) -> int:
    """A size in bytes, with an optional binary suffix: 1048576, 512K, 64M, 2G."""
    match = re.fullmatch(r"(\d+)([KMGT]?)", text.strip().upper())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or a number with K, M, G or T)")
    return int(match[1]) * _UNITS[match[2]]


def cmd_serve(args: argparse.Namespace) -> int:
    from evalfleet.ports import PortTaken, check_free
    from scheduler.server import ServeConfig, serve
    from scheduler.store.schema import DatabaseRefused

    token = read_token(args.token_file) if args.token_file else None
    try:
        check_exposure(args.host, token is not None, args.tls_cert, args.tls_key)
    except ExposureError as exc:
        raise UsageError(str(exc)) from None
    if args.lease_seconds <= 0:
        raise UsageError("--lease-seconds must be > 0")
    if args.http_port is not None and not 0 <= args.http_port <= 65535:
        raise UsageError(f"--http-port {args.http_port} is outside [0, 65535]")
    # Both ports before the database is created or opened (the dashboard binds after it opens).
    for flag, port in (("--port", args.port), ("--http-port", args.http_port)):
        try:
            if port is not None:
                check_free(f"{args.host}:{port}")
        except PortTaken as exc:
            raise UsageError(f"{flag}: {exc}" if flag == "--http-port" else str(exc)) from None
    # The artifact folder too: a refusal of it must leave no new database behind.
    try:
        check_root(args.artifacts_dir or default_root(args.db), new_database=not args.db.exists())
    except ArtifactStoreError as exc:
        raise UsageError(str(exc)) from None
    config = ServeConfig(
        db_path=args.db,
        host=args.host,
        port=args.port,
        lease_seconds=args.lease_seconds,
        synchronous=args.synchronous.upper(),
        token=token,
        tls_cert=read_pem(args.tls_cert, "--tls-cert") if args.tls_cert else None,
        tls_key=read_pem(args.tls_key, "--tls-key") if args.tls_key else None,
        http_port=args.http_port,
        artifacts_dir=args.artifacts_dir,
        artifact_limits=ArtifactLimits(args.max_artifact_bytes, args.max_artifacts_total_bytes),
    )
    try:
        asyncio.run(serve(config))
    except DatabaseRefused as exc:
        raise UsageError(f"{args.db}: {exc}") from None
    except ArtifactStoreError as exc:
        raise UsageError(str(exc)) from None
    except PortTaken as exc:
        raise UsageError(str(exc)) from None
    return 0
