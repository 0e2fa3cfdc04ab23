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
from fuzz import ALLOWED_CODES, doubles, integers, messages, status_of
from hypothesis import given, settings
from hypothesis import strategies as st
from procs import ServiceProcess, policy_argv, wait_serving

from evalfleet.v1 import policy_pb2 as pb

pytestmark = pytest.mark.timeout(300)

EXAMPLES = int(os.environ.get("EVALFLEET_FUZZ_EXAMPLES", "300"))
SERVICE = pb.DESCRIPTOR.services_by_name["Policy"]
ALLOWED_VALUES = {code.value[0] for code in ALLOWED_CODES}
# Names and numbers the `syn` checkpoint's backend accepts, so some observations reach the model.
KNOWN = {
    "key": ["camera", "progress", "step"],
    "dtype": ["uint8", "float32", "float64", "<f4"],
    "shape": [8, 3, 1, 0],
    "step": [0, 1, 4],
    "executed": [0, 4],
}


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


def opening(digest: str) -> st.SearchStrategy[pb.SessionRequest]:
    """A well-formed open for a new episode (random metadata), so the messages after it are served."""
    return messages(pb.EpisodeMeta.DESCRIPTOR).map(
        lambda meta: pb.SessionRequest(open=pb.OpenSession(expected_digest=digest, episode=meta))
    )


VALID_OBSERVATION = pb.Observation(
    step=0,
    images={"camera": pb.Tensor(dtype="uint8", shape=[8, 8, 3], data=bytes(range(192)))},
    state={"progress": pb.FloatVector(values=[0.5]), "step": pb.FloatVector(values=[0.0])},
)


def near_valid_observations() -> st.SearchStrategy[pb.SessionRequest]:
    """The `syn` backend's observation as is or with one part hostile, so that the fuzzing
    reaches tensor decoding and the model, not only the name checks."""
    tensors = st.builds(
        pb.Tensor,
        dtype=st.sampled_from(["uint8", "float32", "", "object", "V8", "<U2"]),
        shape=st.lists(integers(0, 2**32 - 1), max_size=4),
        data=st.binary(max_size=400),
    )
    vectors = st.builds(pb.FloatVector, values=st.lists(doubles(), max_size=3))
    changes = st.one_of(
        st.just(lambda o: None),
        tensors.map(lambda t: lambda o: o.images["camera"].CopyFrom(t)),
        vectors.map(lambda v: lambda o: o.state["progress"].CopyFrom(v)),
        st.sampled_from([1, 4, 2**63, 2**64 - 1]).map(lambda step: lambda o: setattr(o, "step", step)),
        st.sampled_from([4, 2**32 - 1]).map(lambda executed: lambda o: setattr(o, "executed", executed)),
    )

    def changed(change) -> pb.SessionRequest:
        observation = pb.Observation()
        observation.CopyFrom(VALID_OBSERVATION)
        change(observation)
        return pb.SessionRequest(observation=observation)

    return changes.map(changed)


@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_any_session_stream_gets_precise_codes_and_a_refused_open_leaves_no_session(served: Served, data) -> None:
    first = data.draw(st.one_of(opening(served.digest), messages(pb.SessionRequest.DESCRIPTOR, KNOWN)), "first")
    later = st.one_of(messages(pb.SessionRequest.DESCRIPTOR, KNOWN), near_valid_observations())
    rest = data.draw(st.lists(later, max_size=4), "rest")
    sessions_before = served.identity().load.sessions
    code, details, responses = served.session([first, *rest])
    assert code in ALLOWED_CODES, f"Session -> {code.name}: {details}"
    refused_in_band = [r.error for r in responses if r.HasField("error") and r.error.code not in ALLOWED_VALUES]
    assert not refused_in_band, refused_in_band
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
    opening_frame = pb.SessionRequest(open=pb.OpenSession(expected_digest=served.digest, episode=pb.EpisodeMeta()))
    sent = [opening_frame.SerializeToString()] * open_first + frames
    call = served.channel.stream_stream(f"/{SERVICE.full_name}/Session")
    code, details = status_of(lambda: list(call(iter(sent), timeout=20)))
    assert code in ALLOWED_CODES, f"Session({sent!r}) -> {code.name}: {details}"


@pytest.mark.parametrize("open_first", [False, True])
def test_unparseable_stream_message_is_invalid_argument(served: Served, open_first: bool) -> None:
    """Regression: a corrupt frame surfaced from context.read() as grpc's UNKNOWN with a traceback."""
    opening_frame = pb.SessionRequest(open=pb.OpenSession(expected_digest=served.digest, episode=pb.EpisodeMeta()))
    sent = [opening_frame.SerializeToString()] * open_first + [b"\xff\xff\xff"]
    call = served.channel.stream_stream(f"/{SERVICE.full_name}/Session")
    code, details = status_of(lambda: list(call(iter(sent), timeout=20)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "does not parse" in details
