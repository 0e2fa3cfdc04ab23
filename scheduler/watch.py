"""`scheduler status --watch`: live progress of submissions until no task is pending or leased.

On a terminal it draws rich progress bars, one per submission and one per benchmark task x setting
under it, with episodes/s and an ETA. Piped or redirected it prints one plain line per submission
only when that submission's progress changed, so logs stay short and greppable. What the
broken-setup canary found, and a pause, are printed once each as they appear. Rates are measured
here, over a sliding window of polls, because the scheduler keeps no rate history.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.scheduler_api.vocabulary import TASK_STATE_NAMES, success_percent
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import canary, sequential_report

RATE_WINDOW_S = 60.0


class Rate:
    """Episodes per second over the last ``window_s`` seconds of samples."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self._window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, now: float, completed: int) -> None:
        self._samples.append((now, completed))
        while len(self._samples) > 2 and now - self._samples[0][0] > self._window_s:
            self._samples.popleft()

    @property
    def per_second(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, c0), (t1, c1) = self._samples[0], self._samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0

    def eta_text(self, remaining: int) -> str:
        if remaining <= 0:
            return "done"
        rate = self.per_second
        return format_seconds(remaining / rate) if rate > 0 else "-"


def format_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


@dataclass(frozen=True)
class Progressed:
    """One submission's state at one poll: what a line or a bar shows."""

    status: pb.SubmissionStatus
    summary: pb.GetSummaryResponse

    @property
    def active(self) -> bool:
        return self.status.tasks.pending + self.status.tasks.leased > 0


def poll(client: SchedulerClient, submission_id: str) -> list[Progressed]:
    return [Progressed(sub, client.summary(sub.submission_id)) for sub in client.status(submission_id).submissions]


def line(item: Progressed, rate: Rate) -> str:
    sub = item.status
    done, planned = sub.episodes_completed, sub.episodes_planned
    success = success_percent(sub.episodes_succeeded, done)
    counts = " ".join(f"{getattr(sub.tasks, name)} {name}" for name in TASK_STATE_NAMES)
    return (
        f"{time.strftime('%H:%M:%S')} {sub.submission_id} {done}/{planned} episodes"
        f" ({100.0 * done / planned if planned else 0:.1f}%) success {success}"
        f" {rate.per_second:.2f} ep/s ETA {rate.eta_text(planned - done)} tasks {counts}"
    )


def note(sub: pb.SubmissionStatus) -> str:
    """What the canary found, where a sequential evaluation stands and whether the submission is
    paused; '' while there is nothing to say."""
    parts = []
    if sub.canary.verdict in (canary.HEALTHY, canary.BROKEN):
        parts.append(canary.summary(sub.canary))
    if sub.HasField("sequential"):
        parts.append(sequential_report.state_line(sub.sequential))
    if sub.paused:
        parts.append(
            f"PAUSED: its pending tasks wait for `scheduler resume {sub.submission_id}` "
            f"or `scheduler cancel {sub.submission_id}`"
        )
    return f"{sub.submission_id}: {'; '.join(parts)}" if parts else ""


def watch(
    client: SchedulerClient,
    submission_id: str,
    interval_s: float,
    out: TextIO,
    live: bool,
) -> int:
    """Polls until no watched task is pending or leased; returns the exit status (0)."""
    rates: dict[str, Rate] = {}
    if live:
        return _watch_live(client, submission_id, interval_s, rates, Console(file=out))
    printed: dict[str, tuple[int, tuple[int, ...]]] = {}
    notes: dict[str, str] = {}
    while True:
        items = poll(client, submission_id)
        now = time.monotonic()
        for item in items:
            sub = item.status
            if (text := note(sub)) and notes.get(sub.submission_id) != text:
                notes[sub.submission_id] = text
                print(f"{time.strftime('%H:%M:%S')} {text}", file=out, flush=True)
            rate = rates.setdefault(sub.submission_id, Rate())
            rate.add(now, sub.episodes_completed)
            key = (sub.episodes_completed, tuple(getattr(sub.tasks, name) for name in TASK_STATE_NAMES))
            if printed.get(sub.submission_id) != key:
                printed[sub.submission_id] = key
                print(line(item, rate), file=out, flush=True)
        if not any(item.active for item in items):
            print(f"{time.strftime('%H:%M:%S')} no task pending or leased", file=out, flush=True)
            return 0
        time.sleep(interval_s)


def _watch_live(
    client: SchedulerClient,
    submission_id: str,
    interval_s: float,
    rates: dict[str, Rate],
    console: Console,
) -> int:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:>6.0f}/{task.total:<6.0f}"),
        TextColumn("{task.fields[detail]}"),
        console=console,
    )
    bars: dict[str, TaskID] = {}
    notes: dict[str, str] = {}
    with Live(Group(progress), console=console, refresh_per_second=4, transient=False):
        while True:
            items = poll(client, submission_id)
            now = time.monotonic()
            for item in items:
                _update_bars(progress, bars, item, rates, now)
                if (text := note(item.status)) and notes.get(item.status.submission_id) != text:
                    notes[item.status.submission_id] = text
                    console.print(text)
            if not any(item.active for item in items):
                return 0
            time.sleep(interval_s)


def _update_bars(
    progress: Progress, bars: dict[str, TaskID], item: Progressed, rates: dict[str, Rate], now: float
) -> None:
    """One bar for the submission, then one per benchmark task x setting, each with its own rate."""
    sub = item.status
    rows = [
        (
            sub.submission_id,
            f"[bold]{sub.submission_id}[/]",
            sub.episodes_completed,
            sub.episodes_planned,
            sub.episodes_succeeded,
        )
    ]
    for m in item.summary.manifests:
        rows.append(
            (
                f"{sub.submission_id}/{m.manifest_hash}",
                f"  {m.task} [dim]{m.setting}[/]",
                m.episodes_completed,
                m.episodes_planned,
                m.episodes_succeeded,
            )
        )
    for key, description, done, planned, succeeded in rows:
        rate = rates.setdefault(key, Rate())
        rate.add(now, done)
        success = success_percent(succeeded, done)
        detail = f"success {success}  {rate.per_second:.2f} ep/s  ETA {rate.eta_text(planned - done)}"
        if key not in bars:
            bars[key] = progress.add_task(description, total=planned, detail=detail)
        progress.update(bars[key], completed=done, total=planned, detail=detail)
