"""Fuzzing checkpoint parsing: whatever a checkpoint folder holds, `inference-server` verifies it
and builds its backend, or refuses it with CheckpointError or BackendError (one line naming the
file or the backend, exit 2); no other exception, so never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings

from benchmarks.synthetic.adapter import REFERENCE_POLICY_SETTINGS
from inference_server.checkpoint import INDEX_NAME, MANIFEST_FORMAT, MANIFEST_NAME, CheckpointError, load
from scripts.fuzz.targets import (
    SEAL,
    CheckpointCase,
    check_checkpoint_case,
    checkpoint_cases,
    loads_or_refuses,
    write_checkpoint,
)

pytestmark = pytest.mark.timeout(120)

VALID = {"format": MANIFEST_FORMAT, "backend": "deterministic", "settings": REFERENCE_POLICY_SETTINGS, "sha256": SEAL}


@settings(max_examples=300)
@given(case=checkpoint_cases())
def test_any_checkpoint_folder_loads_or_is_refused_by_name(tmp_path_factory: pytest.TempPathFactory, case) -> None:
    check_checkpoint_case(tmp_path_factory.mktemp("checkpoint-fuzz"), case)


def test_the_valid_case_loads(tmp_path: Path) -> None:
    """The cases start from a folder that loads, so a hostile part is what a refusal is about."""
    write_checkpoint(tmp_path, CheckpointCase(VALID, None))
    assert loads_or_refuses(tmp_path) == "loaded"


@pytest.mark.parametrize(
    "body",
    [b"[" * 50_000, b"\xff\xfe{}", b'{"n":1' + b"0" * 5_000 + b"}"],
    ids=["nested-past-the-decoder-stack", "not-utf8", "integer-past-the-digit-limit"],
)
def test_a_manifest_that_is_not_json_is_a_checkpoint_error_naming_it(tmp_path: Path, body: bytes) -> None:
    """Regression: RecursionError escaped as a traceback, and UnicodeDecodeError and the digit
    limit's ValueError as a bare line that did not name the file."""
    (tmp_path / MANIFEST_NAME).write_bytes(body)
    with pytest.raises(CheckpointError, match=f"{MANIFEST_NAME} is not JSON"):
        load(tmp_path)


@pytest.mark.parametrize("backend", [".x:factory", "..:f"])
def test_a_relative_backend_reference_is_a_backend_error(tmp_path: Path, backend: str) -> None:
    """Regression: importlib's TypeError for a relative module name escaped resolve()."""
    write_checkpoint(tmp_path, CheckpointCase({**VALID, "backend": backend}, None))
    assert loads_or_refuses(tmp_path) == "BackendError"


@pytest.mark.parametrize(
    "index",
    [b"[1,2", b"[" * 50_000, json.dumps([1]).encode(), json.dumps({"weight_map": [1]}).encode(),
     json.dumps({"weight_map": {"w": 5}}).encode()],
    ids=["malformed", "nested", "not-an-object", "map-not-an-object", "shard-not-a-name"],
)  # fmt: skip
def test_a_sealed_index_that_is_not_a_weight_map_is_a_checkpoint_error(tmp_path: Path, index: bytes) -> None:
    """Regression: a sealed shard index that did not parse, or was not an object mapping tensor
    names to shard files, escaped as JSONDecodeError, RecursionError or AttributeError."""
    write_checkpoint(tmp_path, CheckpointCase(VALID, index))
    with pytest.raises(CheckpointError, match=INDEX_NAME):
        load(tmp_path)
