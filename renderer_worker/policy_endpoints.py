"""The inference servers a worker can use, what each serves, and which one takes the next episode.

Identities are resolved with ``GetIdentity`` before every claim, so the claim filter lists exactly
the checkpoints reachable now: a server restarted with another checkpoint, or gone, stops attracting
tasks it cannot serve. Servers that answered last time are asked again at once, concurrently; one
that did not is asked in the background, and is back in the filter from the first claim after it
answers: a dead inference host (which may not even refuse, only stay silent until the timeout) then
never holds up the worker's loop. Each episode goes to the least-loaded server that serves its
task's checkpoint, counting the sessions the server reported at the last refresh plus those this
worker has opened there since.

The identity also says how an episode must be run and what the results will be marked with: the
chunk length, the actions per chunk its checkpoint declares (``execute_steps``), the dtype its
chunks come in (``action_dtype``), and, for a
``remote`` backend, the remote's dialect, URL and the handshake it answered ("remote, unsealed").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from evalfleet.policy_api.client import PolicyClient
from evalfleet.policy_api.errors import PolicyError
from evalfleet.v1 import policy_pb2
from evalfleet.v1 import scheduler_pb2 as pb

log = logging.getLogger(__name__)


@dataclass
class Endpoint:
    address: str
    digest: str = ""
    sessions: int = 0
    reachable: bool = False
    probed: bool = False
    # What the served model consumes: episodes send exactly these cameras and state entries.
    cameras: tuple[str, ...] = ()
    state: tuple[str, ...] = ()
    chunk_length: int = 0
    # Actions per chunk the checkpoint's deployment protocol executes; 0: the whole chunk.
    execute_steps: int = 0
    # The dtype its chunks come in (the identity's action_dtype); the episode executes them in it.
    action_dtype: str = "float32"
    # Set when the server forwards to a remote policy server: what results are marked with.
    remote: pb.RemotePolicy | None = None
    # The actions the checkpoint was trained on (GetIdentityResponse.action_range), if declared.
    action_range: policy_pb2.ActionRange | None = None

    def execute_steps_for(self, lease: pb.Lease) -> int:
        """Actions of each chunk an episode of ``lease`` executes here, as a count: the submission's
        override, else the checkpoint's declared value, where 0 means the whole chunk. A count past
        the chunk executes the whole chunk, and says so."""
        requested = lease.execute_steps if lease.HasField("execute_steps") else self.execute_steps
        if not self.chunk_length:
            return requested
        return self.chunk_length if requested == 0 else min(requested, self.chunk_length)


class PolicyEndpoints:
    def __init__(
        self,
        addresses: Sequence[str],
        token: str | None = None,
        timeout_s: float = 3.0,
        *,
        tls_ca: bytes | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("at least one --policy endpoint is required")
        self._endpoints = {address: Endpoint(address) for address in dict.fromkeys(addresses)}
        self._clients = {
            address: PolicyClient(address, token, timeout_s=timeout_s, tls_ca=tls_ca) for address in self._endpoints
        }
        self._opened_since_refresh = dict.fromkeys(self._endpoints, 0)
        self._lock = threading.Lock()
        self._probes = ThreadPoolExecutor(max_workers=len(self._endpoints), thread_name_prefix="policy-probe")
        self._background: dict[str, Future[None]] = {}

    def close(self) -> None:
        self._probes.shutdown(cancel_futures=True)
        for client in self._clients.values():
            client.close()

    def refresh(self) -> None:
        """Asks every server for its identity and load: those that answered last time (or were
        never asked) now, the others in the background; unreachable ones serve nothing for now."""
        with self._lock:
            inline = [a for a, e in self._endpoints.items() if e.reachable or not e.probed]
            silent = [a for a in self._endpoints if a not in inline and a not in self._background]
            for address in silent:
                self._background[address] = self._probes.submit(self._probe, address)
        list(self._probes.map(self._probe, inline))

    def _probe(self, address: str) -> None:
        client, endpoint = self._clients[address], self._endpoints[address]
        try:
            # A restarted server is a new instance to learn here, not an error.
            client.unpin()
            response = client.identity()
        except PolicyError as exc:
            with self._lock:
                if endpoint.reachable or not endpoint.probed:
                    # Down, or answering what no evalfleet server would (an identity that is not its hash).
                    log.warning("policy server %s not usable: %s", address, exc)
                endpoint.reachable, endpoint.probed, endpoint.digest = False, True, ""
                self._background.pop(address, None)
            return
        with self._lock:
            if endpoint.digest and endpoint.digest != response.digest:
                log.warning("policy server %s now serves %s (was %s)", address, response.digest, endpoint.digest)
            elif not endpoint.reachable and endpoint.probed:
                log.info("policy server %s reachable again", address)
            endpoint.reachable, endpoint.probed = True, True
            endpoint.digest, endpoint.sessions = response.digest, response.load.sessions
            endpoint.cameras = tuple(camera.name for camera in response.identity.cameras)
            endpoint.state = tuple(entry.name for entry in response.identity.state)
            endpoint.chunk_length = response.identity.chunk_length
            endpoint.execute_steps = response.identity.execute_steps
            endpoint.action_dtype = response.identity.action_dtype or "float32"
            endpoint.remote = remote_policy(response)
            endpoint.action_range = response.action_range if response.HasField("action_range") else None
            self._opened_since_refresh[address] = 0
            self._background.pop(address, None)

    def digests(self) -> list[str]:
        """Checkpoint identities served right now (the claim filter)."""
        with self._lock:
            return sorted({e.digest for e in self._endpoints.values() if e.reachable})

    def choose(self, checkpoint: str) -> Endpoint | None:
        """The least-loaded reachable server for ``checkpoint`` (any, when the task names none)."""
        with self._lock:
            candidates = [
                e for e in self._endpoints.values() if e.reachable and (not checkpoint or e.digest == checkpoint)
            ]
            if not candidates:
                return None
            best = min(candidates, key=lambda e: (e.sessions + self._opened_since_refresh[e.address], e.address))
            self._opened_since_refresh[best.address] += 1
            return best

    def versions(self) -> dict[str, str]:
        return {e.address: e.digest for e in self._endpoints.values()}


def remote_policy(response: policy_pb2.GetIdentityResponse) -> pb.RemotePolicy | None:
    """What a result served by this identity is marked with when a remote policy server answered."""
    if not response.identity.HasField("remote"):
        return None
    remote = response.identity.remote
    return pb.RemotePolicy(
        dialect=remote.dialect,
        url=remote.url,
        handshake_sha256=response.remote_handshake_sha256 or remote.handshake_sha256,
        sealed=remote.sealed,
    )
