"""`scheduler status --watch` against a real server: quiet lines when piped, live bars on a terminal."""

from __future__ import annotations

import os
import pty
import queue
import re
import subprocess
import sys
import threading
import time
from typing import IO

import pytest
from procs import cli

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient

pytestmark = pytest.mark.timeout(120)
WAIT_S = 30.0


def _finish(client: SchedulerClient) -> None:
    lease = client.claim("w1", ["synthetic"])
    for index in lease.episodes:
        client.report_episode(lease, index, index % 2 == 0, wall_seconds=0.1)
    client.complete(lease)


def _lines(stream: IO[str]) -> queue.Queue[str | None]:
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for text in stream:
            lines.put(text.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _next_matching(lines: queue.Queue[str | None], pattern: str, seen: list[str]) -> str:
    deadline = time.monotonic() + WAIT_S
    while True:
        text = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        assert text is not None, f"watch exited before printing {pattern!r}; saw {seen}"
        seen.append(text)
        if re.search(pattern, text):
            return text


def test_piped_watch_prints_a_line_per_change_and_exits_when_done(scheduler):
    client = scheduler.client()
    client.submit([build_synthetic(6, seed=1)], "synthetic", batch_size=2, submission_id="wat")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "status",
            "wat",
            "--watch",
            "--interval",
            "0.1",
            "--server",
            scheduler.address,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines, seen = _lines(proc.stdout), []
        _next_matching(lines, r" wat 0/6 episodes .* tasks 3 pending 0 leased", seen)
        _finish(client)
        _next_matching(
            lines, r" wat 2/6 episodes \(33.3%\) success 50.0% .* tasks 2 pending 0 leased 1 succeeded", seen
        )
        _finish(client)
        _finish(client)
        last = _next_matching(
            lines, r" wat 6/6 episodes \(100.0%\) .* ETA done tasks 0 pending 0 leased 3 succeeded", seen
        )
        _next_matching(lines, r"no task pending or leased", seen)
        assert proc.wait(WAIT_S) == 0
    finally:
        proc.kill()
    progress = [re.sub(r"^\S+ | [\d.]+ ep/s ETA \S+", "", text) for text in seen[:-1]]
    assert len(progress) == len(set(progress)), f"a line repeated an unchanged state: {seen}"
    assert "\x1b[" not in last, "no terminal escapes when piped"


def test_terminal_watch_draws_bars_per_submission_and_task(scheduler):
    client = scheduler.client()
    manifests = [
        build_synthetic(2, seed=1, task="open_drawer", setting="clean"),
        build_synthetic(2, seed=2, task="open_drawer", setting="randomized"),
    ]
    client.submit(manifests, "synthetic", batch_size=2, submission_id="tty")
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "status",
            "tty",
            "--watch",
            "--interval",
            "0.1",
            "--server",
            scheduler.address,
        ],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
    )
    os.close(terminal)
    output = bytearray()
    chunks: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        while True:
            try:
                data = os.read(controller, 4096)
            except OSError:
                data = b""
            chunks.put(data)
            if not data:
                return

    threading.Thread(target=pump, daemon=True).start()

    def read_until(needle: bytes) -> None:
        deadline = time.monotonic() + WAIT_S
        while needle not in output:
            data = chunks.get(timeout=max(0.01, deadline - time.monotonic()))
            assert data, f"watch exited before drawing {needle!r}: {bytes(output)[-2000:]!r}"
            output.extend(data)

    try:
        read_until(b"randomized")
        _finish(client)
        _finish(client)
        assert proc.wait(WAIT_S) == 0
        while data := chunks.get(timeout=WAIT_S):
            output.extend(data)
    finally:
        proc.kill()
        os.close(controller)
    text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", bytes(output)).decode(errors="replace")
    assert "\x1b[" in output.decode(errors="replace"), "a terminal gets a live display"
    for expected in ("tty", "open_drawer", "clean", "randomized", "ep/s", "ETA done", "success 50.0%"):
        assert expected in text, (expected, text[-1500:])


def test_watch_refuses_bad_input_with_exit_2(scheduler):
    env = {"EVALFLEET_SCHEDULER": scheduler.address}
    run = cli("status", "--watch", "--json", env=env)
    assert run.returncode == 2 and "--json" in run.stderr
    run = cli("status", "--watch", "--interval", "0", env=env)
    assert run.returncode == 2 and "--interval" in run.stderr
    run = cli("status", "nope", "--watch", env=env)
    assert run.returncode == 2 and "submission_id" in run.stderr
