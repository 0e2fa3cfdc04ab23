"""Fuzzing the Scheduler service: any request, however hostile, gets a precise status code and a
refused one changes nothing. One real scheduler process serves the whole module, so the examples
also hit state built up by the accepted requests before them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from procs import ServiceProcess, db_fingerprint, scheduler_argv, wait_serving

from evalfleet.v1 import scheduler_pb2 as pb
from scripts.fuzz.strategies import ALLOWED_CODES, messages, status_of
from scripts.fuzz.targets import SCHEDULER_KNOWN, seed_scheduler

pytestmark = pytest.mark.timeout(300)

# Per method; EVALFLEET_FUZZ_EXAMPLES raises it for a longer local search.
EXAMPLES = int(os.environ.get("EVALFLEET_FUZZ_EXAMPLES", "300"))
SERVICE = pb.DESCRIPTOR.services_by_name["Scheduler"]


class Served:
    """The long-lived scheduler under test and a channel to it."""

    def __init__(self, proc: ServiceProcess, db: Path) -> None:
        self.proc = proc
        self.db = db
        self.channel = grpc.insecure_channel(proc.address)

    def call(self, method: str, request: object) -> tuple[grpc.StatusCode, str]:
        """Calls one method with a deadline: a hang shows up as DEADLINE_EXCEEDED."""
        rpc = self.channel.unary_unary(
            f"/{SERVICE.full_name}/{method}",
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=None,
        )
        return status_of(lambda: rpc(request, timeout=20))

    def raw(self, method: str, body: bytes) -> tuple[grpc.StatusCode, str]:
        """Sends bytes as the serialized request, as a client with a broken encoder would."""
        rpc = self.channel.unary_unary(f"/{SERVICE.full_name}/{method}")
        return status_of(lambda: rpc(body, timeout=20))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One scheduler for the module, seeded with a submission, a lease and a stored result."""
    root = tmp_path_factory.mktemp("fuzz-scheduler")
    db = root / "scheduler.sqlite"
    proc = ServiceProcess(scheduler_argv(db, "--lease-seconds", "3600"), root / "scheduler.log")
    proc.start()
    try:
        wait_serving(proc.address)
        seed_scheduler(proc.address)
        served = Served(proc, db)
        yield served
        served.channel.close()
    finally:
        proc.kill()


def check(served: Served, method: str, request: object) -> None:
    """The property: an allowed code, and a refused request leaves every table as it was."""
    before = db_fingerprint(served.db)
    code, details = served.call(method, request)
    assert code in ALLOWED_CODES, f"{method}({request!r:.2000}) -> {code.name}: {details}"
    if code != grpc.StatusCode.OK:
        assert db_fingerprint(served.db) == before, f"refused {method} ({code.name}: {details}) changed the database"
    assert served.proc.running


@pytest.mark.parametrize("method", sorted(SERVICE.methods_by_name))
def test_any_request_gets_a_precise_code_and_a_refusal_changes_nothing(served: Served, method: str) -> None:
    descriptor = SERVICE.methods_by_name[method].input_type

    @settings(max_examples=EXAMPLES)
    @given(request=messages(descriptor, SCHEDULER_KNOWN))
    def run(request: object) -> None:
        check(served, method, request)

    run()


@settings(max_examples=EXAMPLES * 2)
@given(method=st.sampled_from(sorted(SERVICE.methods_by_name)), body=st.binary(max_size=300))
def test_any_bytes_as_a_request_are_refused_as_invalid_argument_or_parsed(
    served: Served, method: str, body: bytes
) -> None:
    """Bytes that are not a protobuf message are the caller's error (evalfleet.wire), not UNKNOWN."""
    before = db_fingerprint(served.db)
    code, details = served.raw(method, body)
    assert code in ALLOWED_CODES, f"{method}({body!r}) -> {code.name}: {details}"
    if code != grpc.StatusCode.OK:
        assert db_fingerprint(served.db) == before


def test_unparseable_bytes_get_invalid_argument_naming_the_parse_error(served: Served) -> None:
    """Regression: grpc answered UNKNOWN (DecodeError in its deserializer) and logged a traceback."""
    code, details = served.raw("Submit", b"\xff\xff\xff")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "does not parse" in details
