"""A peer that accepts connections but never answers (a hung or partitioned host) is *unavailable*
to both clients, so callers retry it as an outage instead of failing on an unknown error."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from evalfleet.policy_api.client import PolicyClient
from evalfleet.policy_api.errors import PolicyUnavailable
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.scheduler_api.errors import Unavailable

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def silent_peer() -> Iterator[str]:
    """A listening socket nobody accepts from: TCP connects, HTTP/2 never starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_scheduler_call_past_its_deadline_is_unavailable(silent_peer: str) -> None:
    with SchedulerClient(silent_peer, timeout=0.5) as client:
        with pytest.raises(Unavailable, match="Deadline"):
            client.claim("w1", ["synthetic"])


def test_policy_call_past_its_deadline_is_unavailable(silent_peer: str) -> None:
    with PolicyClient(silent_peer, timeout_s=0.5) as client:
        with pytest.raises(PolicyUnavailable):
            client.identity()
