"""Separate hosts on one machine: Linux network namespaces joined by a switch (a bridge).

Each host is a namespace with one interface, ``eth0``, holding its own address on 10.77.0.0/24,
plugged by a veth pair into a bridge that lives in a namespace of its own, so nothing is added to
the machine's own network. Unplugging a host (``cut``) takes its switch port down: the host keeps
its address and routes, and its packets are silently dropped, as when a cable or a top-of-rack
switch fails, rather than refused at once. ``cut_between`` drops only what two hosts send each
other (a partial partition: a worker that still reaches its inference server but not the
scheduler). Processes run on a host through ``ip netns exec``.

Needs root (CAP_NET_ADMIN) and iproute2; ``netns_unavailable`` says why not, for a skip. The
multi-host tests (tests/test_netns_multihost.py) and the LIBERO chaos run (scripts.chaos.libero)
build their hosts with it, and nothing shipped does, so it lives with the tools; it adds nothing to
the machine's own network and imports only the standard library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

SUBNET = "10.77.0"
# A unicast address no host has: frames sent to it are flooded by the bridge and accepted by nobody.
NOWHERE_MAC = "02:ef:00:00:00:00"


class NetnsError(RuntimeError):
    """An ``ip`` command failed; carries the command and what it printed."""


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")


def netns_unavailable() -> str | None:
    """Why these tests cannot run here, or None when they can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    probe = f"efprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except NetnsError as exc:
        return f"cannot create a network namespace: {exc}"
    _ip("netns", "del", probe)
    return None


@dataclass(frozen=True)
class Host:
    """One namespace on the switch; ``address`` is its IPv4 address on ``eth0``."""

    name: str
    namespace: str
    address: str
    port: str  # its veth end on the switch

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` run on this host."""
        return ["ip", "netns", "exec", self.namespace, *command]

    def endpoint(self, port: int) -> str:
        return f"{self.address}:{port}"


class Network:
    """A switch and the hosts on it; ``close`` removes every namespace it made."""

    def __init__(self, tag: str | None = None) -> None:
        self._prefix = f"ef{tag or os.getpid()}"
        self._switch = f"{self._prefix}-switch"
        self.hosts: dict[str, Host] = {}
        _ip("netns", "add", self._switch)
        _ip("-n", self._switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self._switch, "link", "set", "br0", "up")

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self, name: str) -> Host:
        """A new host, plugged in and up, with the next free address."""
        host = Host(name, f"{self._prefix}-{name}", f"{SUBNET}.{len(self.hosts) + 1}", f"p{len(self.hosts)}")
        _ip("netns", "add", host.namespace)
        _ip(
            "-n",
            host.namespace,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            host.port,
            "netns",
            self._switch,
        )
        _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.namespace, "link", "set", "lo", "up")
        _ip("-n", host.namespace, "link", "set", "eth0", "up")
        _ip("-n", self._switch, "link", "set", host.port, "master", "br0")
        _ip("-n", self._switch, "link", "set", host.port, "up")
        self.hosts[name] = host
        return host

    def cut(self, host: Host) -> None:
        """Unplugs ``host``: its packets are dropped at the switch until ``restore``."""
        _ip("-n", self._switch, "link", "set", host.port, "down")

    def restore(self, host: Host) -> None:
        _ip("-n", self._switch, "link", "set", host.port, "up")

    def cut_between(self, a: Host, b: Host) -> None:
        """Drops what ``a`` and ``b`` send each other, by pinning each one's neighbour entry for
        the other to an address nobody has (the kernel here has no tc actions or nftables)."""
        for source, peer in ((a, b), (b, a)):
            _ip(
                "-n",
                source.namespace,
                "neigh",
                "replace",
                peer.address,
                "lladdr",
                NOWHERE_MAC,
                "dev",
                "eth0",
                "nud",
                "permanent",
            )

    def restore_between(self, a: Host, b: Host) -> None:
        for source, peer in ((a, b), (b, a)):
            _ip("-n", source.namespace, "neigh", "del", peer.address, "dev", "eth0")

    def close(self) -> None:
        for namespace in [host.namespace for host in self.hosts.values()] + [self._switch]:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
        self.hosts.clear()
