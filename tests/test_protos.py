"""The committed generated code matches the .proto files (run `make protos` after editing them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
GENERATED = ROOT  # evalfleet/v1/*_pb2*.py, beside the hand-written evalfleet package


@pytest.mark.timeout(120)
def test_generated_code_is_fresh(tmp_path):
    sources = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / "evalfleet" / "v1").glob("*.proto"))
    assert sources, "no .proto files found"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            str(PROTOS),
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            *sources,
        ],
        check=True,
        cwd=PROTOS,
    )
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py*"))
    assert generated
    stale = [str(rel) for rel in generated if (GENERATED / rel).read_bytes() != (tmp_path / rel).read_bytes()]
    assert not stale, f"stale generated code, run `make protos`: {stale}"
