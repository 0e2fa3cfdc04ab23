"""Fuzzing the Policy service: any request and any session stream, however hostile, gets a precise
status code (in the call's status and in every in-band SessionError), and a refused open leaves no
session behind. One real inference server serves the whole module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from procs import ServiceProcess, policy_argv, wait_serving

from evalfleet.v1 import policy_pb2 as pb
from scripts.fuzz.strategies import ALLOWED_CODES, status_of
from scripts.fuzz.targets import opening_frame, refused_in_band, session_streams

pytestmark = pytest.mark.timeout(300)

EXAMPLES = int(os.environ.get("EVALFLEET_FUZZ_EXAMPLES", "300"))
SERVICE = pb.DESCRIPTOR.services_by_name["Policy"]


class Served:
    """The long-lived inference server under test, its identity digest and a channel to it."""

    def __init__(self, proc: ServiceProcess) -> None:
        self.proc = proc
        self.channel = grpc.insecure_channel(proc.address)
        identity = self.channel.unary_unary(
            f"/{SERVICE.full_name}/GetIdentity",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.GetIdentityResponse.FromString,
        )
        self.identity = lambda: identity(pb.GetIdentityRequest(), timeout=20)
        self.digest = self.identity().digest

    def session(self, requests: list[pb.SessionRequest]) -> tuple[grpc.StatusCode, str, list[pb.SessionResponse]]:
        """Sends the messages on one stream; returns its status and every response."""
        call = self.channel.stream_stream(
            f"/{SERVICE.full_name}/Session",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.SessionResponse.FromString,
        )
        responses: list[pb.SessionResponse] = []
        code, details = status_of(lambda: responses.extend(call(iter(requests), timeout=20)))
        return code, details, responses


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, checkpoint_root: Path) -> Iterator[Served]:
    # Every example may open a session and leave it detached: room for all of them, so that late
    # examples are served rather than refused as TOO_MANY_SESSIONS.
    argv = policy_argv("syn", checkpoint_root, "--max-sessions", "100000")
    proc = ServiceProcess(argv, tmp_path_factory.mktemp("fuzz-policy") / "policy.log")
    proc.start()
    try:
        wait_serving(proc.address)
        served = Served(proc)
        yield served
        served.channel.close()
    finally:
        proc.kill()


@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_any_session_stream_gets_precise_codes_and_a_refused_open_leaves_no_session(served: Served, data) -> None:
    stream = data.draw(session_streams(served.digest), "stream")
    sessions_before = served.identity().load.sessions
    code, details, responses = served.session(stream)
    assert code in ALLOWED_CODES, f"Session -> {code.name}: {details}"
    unknown_in_band = refused_in_band(responses)
    assert not unknown_in_band, unknown_in_band
    if not any(r.HasField("opened") for r in responses):
        assert served.identity().load.sessions <= sessions_before
    assert served.proc.running


@settings(max_examples=EXAMPLES)
@given(body=st.binary(max_size=300))
def test_any_bytes_to_get_identity(served: Served, body: bytes) -> None:
    rpc = served.channel.unary_unary(f"/{SERVICE.full_name}/GetIdentity")
    code, details = status_of(lambda: rpc(body, timeout=20))
    assert code in ALLOWED_CODES, f"GetIdentity({body!r}) -> {code.name}: {details}"


@settings(max_examples=EXAMPLES)
@given(open_first=st.booleans(), frames=st.lists(st.binary(max_size=300), min_size=1, max_size=4))
def test_any_bytes_on_a_session_stream(served: Served, open_first: bool, frames: list[bytes]) -> None:
    """Stream messages that do not parse are refused by the servicer as INVALID_ARGUMENT."""
    sent = [opening_frame(served.digest)] * open_first + frames
    call = served.channel.stream_stream(f"/{SERVICE.full_name}/Session")
    code, details = status_of(lambda: list(call(iter(sent), timeout=20)))
    assert code in ALLOWED_CODES, f"Session({sent!r}) -> {code.name}: {details}"


@pytest.mark.parametrize("open_first", [False, True])
def test_unparseable_stream_message_is_invalid_argument(served: Served, open_first: bool) -> None:
    """Regression: a corrupt frame surfaced from context.read() as grpc's UNKNOWN with a traceback."""
    sent = [opening_frame(served.digest)] * open_first + [b"\xff\xff\xff"]
    call = served.channel.stream_stream(f"/{SERVICE.full_name}/Session")
    code, details = status_of(lambda: list(call(iter(sent), timeout=20)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "does not parse" in details
