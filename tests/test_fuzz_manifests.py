"""Fuzzing manifest parsing: any bytes either parse into a valid manifest or raise ManifestError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from manifests.format import ManifestError, parse, read
from scripts.fuzz.targets import JSON_VALUES, VALID_MANIFEST, parses_or_refuses, replaced_field_body

pytestmark = pytest.mark.timeout(120)


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_any_bytes(body: bytes) -> None:
    parses_or_refuses(body)


@settings(max_examples=300)
@given(key=st.sampled_from(sorted(VALID_MANIFEST)) | st.text(max_size=10), value=JSON_VALUES)
def test_a_valid_manifest_with_one_field_replaced(key: str, value: object) -> None:
    body = replaced_field_body(key, value)
    if body is not None:  # None: not JSON (a NaN); parse never sees it
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
