"""Binding a gRPC server's port, with an error a user can act on.

Both servers bind with `grpc.so_reuseport` off, so a second server on a port already taken fails
to start instead of sharing the first one's clients. gRPC's own failure is a RuntimeError that only
says to turn on its debug logging, after a log line of its own; so `bind` first tries the address
with a plain socket, which says why (taken, or not this machine's), and only then hands it to gRPC.
"""

from __future__ import annotations

import errno
import socket

import grpc


class PortTaken(OSError):
    """The address cannot be listened on: another process listens there, the host is not this
    machine's (or does not resolve), the port is not one, or (TLS) gRPC refused the certificate and
    key it was given."""


def tls_credentials(cert: bytes | None, key: bytes | None) -> grpc.ServerCredentials | None:
    """The server side of TLS from a PEM certificate (chain) and its key; None (plaintext) unless both."""
    return grpc.ssl_server_credentials([(key, cert)]) if cert and key else None


def bind(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None = None) -> int:
    """Adds a listening port (TLS with `credentials`, else plaintext); returns the bound port number
    (the free one picked for port 0). PortTaken names the address and why."""
    check_free(address)
    try:
        if credentials is not None:
            return server.add_secure_port(address, credentials)
        return server.add_insecure_port(address)
    except RuntimeError:  # taken between the check and gRPC's bind, or TLS material gRPC refused
        if credentials is not None:
            check_free(address)  # the port is free: what gRPC refused is the certificate or key
            raise PortTaken(
                f"cannot listen on {address}: gRPC refused the TLS certificate or key"
                " (--tls-cert must be a PEM certificate chain and --tls-key its matching private key)"
            ) from None
        if address.rpartition(":")[2] == "0":  # a free port was asked for: the host is at fault
            raise PortTaken(f"cannot listen on {address}: the host is not an address of this machine") from None
        raise PortTaken(f"cannot listen on {address}: the port is taken by another process") from None


def check_free(address: str) -> None:
    """Binds (and releases) `host:port` as gRPC will (SO_REUSEADDR, no SO_REUSEPORT); for port 0,
    which is always free, it checks only that the host resolves.

    A port outside [0, 65535] is refused here: name resolution (and gRPC after it) would silently
    wrap it, e.g. 99999 to 34463, and the server would listen where nobody looks for it.
    """
    host, _, port_text = address.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise PortTaken(f"cannot listen on {address}: {port_text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise PortTaken(f"cannot listen on {address}: the port is outside [0, 65535]")
    try:
        resolved = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise PortTaken(f"cannot listen on {address}: {exc.strerror or exc}") from None
    if port == 0:
        return  # gRPC picks a free port on whichever of the host's addresses it can bind
    for family, kind, proto, _, sockaddr in resolved:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                why = {
                    errno.EADDRINUSE: "the port is taken by another process",
                    errno.EADDRNOTAVAIL: "the host is not an address of this machine",
                    errno.EACCES: "this user may not bind that port",
                }.get(exc.errno or 0, exc.strerror or str(exc))
                raise PortTaken(f"cannot listen on {address}: {why}") from None
