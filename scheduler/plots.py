"""Success-rate charts (matplotlib, Agg backend: no display needed, works on cluster nodes).

Readable at fifty tasks by two settings as with task names past 100 characters: horizontal bars,
one row group per task with its full name, the settings side by side in it, each rate with its 95%
Wilson interval as an error bar and its ``succeeded/completed`` count,
and a first group with the overall rate per setting. The figure grows with the number of tasks; the
left margin is measured from the rendered labels (names longer than ``LABEL_CHARS`` wrap at their
underscores, so the name stays whole). The comparison chart has the same rows and draws, per task x
setting, B's rate minus A's with its 95% interval (filled markers where the test finds the
difference significant). The series chart (``scheduler series``) is a learning curve instead: the
submissions along the x axis in the order given, each rate with its 95% Wilson interval, the
baseline marked (and, with a selection, the chosen submission's held-out rate beside its point),
and below it each submission's difference from the baseline with its simultaneous interval
(filled where Holm's adjusted p is below 5%). The robustness chart (``scheduler robustness``) has a
panel per perturbation axis: per task, the base setting's rate and the perturbed one's side by side.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalfleet.scheduler_api.vocabulary import interval_text, success_rate, wilson_interval
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import report, sequential_report
from scheduler.differences import Difference
from scheduler.report import Comparison
from scheduler.robustness import AxisRow
from scheduler.series import Selection, Series

# Characters per label line; a longer name wraps at its underscores.
LABEL_CHARS = 48
POINT_INCHES = 0.7  # one submission's column in the series chart
BAR_INCHES = 0.2  # one bar's row
PLOT_INCHES = 6.0  # the axes' width, labels come on top of it
MARGIN_INCHES = 1.7  # title, legend and x label
GROUP_GAP = 0.6  # between task groups, in bar rows
DPI = 120
OVERALL = "all tasks (overall)"


def _pyplot() -> Any:
    """Imports pyplot on the Agg backend; matplotlib is the optional `plots` extra. Its own log
    lines (the font cache it builds on first use, which it announces after five seconds) are
    below what the commands that draw charts show: only its errors reach their output."""
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def wrap_label(name: str, width: int = LABEL_CHARS) -> str:
    """The whole name on lines of at most ``width`` characters, broken after underscores."""
    lines: list[str] = []
    current = ""
    for part in name.split("_"):
        joined = f"{current}_{part}" if current else part
        if current and len(joined) + 1 > width:  # room for the underscore that ends the line
            lines.append(current + "_")
            current = part
        else:
            current = joined
    return "\n".join([*lines, current])


@dataclass(frozen=True)
class _Rows:
    """Where each task group sits on the y axis (top to bottom) and how tall the figure must be."""

    labels: list[str]
    centers: list[float]
    bars: int
    units: float

    def offset(self, group: int, bar: int) -> float:
        return self.centers[group] + (bar - (self.bars - 1) / 2)


def _rows(names: Sequence[str], bars: int) -> _Rows:
    labels = [wrap_label(name) for name in names]
    centers: list[float] = []
    y = 0.0
    for label in labels:
        size = max(float(bars), 1.1 * (label.count("\n") + 1))
        centers.append(y + size / 2)
        y += size + GROUP_GAP
    return _Rows(labels, centers, max(1, bars), y)


def _figure(rows: _Rows, title: str) -> tuple[Any, Any, Any]:
    pyplot = _pyplot()
    height = MARGIN_INCHES + rows.units * BAR_INCHES
    figure = pyplot.figure(figsize=(PLOT_INCHES + 3.0, height), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    heading = figure.suptitle(title, fontsize=11)
    axes.set_yticks(rows.centers, rows.labels, fontsize=8)
    axes.set_ylim(rows.units - GROUP_GAP / 2, -GROUP_GAP)  # first group on top
    axes.grid(axis="x", color="#dddddd", linewidth=0.6)
    axes.tick_params(axis="x", top=True, labeltop=True)  # a tall chart is read from the top too
    axes.set_axisbelow(True)
    if len(rows.centers) > 1:  # the overall group is set apart from the tasks
        axes.axhline((rows.centers[0] + rows.centers[1]) / 2, color="#888888", linewidth=0.8)
    return figure, axes, heading


def _fit_width(figure: Any, axes: Any, title: Any) -> None:
    """Widens the figure by the rendered width of the longest label, so no name is cut, and to the
    widths of the title and the legend."""
    renderer = figure.canvas.get_renderer()
    widest = max((label.get_window_extent(renderer).width for label in axes.get_yticklabels()), default=0.0)
    headings = [title, *figure.legends]
    heading = max(text.get_window_extent(renderer).width for text in headings)
    figure.set_figwidth(max(PLOT_INCHES + widest / figure.dpi + 0.6, heading / figure.dpi + 0.4))


def _save(figure: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI)
    _pyplot().close(figure)


def summary_figure(summary: pb.GetSummaryResponse) -> Any:
    """The success chart of one submission, as a matplotlib figure (``plot_summary`` saves it)."""
    grid = report.success_grid(summary.manifests)
    settings = grid.settings
    rows = _rows([OVERALL, *(task.name for task in grid.tasks)], len(settings))
    title = f"{summary.submission_id}"
    if not summary.complete:
        title += f" (INCOMPLETE: {summary.episodes_completed}/{summary.episodes_planned} episodes)"
    valid = sequential_report.fixed_n_valid(summary)
    if valid:
        title += "\nsuccess rate per task, 95% Wilson intervals, succeeded/completed"
    else:
        title += "\nsuccess rate per task, succeeded/completed (sequential: fixed-N intervals not valid)"
    figure, axes, heading = _figure(rows, title)
    colors = _colors(len(settings))
    for j, setting in enumerate(settings):
        counts = [
            (c.succeeded, c.completed)
            for c in (grid.overall[setting], *(task.cells.get(setting, report.Counts()) for task in grid.tasks))
        ]
        ys = [rows.offset(i, j) for i in range(len(counts))]
        rates = [100.0 * (success_rate(s, c) or 0.0) for s, c in counts]
        intervals = [wilson_interval(s, c) if valid else None for s, c in counts]
        lows = [rate - (100.0 * i.low if i else rate) for rate, i in zip(rates, intervals, strict=True)]
        highs = [(100.0 * i.high if i else rate) - rate for rate, i in zip(rates, intervals, strict=True)]
        s_all, c_all = counts[0]
        rate_all = success_rate(s_all, c_all, scale=100.0)
        interval_all = interval_text(intervals[0])
        label = f"{setting}: overall {'-' if rate_all is None else f'{rate_all:.1f}%'} {interval_all} ({s_all}/{c_all})"
        axes.barh(ys, rates, height=0.85, color=colors[j], label=label)
        axes.errorbar(rates, ys, xerr=[lows, highs], fmt="none", ecolor="#222222", elinewidth=0.8, capsize=2)
        for i, (y, rate, high, (s, c)) in enumerate(zip(ys, rates, highs, counts, strict=True)):
            count = f"{s}/{c}" if c else "n/a"
            axes.text(rate + high + 1.0, y, f"{setting}: {count}" if i == 0 else count, va="center", fontsize=6.5)
    axes.set_xlim(0, 115)
    axes.set_xticks(range(0, 101, 10))
    axes.set_xlabel("success rate (%)")
    _legend(figure)
    _fit_width(figure, axes, heading)
    return figure


def plot_summary(path: Path, summary: pb.GetSummaryResponse) -> None:
    _save(summary_figure(summary), path)


def comparison_figure(comparison: Comparison) -> Any:
    """Per task x setting, B's rate minus A's with its 95% interval; the overall per setting on top."""
    a, b = comparison.a, comparison.b
    names = report.task_names(row.a for row in comparison.rows)
    settings = list(dict.fromkeys(row.setting for row in comparison.rows))
    by_setting = {group.setting: group for group in comparison.by_setting()}
    found = {(row.benchmark, row.task, row.setting): row.difference for row in comparison.rows}
    rows = _rows([OVERALL, *names.values()], len(settings))
    kind = "paired by episode" if comparison.paired else "UNPAIRED"
    title = f"{_label(b)} minus {_label(a)}\nsuccess rate difference per task, 95% CI, {kind}"
    figure, axes, heading = _figure(rows, title)
    colors = _colors(len(settings))
    for j, setting in enumerate(settings):
        group = by_setting[setting].difference
        differences: list[Difference | None] = [group, *(found.get((b_, t, setting)) for b_, t in names)]
        label = f"{setting}: overall " + ("-" if group is None else group.verdict())
        axes.plot([], [], "o", color=colors[j], label=label)
        for i, difference in enumerate(differences):
            y = rows.offset(i, j)
            if difference is None:
                axes.text(0, y, "n/a", va="center", ha="center", fontsize=6.5)
                continue
            estimate, low, high = (100.0 * v for v in (difference.estimate, *difference.interval))
            if i == 0:  # the overall group names its setting, so the top needs no legend
                axes.text(high + 1.0, y, f"{setting}: {estimate:+.1f} pts", va="center", fontsize=6.5)
            axes.errorbar(
                [estimate],
                [y],
                xerr=[[estimate - low], [high - estimate]],
                fmt="o",
                color=colors[j],
                markerfacecolor=colors[j] if difference.significant else "white",
                markersize=4,
                elinewidth=1.0,
                capsize=2,
            )
    axes.axvline(0, color="#444444", linewidth=0.8)
    reach = max([abs(v) for d in found.values() if d for v in d.interval], default=0.0)
    limit = min(100, max(20, 10 * math.ceil(10.0 * reach + 0.2)))  # tens of points, 2 past the widest
    axes.set_xlim(-limit, limit)
    axes.set_xticks(range(-limit, limit + 1, 10 if limit <= 50 else 20))
    axes.set_xlabel("difference in success rate (points); filled: significant at 5%, hollow: not")
    _legend(figure)
    _fit_width(figure, axes, heading)
    return figure


def plot_comparison(path: Path, comparison: Comparison) -> None:
    _save(comparison_figure(comparison), path)


def robustness_figure(rows: Sequence[AxisRow]) -> Any:
    """One panel per perturbation axis: per task (the overall on top), the success rate in the base
    setting and under the axis side by side with ``succeeded/completed``, tasks that broke marked;
    the panel's title gives the drop with its 95% interval and how it was paired."""
    pyplot = _pyplot()
    layouts = [_rows([OVERALL, *(change.task for change in row.tasks)], 2) for row in rows]
    height = MARGIN_INCHES + sum(0.6 + layout.units * BAR_INCHES for layout in layouts)
    figure, panels = pyplot.subplots(
        len(rows), 1, figsize=(PLOT_INCHES + 3.0, height), dpi=DPI, layout="constrained", squeeze=False,
        height_ratios=[layout.units + 3.0 for layout in layouts],
    )  # fmt: skip
    figure.suptitle("success per task in the base setting and under each perturbation", fontsize=11)
    colors = _colors(2)
    for axes, row, layout in zip(panels[:, 0], rows, layouts, strict=True):
        sides = (
            (row.base, [row.base_counts, *(change.base for change in row.tasks)]),
            (", ".join(row.settings), [row.perturbed_counts, *(change.perturbed for change in row.tasks)]),
        )
        for j, (label, counts) in enumerate(sides):
            ys = [layout.offset(i, j) for i in range(len(counts))]
            rates = [100.0 * (success_rate(c.succeeded, c.completed) or 0.0) for c in counts]
            axes.barh(ys, rates, height=0.85, color=colors[j], label=label)
            for y, rate, c in zip(ys, rates, counts, strict=True):
                axes.text(
                    rate + 1.0, y, f"{c.succeeded}/{c.completed}" if c.completed else "n/a", va="center", fontsize=6.5
                )
        for i, change in enumerate(row.tasks, start=1):
            if change.broke:
                axes.text(108.0, layout.centers[i], "broke", va="center", ha="center", fontsize=7, color="#b00000")
        drop = "no drop computed" if row.drop is None else f"drop {row.drop.verdict()}"
        axes.set_title(f"{row.axis}: {drop}\n{row.pairing}", fontsize=8.5)
        axes.set_yticks(layout.centers, layout.labels, fontsize=8)
        axes.set_ylim(layout.units - GROUP_GAP / 2, -GROUP_GAP)
        axes.set_xlim(0, 115)
        axes.set_xticks(range(0, 101, 10))
        axes.grid(axis="x", color="#dddddd", linewidth=0.6)
        axes.set_axisbelow(True)
        axes.set_xlabel("success rate (%)")
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # clear of the bars and "broke"
    return figure


def plot_robustness(path: Path, rows: Sequence[AxisRow]) -> None:
    _save(robustness_figure(rows), path)


def series_figure(series: Series, selection: Selection | None = None) -> Any:
    """The learning curve of a series on top, each submission's difference from the baseline below."""
    pyplot = _pyplot()
    points, base = series.points, series.points[series.baseline]
    xs = list(range(len(points)))
    width = max(PLOT_INCHES + 3.0, POINT_INCHES * len(points) + 2.0)
    figure = pyplot.figure(figsize=(width, 7.5), dpi=DPI, layout="constrained")
    rates_axes, differences_axes = figure.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    incomplete = any(not point.summary.complete for point in points)
    title = f"series of {len(points)} submissions, baseline {base.summary.submission_id}"
    title += " (INCOMPLETE: some)" if incomplete else ""
    level = f"{100.0 * series.interval_level:.4g}%"
    title += (
        f"\nsuccess rate, 95% Wilson intervals (each alone); difference from the baseline, {level} intervals"
        f" (Bonferroni, {series.comparisons} comparisons)"
    )
    heading = figure.suptitle(title, fontsize=11)
    colors = _colors(3)
    rates = [100.0 * (success_rate(p.counts.succeeded, p.counts.completed) or 0.0) for p in points]
    intervals = [p.interval for p in points]
    lows = [rate - (100.0 * i.low if i else rate) for rate, i in zip(rates, intervals, strict=True)]
    highs = [(100.0 * i.high if i else rate) - rate for rate, i in zip(rates, intervals, strict=True)]
    rates_axes.errorbar(
        xs,
        rates,
        yerr=[lows, highs],
        fmt="-o",
        color=colors[0],
        markersize=4,
        elinewidth=1.0,
        capsize=3,
        label="success rate, 95% Wilson interval",
    )
    rates_axes.plot(
        [series.baseline],
        [rates[series.baseline]],
        "s",
        color="#222222",
        markersize=9,
        markerfacecolor="none",
        label=f"baseline: {base.label}",
    )
    for x, rate, high, point in zip(xs, rates, highs, points, strict=True):
        count = f"{point.counts.succeeded}/{point.counts.completed}" if point.counts.completed else "n/a"
        rates_axes.text(x, rate + high + 1.5, count, ha="center", fontsize=6.5)
    if selection is not None:
        _draw_held_out(rates_axes, series.points[selection.chosen].label, selection, colors[1])
    rates_axes.set_ylim(0, 112)
    rates_axes.set_yticks(range(0, 101, 10))
    rates_axes.set_ylabel("success rate (%)")
    rates_axes.grid(axis="y", color="#dddddd", linewidth=0.6)
    rates_axes.set_axisbelow(True)
    _draw_differences(differences_axes, series, colors[2])
    differences_axes.set_xticks(xs, [wrap_label(p.label, 24) for p in points], rotation=30, ha="right", fontsize=8)
    _legend(figure)
    headings = [heading, *figure.legends]
    renderer = figure.canvas.get_renderer()
    needed = max(text.get_window_extent(renderer).width for text in headings) / figure.dpi + 0.4
    figure.set_figwidth(max(width, needed))
    return figure


def _draw_held_out(axes: Any, chosen: str, selection: Selection, color: str) -> None:
    """The chosen submission's held-out rate with its 95% interval, just right of its point: the
    number to report, drawn apart from the curve's in-sample rates."""
    held = selection.held_out
    interval = wilson_interval(held.succeeded, held.completed)
    if interval is None:
        return
    rate = 100.0 * held.succeeded / held.completed
    x = selection.chosen + 0.18
    label = (
        f"{chosen}, chosen on {len(selection.split.selection)} manifests, on the {len(selection.split.held_out)}"
        f" held out (seed {selection.split.seed}, fraction {selection.split.fraction:g}):"
        f" {rate:.1f}% {interval_text(interval)} ({held.succeeded}/{held.completed})"
    )
    axes.errorbar(
        [x],
        [rate],
        yerr=[[rate - 100.0 * interval.low], [100.0 * interval.high - rate]],
        fmt="*",
        color=color,
        markersize=10,
        elinewidth=1.0,
        capsize=3,
        label=label,
    )


def _draw_differences(axes: Any, series: Series, color: str) -> None:
    """Each submission minus the baseline, simultaneous interval; filled where Holm rejects."""
    reach = 0.0
    for x, point in enumerate(series.points):
        difference = point.difference
        if x == series.baseline or difference is None:
            axes.text(x, 0, "baseline" if x == series.baseline else "n/a", ha="center", va="bottom", fontsize=6.5)
            continue
        estimate, low, high = (100.0 * v for v in (difference.estimate, *difference.interval))
        reach = max(reach, abs(low), abs(high))
        axes.errorbar(
            [x],
            [estimate],
            yerr=[[estimate - low], [high - estimate]],
            fmt="o",
            color=color,
            markerfacecolor=color if point.significant else "white",
            markersize=5,
            elinewidth=1.0,
            capsize=3,
        )
    axes.axhline(0, color="#444444", linewidth=0.8)
    limit = min(100, max(20, 10 * math.ceil(reach / 10.0 + 0.02)))  # tens of points, past the widest
    axes.set_ylim(-limit, limit)
    axes.set_ylabel("minus baseline (points)")
    axes.set_xlabel("filled: significant at 5% after Holm's correction; hollow: not")
    axes.grid(axis="y", color="#dddddd", linewidth=0.6)
    axes.set_axisbelow(True)


def plot_series(path: Path, series: Series, selection: Selection | None = None) -> None:
    _save(series_figure(series, selection), path)


def _legend(figure: Any) -> None:
    """One line per setting with its overall figure, below the chart (a submission without
    manifests has none)."""
    if figure.axes[0].get_legend_handles_labels()[0]:
        figure.legend(loc="outside lower center", ncols=1, fontsize=8, frameon=False)


def _colors(n: int) -> list[str]:
    palette = ["#3a7bd5", "#e07b39", "#4daf4a", "#984ea3", "#a65628", "#f781bf"]
    return [palette[i % len(palette)] for i in range(n)]


def _label(summary: pb.GetSummaryResponse) -> str:
    return summary.submission_id + ("" if summary.complete else " (INCOMPLETE)")
