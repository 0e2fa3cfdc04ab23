"""Fuzzing manifest parsing: any bytes either parse into a valid manifest or raise ManifestError."""

from __future__ import annotations

import json

import fuzz  # noqa: F401  (loads the deterministic settings profile)
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.synthetic.manifest import build_synthetic
from manifests.format import ManifestError, canonical_bytes, parse, read

pytestmark = pytest.mark.timeout(120)

VALID = json.loads(build_synthetic(3, seed=1).body)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


def parses_or_refuses(body: bytes) -> None:
    """The property: a Manifest whose bytes round-trip, or ManifestError; nothing else escapes."""
    try:
        manifest = parse(body)
    except ManifestError as error:
        assert error.message
        return
    assert canonical_bytes(manifest.data) == body


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_any_bytes(body: bytes) -> None:
    parses_or_refuses(body)


@settings(max_examples=300)
@given(key=st.sampled_from(sorted(VALID)) | st.text(max_size=10), value=JSON_VALUES)
def test_a_valid_manifest_with_one_field_replaced(key: str, value: object) -> None:
    try:
        body = json.dumps({**VALID, key: value}, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    except ValueError:
        return  # not JSON (a NaN); parse never sees it
    parses_or_refuses(body)


@pytest.mark.parametrize("body", [b"[" * 50_000, b'{"a":' * 20_000, b'{"n":1' + b"0" * 5_000 + b"}"])
def test_hostile_json_is_a_manifest_error(body: bytes) -> None:
    """Regression: nesting past the decoder's stack (RecursionError) and integers past Python's
    digit limit (ValueError) escaped parse() as other exceptions."""
    with pytest.raises(ManifestError):
        parse(body)


def test_read_of_hostile_file_is_a_manifest_error(tmp_path) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(b"[" * 50_000)
    with pytest.raises(ManifestError):
        read(path)
