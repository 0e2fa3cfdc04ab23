"""Reading results: `summary` of one submission and `compare` of two over the same manifests.

Both print a table or, with ``--json``, a document; `summary` can also write RESULTS.json, a CSV
and a bar chart. The messages are fetched here; the documents, rows and charts are built from them
by ``scheduler.results``, ``scheduler.report`` and ``scheduler.plots``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rich.table import Table

from evalfleet.scheduler_api.vocabulary import failure_counts, success_percent, success_rate
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import provenance, report
from scheduler.cli.common import UsageError, add_client_command, connect, console, print_json
from scheduler.results import results_document, write_results
from scheduler.wire_json import counts_dict, message_dict

if TYPE_CHECKING:
    from scheduler.cli.common import Subcommands


def add_commands(commands: Subcommands) -> None:
    """`summary` and `compare`."""
    summary = add_client_command(commands, "summary", cmd_summary, "results per benchmark task x setting")
    summary.add_argument("submission")
    summary.add_argument("--out", type=Path, metavar="RESULTS.json", help="also write the results document")
    summary.add_argument("--csv", type=Path, metavar="FILE", help="also write one CSV row per task x setting")
    summary.add_argument("--plot", type=Path, metavar="PNG", help="also draw success per task, settings side by side")

    compare = add_client_command(commands, "compare", cmd_compare, "compare two submissions of the same manifests")
    compare.add_argument("submission_a")
    compare.add_argument("submission_b")
    compare.add_argument("--plot", type=Path, metavar="PNG", help="also draw both submissions side by side")
    compare.add_argument(
        "--allow-incomplete", action="store_true", help="compare even if one is incomplete (marked in the output)"
    )


def _plots() -> ModuleType:
    """The plotting module, or a usage error naming the extra that provides matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib: pip install 'evalfleet[plots]'")
    from scheduler import plots

    return plots


def cmd_summary(args: argparse.Namespace) -> int:
    plots = _plots() if args.plot else None
    with connect(args) as client:
        response = client.summary(args.submission)
        if args.out:
            document = results_document(response, client.workers(), datetime.datetime.now(datetime.timezone.utc))
            write_results(args.out, document)
    if args.csv:
        report.write_csv(args.csv, response)
    if plots is not None:
        plots.plot_summary(args.plot, response)
    if args.json:
        data = message_dict(response)
        data["tasks"] = counts_dict(response.tasks)
        data["success_rate"] = success_rate(response.episodes_succeeded, response.episodes_completed)
        for entry, manifest in zip(data["manifests"], response.manifests, strict=True):
            entry["tasks"] = counts_dict(manifest.tasks)
            entry["success_rate"] = success_rate(manifest.episodes_succeeded, manifest.episodes_completed)
        data["marks"] = provenance.marks(response)
        print_json(data)
        return 0
    title = f"summary of {response.submission_id}"
    if not response.complete:
        title += f" (INCOMPLETE: {response.episodes_completed}/{response.episodes_planned} episodes)"
    marks = provenance.marks(response)
    if any(mark.startswith(provenance.REMOTE_UNSEALED) for mark in marks):
        title += f" ({provenance.REMOTE_UNSEALED.upper()})"
    caption = "\n".join([provenance.execution_line(response), *(f"NOTE {mark}" for mark in marks)])
    table = Table(title=title, caption=caption, caption_justify="left")
    columns = (
        "benchmark",
        "task",
        "setting",
        "success",
        "rate",
        "done/planned",
        "attempts",
        "failed",
        "workers",
        "mean s",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("benchmark", "task", "setting", "failed") else "right")
    for m in response.manifests:
        table.add_row(
            m.benchmark,
            m.task,
            m.setting,
            str(m.episodes_succeeded),
            success_percent(m.episodes_succeeded, m.episodes_completed),
            f"{m.episodes_completed}/{m.episodes_planned}",
            str(m.attempts),
            _failures(m.failures),
            str(m.workers),
            f"{m.episode_wall_seconds_mean:.1f}",
        )
    table.add_section()
    table.add_row(
        "all",
        "",
        "",
        str(response.episodes_succeeded),
        success_percent(response.episodes_succeeded, response.episodes_completed),
        f"{response.episodes_completed}/{response.episodes_planned}",
        str(sum(m.attempts for m in response.manifests)),
        _failures(failure for m in response.manifests for failure in m.failures),
        "",
        "",
    )
    console().print(table)
    return 0


def _failures(failures: Iterable[pb.FailureCount]) -> str:
    """Failed or lost attempts by reason, as a table cell: "timeout 2, lease_expired 1", or "-"."""
    return ", ".join(f"{name} {count}" for name, count in failure_counts(failures).items()) or "-"


def cmd_compare(args: argparse.Namespace) -> int:
    plots = _plots() if args.plot else None
    with connect(args) as client:
        a, b = client.summary(args.submission_a), client.summary(args.submission_b)
    rows = report.compare(a, b, args.allow_incomplete)
    if plots is not None:
        plots.plot_comparison(args.plot, a, b, rows)
    if args.json:
        print_json(
            {
                "a": {"submission_id": a.submission_id, "checkpoint": a.checkpoint, "complete": a.complete},
                "b": {"submission_id": b.submission_id, "checkpoint": b.checkpoint, "complete": b.complete},
                "rows": [
                    {
                        "benchmark": row.benchmark,
                        "task": row.task,
                        "setting": row.setting,
                        "manifest_hash": row.a.manifest_hash,
                        "a": _side(row.a),
                        "b": _side(row.b),
                        "delta": row.delta,
                    }
                    for row in rows
                ],
            }
        )
        return 0
    table = Table(title=f"{_marked(a)} vs {_marked(b)}")
    for column in ("benchmark", "task", "setting", _marked(a), _marked(b), "delta"):
        table.add_column(column, justify="left" if column in ("benchmark", "task", "setting") else "right")
    for row in rows:
        table.add_row(
            row.benchmark,
            row.task,
            row.setting,
            _cell(row.a),
            _cell(row.b),
            "-" if row.delta is None else f"{100.0 * row.delta:+.1f} pts",
        )
    console().print(table)
    return 0


def _marked(summary: pb.GetSummaryResponse) -> str:
    return summary.submission_id + ("" if summary.complete else " (INCOMPLETE)")


def _side(m: pb.ManifestSummary) -> dict[str, Any]:
    return {
        "planned": m.episodes_planned,
        "completed": m.episodes_completed,
        "succeeded": m.episodes_succeeded,
        "success_rate": success_rate(m.episodes_succeeded, m.episodes_completed),
    }


def _cell(m: pb.ManifestSummary) -> str:
    rate = success_percent(m.episodes_succeeded, m.episodes_completed)
    cell = f"{m.episodes_succeeded}/{m.episodes_completed} {rate}"
    return cell + (f" (of {m.episodes_planned})" if m.episodes_completed < m.episodes_planned else "")
