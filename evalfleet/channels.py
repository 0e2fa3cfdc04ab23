"""One place where every client builds its gRPC channel: TLS, message limits, reconnect backoff.

The scheduler client and both policy clients (sync and asyncio) get their channel here, so a
transport setting is written once and holds for every client: a client given a CA certificate
speaks TLS, whatever server it talks to. The bearer token travels as call metadata
(`evalfleet.auth.bearer_metadata`), because gRPC attaches call credentials only to secure channels
and a token on loopback needs no TLS. Keepalive is the servers' job: the inference server pings
its streams (a dead worker host's stream ends within 15 s), the scheduler relies on leases.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from evalfleet.auth import read_pem

ChannelOptions = list[tuple[str, int]]


def read_tls_ca(path: str | Path | None, flag: str = "--tls-ca") -> bytes | None:
    """The PEM bytes of a CA certificate file (`--tls-ca`), or None for a plaintext channel;
    a missing or non-PEM file is a CredentialError naming ``flag``."""
    return read_pem(path, flag) if path else None


def channel_options(max_message_bytes: int, *, max_reconnect_backoff_ms: int | None = None) -> ChannelOptions:
    """gRPC channel arguments: the message limit both ways and, when given, a reconnect ceiling
    (gRPC's default backs off to 2 minutes)."""
    options = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
    ]
    if max_reconnect_backoff_ms is not None:
        options.append(("grpc.max_reconnect_backoff_ms", max_reconnect_backoff_ms))
    return options


def open_channel(address: str, options: ChannelOptions, tls_ca: bytes | None = None) -> grpc.Channel:
    """A blocking-API channel: TLS verified against `tls_ca` when given, else plaintext."""
    if tls_ca is not None:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials(tls_ca), options)
    return grpc.insecure_channel(address, options)


def open_aio_channel(address: str, options: ChannelOptions, tls_ca: bytes | None = None) -> grpc.aio.Channel:
    """The asyncio twin of `open_channel`."""
    if tls_ca is not None:
        return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(tls_ca), options)
    return grpc.aio.insecure_channel(address, options)
