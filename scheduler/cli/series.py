"""`scheduler series`: the checkpoints of one training run, evaluated on the same manifests, read as
a learning curve with intervals, each against a baseline, and an honest choice of the best one.

`scheduler compare` answers for two submissions; asking it of every pair in a series asks many
questions at the 5% level and reads the best rate off the same episodes it was chosen on. This
command asks them as a family (Holm-adjusted p-values, Bonferroni simultaneous intervals) and,
with ``--select-fraction``, chooses on some manifests and reports on the others. The numbers come
from ``scheduler.series``; this module fetches the summaries and prints them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from evalfleet.scheduler_api.vocabulary import interval_text, rate_fields, success_percent, wilson_interval
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import factors
from scheduler.cli.common import UsageError, add_client_command, connect, console, plots_module, print_json
from scheduler.differences import ALPHA
from scheduler.report import Counts
from scheduler.series import (
    BONFERRONI,
    HOLM,
    Point,
    Selection,
    Series,
    SeriesError,
    bonferroni_z,
    check_request,
    select,
    series,
)

if TYPE_CHECKING:
    from scheduler.cli.common import Subcommands

# The pairing of every comparison of a series: the manifests must be the same.
PAIRING = "paired by trial (same manifests, episode by episode)"


def add_commands(commands: Subcommands) -> None:
    """`series`."""
    sub = add_client_command(
        commands, "series", cmd_series, "a learning curve: many submissions of the same manifests, honestly compared"
    )
    sub.add_argument("submissions", nargs="+", metavar="SUBMISSION", help="in the order of the curve (2 or more)")
    sub.add_argument("--baseline", metavar="SUBMISSION", help="compare each with this one (default: the first)")
    sub.add_argument(
        "--select-fraction",
        type=float,
        metavar="F",
        help="choose the best on this fraction of the manifests, report it on the others",
    )
    sub.add_argument(
        "--split-seed", type=int, metavar="N", help="the seed of that split (default 0; recorded in the output)"
    )
    sub.add_argument("--plot", type=Path, metavar="PNG", help="also draw the curve and the differences")
    sub.add_argument(
        "--allow-incomplete", action="store_true", help="include incomplete submissions (marked in the output)"
    )


def cmd_series(args: argparse.Namespace) -> int:
    if args.split_seed is not None and args.select_fraction is None:
        raise UsageError("--split-seed applies only with --select-fraction")
    seed = 0 if args.split_seed is None else args.split_seed
    plots = plots_module() if args.plot else None
    try:
        check_request(args.submissions, args.baseline, args.select_fraction)
        with connect(args) as client:
            summaries = [client.summary(sub, include_episodes=True) for sub in args.submissions]
        found = series(summaries, args.baseline, args.allow_incomplete)
        selection = None if args.select_fraction is None else select(found, seed, args.select_fraction)
    except SeriesError as exc:
        raise UsageError(str(exc)) from exc
    if plots is not None:
        plots.plot_series(args.plot, found, selection)
    if args.json:
        print_json(series_json(found, selection))
        return 0
    console().print(series_table(found, selection))
    return 0


def _base(found: Series) -> Point:
    return found.points[found.baseline]


def _level(found: Series) -> str:
    """The simultaneous intervals' level as a column shows it: "98.33%"."""
    return f"{100.0 * found.interval_level:.4g}%"


def series_table(found: Series, selection: Selection | None) -> Table:
    """One row per submission in the order given; how to read it, and the selection, below."""
    base = _base(found)
    marked = [point for point in found.points if not point.summary.complete]
    title = f"series of {len(found.points)} submissions on {len(found.manifests)} manifests"
    title += f", baseline {base.summary.submission_id}" + (" (INCOMPLETE: some)" if marked else "")
    table = Table(title=title, caption="\n".join(_lines(found, selection)), caption_justify="left")
    columns = [
        *("#", "submission", "success", "rate", "95% CI", "done/planned"),
        *("vs baseline", f"{_level(found)} CI", "p", "p (Holm)", "significant"),
    ]
    for column in columns:
        table.add_column(column, justify="left" if column == "submission" else "right")
    for position, point in enumerate(found.points, start=1):
        c = point.counts
        name = point.label + ("" if point.summary.complete else " (INCOMPLETE)")
        cells = (str(c.succeeded), success_percent(c.succeeded, c.completed), interval_text(point.interval))
        table.add_row(str(position), name, *cells, f"{c.completed}/{c.planned}", *_difference_cells(point, found))
    return table


def _difference_cells(point: Point, found: Series) -> tuple[str, str, str, str, str]:
    if point is _base(found):
        return ("baseline", "", "", "", "")
    difference = point.difference
    if difference is None or point.p_holm is None:
        return ("-", "-", "-", "-", "-")
    low, high = (100.0 * v for v in difference.interval)
    significant = "yes" if point.significant else "no"
    if point.borderline:
        significant += " (borderline)"
    return (
        f"{100.0 * difference.estimate:+.1f} pts",
        f"[{low:+.1f}, {high:+.1f}]",
        f"{difference.p_value:.3g}",
        f"{point.p_holm:.3g}",
        significant,
    )


def _lines(found: Series, selection: Selection | None) -> list[str]:
    """What each number is, then what else differs from the baseline, then the selection."""
    base = _base(found).summary.submission_id
    m = found.comparisons
    lines = [
        "rate: succeeded / completed episodes, with the 95% Wilson interval of that submission alone"
        " (the intervals are not simultaneous: the highest point of the curve is not the best checkpoint's rate)",
        f"vs baseline: the submission minus {base} in points over the episodes both completed, {PAIRING};"
        " exact McNemar test, Newcombe paired interval",
        f"multiplicity: {m} comparison{'s' if m != 1 else ''} with the baseline; p adjusted by Holm's step-down"
        f" method (the chance of any false 'significant' in the series at most {ALPHA:.0%}); intervals"
        f" simultaneous by Bonferroni (each at {_level(found)}, all {m} together at least {1 - ALPHA:.0%});"
        " significant: Holm-adjusted p below 5%",
    ]
    for point in found.points:
        if point.comparison is None:
            continue
        sid = point.summary.submission_id
        for factor in factors.factors(point.comparison):
            if factor.name != factors.CHECKPOINT:  # the checkpoint is what a series is meant to vary
                lines.append(f"NOTE {sid} differs from {base} in more than the checkpoint: {factor.text()}")
    if selection is not None:
        lines += _selection_lines(found, selection)
    return lines


def _manifest_names(manifests: list[pb.ManifestSummary]) -> str:
    return "; ".join(f"{m.benchmark} {m.task} {m.setting} {m.manifest_hash[:12]}" for m in manifests)


def _rate_text(counts: Counts) -> str:
    """ "70.0% [52.1, 83.3] (21/30 episodes)": the rate, its 95% Wilson interval and the counts."""
    rate = success_percent(counts.succeeded, counts.completed)
    interval = interval_text(wilson_interval(counts.succeeded, counts.completed))
    return f"{rate} {interval} ({counts.succeeded}/{counts.completed} episodes)"


def _selection_lines(found: Series, selection: Selection) -> list[str]:
    split = selection.split
    chosen = found.points[selection.chosen]
    held = len(split.held_out)
    return [
        f"honest selection: split seed {split.seed}, fraction {split.fraction:g}: {len(split.selection)} of"
        f" {len(found.manifests)} manifests to choose on, {held} held out",
        f"  choose on: {_manifest_names(split.selection)}",
        f"  held out: {_manifest_names(split.held_out)}",
        f"chosen on the selection set: {chosen.label} {_rate_text(selection.selected_on)}",
        f"REPORTED, held out: {chosen.label} {_rate_text(selection.held_out)} on {held} manifest"
        f"{'s' if held != 1 else ''} the choice never saw",
        f"NOTE {selection.words()}",
    ]


def series_json(found: Series, selection: Selection | None) -> dict[str, Any]:
    """Every number of the series, as ``--json`` prints it (fractions, not percent)."""
    base = _base(found)
    return {
        "baseline": base.summary.submission_id,
        "pairing": "same manifests",
        "comparisons": found.comparisons,
        "multiplicity": {
            "alpha": ALPHA,
            "p_adjustment": HOLM,
            "intervals": BONFERRONI,
            "interval_level": found.interval_level,
            "z": bonferroni_z(found.comparisons),
        },
        "manifests": [_manifest(m) for m in found.manifests],
        "submissions": [_point_json(position, point, point is base) for position, point in enumerate(found.points)],
        "selection": None if selection is None else _selection_json(found, selection),
    }


def _manifest(m: pb.ManifestSummary) -> dict[str, str]:
    return {"manifest_hash": m.manifest_hash, "benchmark": m.benchmark, "task": m.task, "setting": m.setting}


def _counts_json(counts: Counts) -> dict[str, Any]:
    return {
        "planned": counts.planned,
        "completed": counts.completed,
        "succeeded": counts.succeeded,
        **rate_fields(counts.succeeded, counts.completed),
    }


def _point_json(position: int, point: Point, is_baseline: bool) -> dict[str, Any]:
    summary = point.summary
    return {
        "position": position,
        "submission_id": summary.submission_id,
        "checkpoint": summary.checkpoint,
        "label": point.label,
        "complete": summary.complete,
        "baseline": is_baseline,
        **_counts_json(point.counts),
        "difference": _difference_json(point),
        "factors": _factors_json(point),
    }


def _factors_json(point: Point) -> list[dict[str, str]]:
    """What differs from the baseline (the checkpoint included); empty for the baseline."""
    if point.comparison is None:
        return []
    return [
        {"name": f.name, "baseline": f.a, "submission": f.b, "text": f.text()}
        for f in factors.factors(point.comparison)
    ]


def _difference_json(point: Point) -> dict[str, Any] | None:
    """The paired difference from the baseline at the simultaneous level, its counts and tests."""
    difference, pairs = point.difference, point.pairs
    if difference is None or pairs is None:
        return None
    return {
        "estimate": difference.estimate,
        "low": difference.interval.low,
        "high": difference.interval.high,
        "pairs": pairs.pairs,
        "both": pairs.both,
        "baseline_only": pairs.a_only,
        "submission_only": pairs.b_only,
        "neither": pairs.neither,
        "test": difference.test,
        "p_value": difference.p_value,
        "p_holm": point.p_holm,
        "significant": point.significant,
        "borderline": point.borderline,
    }


def _selection_json(found: Series, selection: Selection) -> dict[str, Any]:
    split = selection.split
    chosen = found.points[selection.chosen].summary
    return {
        "seed": split.seed,
        "fraction": split.fraction,
        "selection_manifests": [_manifest(m) for m in split.selection],
        "held_out_manifests": [_manifest(m) for m in split.held_out],
        "on_selection": [
            {"submission_id": point.summary.submission_id, **_counts_json(counts)}
            for point, counts in zip(found.points, selection.on_selection, strict=True)
        ],
        "chosen": chosen.submission_id,
        "chosen_checkpoint": chosen.checkpoint,
        "chosen_on_selection": _counts_json(selection.selected_on),
        "reported_held_out": _counts_json(selection.held_out),
        "words": selection.words(),
    }
