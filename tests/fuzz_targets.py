"""What each fuzzed target is given and what it must do, shared by the CI fuzz tests and
`scripts/fuzz_long.py`.

The CI tests (`tests/test_fuzz_*.py`) run a few hundred examples per target inside pytest; the
script runs the same strategies and the same properties at 100,000 inputs per target against
long-lived servers. Keeping both on one module means the long run explores exactly what CI checks,
and a strategy improved for one is improved for the other. It lives under tests/ because it is
test code (hypothesis is a test dependency, never a product one); the script puts tests/ on
sys.path, as it does for `procs`.

- Scheduler: values a seeded scheduler holds (`SCHEDULER_KNOWN`), so that fuzzed requests get past
  the lookups, and `seed_scheduler`, which creates them.
- Policy: a well-formed open, the `syn` checkpoint's observation with one hostile part, and whole
  session streams.
- Manifests: `parses_or_refuses`, the property of `manifests.format.parse`.
"""

from __future__ import annotations

import json
from typing import Any

from fuzz import ALLOWED_CODES, doubles, integers, messages
from hypothesis import strategies as st

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.v1 import policy_pb2
from manifests.format import ManifestError, canonical_bytes, parse

# The numbers of the allowed codes, for the in-band errors of a policy session.
ALLOWED_VALUES = frozenset(code.value[0] for code in ALLOWED_CODES)

# Scheduler ---------------------------------------------------------------------------------------

SCHEDULER_MANIFEST = build_synthetic(6, seed=1)
# Values the seeded scheduler holds, so that some requests pass the lookups and reach deeper checks.
SCHEDULER_KNOWN: dict[str, list[Any]] = {
    "submission_id": ["good"],
    "task_id": ["good-00000", "good-00001"],
    "task_ids": ["good-00000", "good-00001"],
    "fencing_token": [1, 2, 3],
    "worker_id": ["w1", "w2"],
    "route": ["synthetic"],
    "routes": ["synthetic"],
    "hash": [SCHEDULER_MANIFEST.hash],
    "manifest_hashes": [SCHEDULER_MANIFEST.hash],
    "expected_hash": [SCHEDULER_MANIFEST.hash],
    "body": [SCHEDULER_MANIFEST.body],
    "episode_index": [0, 1, 2, 3],
    "batch_size": [3],
    "max_attempts": [3],
}


def seed_scheduler(address: str) -> None:
    """Gives a fresh scheduler what `SCHEDULER_KNOWN` names: a submission, a lease and a stored result."""
    client = SchedulerClient(address)
    try:
        client.submit([SCHEDULER_MANIFEST], "synthetic", batch_size=3, submission_id="good")
        lease = client.claim("w1", ["synthetic"])
        assert lease is not None
        client.report_episode(lease, lease.episodes[0], True)
    finally:
        client.close()


# Policy ------------------------------------------------------------------------------------------

# Names and numbers the `syn` checkpoint's backend accepts, so some observations reach the model.
POLICY_KNOWN: dict[str, list[Any]] = {
    "key": ["camera", "progress", "step"],
    "dtype": ["uint8", "float32", "float64", "<f4"],
    "shape": [8, 3, 1, 0],
    "step": [0, 1, 4],
    "executed": [0, 4],
}

VALID_OBSERVATION = policy_pb2.Observation(
    step=0,
    images={"camera": policy_pb2.Tensor(dtype="uint8", shape=[8, 8, 3], data=bytes(range(192)))},
    state={"progress": policy_pb2.FloatVector(values=[0.5]), "step": policy_pb2.FloatVector(values=[0.0])},
)


def opening(digest: str) -> st.SearchStrategy[policy_pb2.SessionRequest]:
    """A well-formed open for a new episode (random metadata), so the messages after it are served."""
    return messages(policy_pb2.EpisodeMeta.DESCRIPTOR).map(
        lambda meta: policy_pb2.SessionRequest(open=policy_pb2.OpenSession(expected_digest=digest, episode=meta))
    )


def near_valid_observations() -> st.SearchStrategy[policy_pb2.SessionRequest]:
    """The `syn` backend's observation as is or with one part hostile, so that the fuzzing
    reaches tensor decoding and the model, not only the name checks."""
    tensors = st.builds(
        policy_pb2.Tensor,
        dtype=st.sampled_from(["uint8", "float32", "", "object", "V8", "<U2"]),
        shape=st.lists(integers(0, 2**32 - 1), max_size=4),
        data=st.binary(max_size=400),
    )
    vectors = st.builds(policy_pb2.FloatVector, values=st.lists(doubles(), max_size=3))
    changes = st.one_of(
        st.just(lambda o: None),
        tensors.map(lambda t: lambda o: o.images["camera"].CopyFrom(t)),
        vectors.map(lambda v: lambda o: o.state["progress"].CopyFrom(v)),
        st.sampled_from([1, 4, 2**63, 2**64 - 1]).map(lambda step: lambda o: setattr(o, "step", step)),
        st.sampled_from([4, 2**32 - 1]).map(lambda executed: lambda o: setattr(o, "executed", executed)),
    )

    def changed(change: Any) -> policy_pb2.SessionRequest:
        observation = policy_pb2.Observation()
        observation.CopyFrom(VALID_OBSERVATION)
        change(observation)
        return policy_pb2.SessionRequest(observation=observation)

    return changes.map(changed)


def session_streams(digest: str) -> st.SearchStrategy[list[policy_pb2.SessionRequest]]:
    """The messages of one session stream: an open (well-formed or hostile), then up to four more."""
    first = st.one_of(opening(digest), messages(policy_pb2.SessionRequest.DESCRIPTOR, POLICY_KNOWN))
    later = st.one_of(messages(policy_pb2.SessionRequest.DESCRIPTOR, POLICY_KNOWN), near_valid_observations())
    return st.tuples(first, st.lists(later, max_size=4)).map(lambda parts: [parts[0], *parts[1]])


def opening_frame(digest: str) -> bytes:
    """A serialized well-formed open, for streams whose later frames are arbitrary bytes."""
    request = policy_pb2.SessionRequest(
        open=policy_pb2.OpenSession(expected_digest=digest, episode=policy_pb2.EpisodeMeta())
    )
    return request.SerializeToString()


def refused_in_band(responses: list[policy_pb2.SessionResponse]) -> list[policy_pb2.SessionError]:
    """The in-band session errors whose code is not an allowed one (UNKNOWN or INTERNAL)."""
    return [r.error for r in responses if r.HasField("error") and r.error.code not in ALLOWED_VALUES]


# Manifests ---------------------------------------------------------------------------------------

VALID_MANIFEST: dict[str, Any] = json.loads(build_synthetic(3, seed=1).body)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
HOSTILE_JSON = [b"[" * 50_000, b'{"a":' * 20_000, b'{"n":1' + b"0" * 5_000 + b"}", b"\xff\xfe{}", b'{"a": NaN}']


def parses_or_refuses(body: bytes) -> str:
    """The property: a Manifest whose bytes round-trip, or ManifestError; nothing else escapes.
    Returns "parsed" or "ManifestError"."""
    try:
        manifest = parse(body)
    except ManifestError as error:
        assert error.message
        return "ManifestError"
    assert canonical_bytes(manifest.data) == body
    return "parsed"


def replaced_field_body(key: str, value: object) -> bytes | None:
    """The valid manifest with one field replaced, as canonical-looking JSON; None when the value
    is not JSON (a NaN), which parse never sees."""
    try:
        return json.dumps(
            {**VALID_MANIFEST, key: value}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode()
    except ValueError:
        return None


def manifest_bodies() -> st.SearchStrategy[bytes]:
    """Any bytes, the valid manifest with one field replaced, or JSON built to break decoders."""
    replaced = st.builds(
        replaced_field_body, st.sampled_from(sorted(VALID_MANIFEST)) | st.text(max_size=10), JSON_VALUES
    ).filter(lambda body: body is not None)
    return st.one_of(st.binary(max_size=400), replaced, st.sampled_from(HOSTILE_JSON))
