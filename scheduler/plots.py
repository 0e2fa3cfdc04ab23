"""Success-rate bar charts (matplotlib, Agg backend: no display needed, works on cluster nodes).

Bars are grouped per benchmark task with one bar per setting (clean and randomized side by side),
or per task x setting with one bar per submission when comparing; each bar carries its
``succeeded/completed`` count so a rate is never read without its sample size.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalfleet.scheduler_api.vocabulary import success_rate
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler.report import ComparedRow


def _pyplot() -> Any:
    """Imports pyplot on the Agg backend; matplotlib is the optional `plots` extra."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _grouped_bars(
    path: Path, title: str, groups: Sequence[str], series: Sequence[tuple[str, Sequence[tuple[int, int]]]]
) -> None:
    """``series``: (label, [(succeeded, completed) per group]); draws rates with counts on bars."""
    pyplot = _pyplot()
    width = 0.8 / max(1, len(series))
    figure, axes = pyplot.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(series)) / 2 + 3), 4.5))
    for i, (label, counts) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [100.0 * (success_rate(s, c) or 0.0) for s, c in counts]
        bars = axes.bar(xs, heights, width, label=label)
        axes.bar_label(bars, labels=[f"{s}/{c}" if c else "n/a" for s, c in counts], fontsize=8, padding=2)
    axes.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    axes.set_ylabel("success rate (%)")
    axes.set_ylim(0, 110)
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def plot_summary(path: Path, summary: pb.GetSummaryResponse) -> None:
    tasks = list(dict.fromkeys(m.task for m in summary.manifests))
    settings = list(dict.fromkeys(m.setting for m in summary.manifests))
    found = {(m.task, m.setting): (m.episodes_succeeded, m.episodes_completed) for m in summary.manifests}
    series = [(setting, [found.get((task, setting), (0, 0)) for task in tasks]) for setting in settings]
    title = f"{summary.submission_id}" + ("" if summary.complete else " (INCOMPLETE)")
    _grouped_bars(path, title, tasks, series)


def plot_comparison(
    path: Path, a: pb.GetSummaryResponse, b: pb.GetSummaryResponse, rows: Sequence[ComparedRow]
) -> None:
    groups = [f"{row.task}\n{row.setting}" for row in rows]
    series = [
        (_label(a), [(row.a.episodes_succeeded, row.a.episodes_completed) for row in rows]),
        (_label(b), [(row.b.episodes_succeeded, row.b.episodes_completed) for row in rows]),
    ]
    _grouped_bars(path, f"{a.submission_id} vs {b.submission_id}", groups, series)


def _label(summary: pb.GetSummaryResponse) -> str:
    return summary.submission_id + ("" if summary.complete else " (INCOMPLETE)")
