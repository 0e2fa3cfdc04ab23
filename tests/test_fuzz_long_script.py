"""`python -m scripts.fuzz.long` at a tiny --count, so the 100,000-per-target run cannot rot: it
starts the real servers, fuzzes every RPC of both services and both parsers, and reports each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalfleet.v1 import policy_pb2, scheduler_pb2

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scripts.fuzz.long", *args], cwd=REPO, capture_output=True, text=True, timeout=240
    )


def test_every_rpc_and_parser_is_fuzzed_and_reported(tmp_path: Path) -> None:
    done = run("--count", "4", "--chunk", "2", "--seed", "5", "--out-dir", str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    expected = {
        *(f"Scheduler.{m}" for m in scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].methods_by_name),
        *(f"Policy.{m}" for m in policy_pb2.DESCRIPTOR.services_by_name["Policy"].methods_by_name),
        "manifest",
        "checkpoint",
    }
    assert set(results["targets"]) == expected
    assert {name: t["inputs"] for name, t in results["targets"].items()} == dict.fromkeys(expected, 4)
    assert results["finished"] and results["failures"] == 0 and results["seed"] == 5
    assert "replay all: python -m scripts.fuzz.long --seed 5 --count 4" in done.stdout


def test_an_unknown_target_is_one_line() -> None:
    done = run("--rpc", "NoSuchRpc")
    assert done.returncode != 0 and "--rpc 'NoSuchRpc' names none of" in done.stderr
    assert "Traceback" not in done.stderr
