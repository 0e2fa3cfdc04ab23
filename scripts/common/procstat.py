"""What a process costs and what runs under it, read from ``/proc`` (Linux): the CPU seconds and
memory the benchmarks report per server and per episode process, and the episode processes under a
renderer worker, which the LIBERO benchmarks add up and the LIBERO chaos run kills.

Standard library only: the Labtasker baseline measures its server with it in a virtual environment
without gRPC, so both systems are measured alike.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid``: the process's own CPU, not its clients'."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mib(pid: int) -> float:
    """VmRSS: the resident set now."""
    return _status_mib(pid, "VmRSS")


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the resident-set high-water mark over the process's life."""
    return _status_mib(pid, "VmHWM")


def _status_mib(pid: int, key: str) -> float:
    """A memory line of /proc/PID/status in MiB; NaN where the kernel does not report it."""
    match = re.search(rf"^{key}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    return int(match.group(1)) / 1024 if match else math.nan


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


def episode_processes(worker_pid: int) -> list[int]:
    """The worker's episode processes: the processes multiprocessing spawned under it (its resource
    tracker aside)."""
    pids = []
    for pid in descendants(worker_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"multiprocessing.spawn" in cmdline and b"resource_tracker" not in cmdline:
            pids.append(pid)
    return pids
