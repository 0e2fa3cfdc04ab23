"""Reading results: `summary` of one submission, `robustness` of one under perturbations and `compare`
of two over the same trials.

Both print a table or, with ``--json``, a document; `summary` can also write RESULTS.json, a CSV,
lerobot-eval's eval_info.json and a bar chart. Every rate comes with its 95% Wilson interval;
`compare` adds, per task x setting, per setting and overall, the difference with its 95% interval
and a test, and says in words whether it is significant, and names what differs between the two
(``scheduler.factors``). The messages, and the manifests one side lacks (to pair them by trial
identity), are fetched here; the documents, rows and charts are built from them by
``scheduler.results``, ``scheduler.eval_info``, ``scheduler.report``, ``scheduler.differences``
and ``scheduler.plots``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from evalfleet.scheduler_api.vocabulary import (
    failure_counts,
    interval_text,
    rate_fields,
    success_percent,
    wilson_interval,
)
from evalfleet.v1 import scheduler_pb2 as pb
from manifests import format as manifest_format
from scheduler import eval_info, factors, provenance, report, robustness, sequential_report
from scheduler import sequential as rules
from scheduler.cli.common import UsageError, add_client_command, connect, console, plots_module, print_json
from scheduler.differences import Difference
from scheduler.results import results_document, write_results
from scheduler.wire_json import counts_dict, message_dict

if TYPE_CHECKING:
    from evalfleet.scheduler_api.client import SchedulerClient
    from scheduler.cli.common import Subcommands


def add_commands(commands: Subcommands) -> None:
    """`summary` and `compare`."""
    summary = add_client_command(commands, "summary", cmd_summary, "results per benchmark task x setting")
    summary.add_argument("submission")
    summary.add_argument("--out", type=Path, metavar="RESULTS.json", help="also write the results document")
    summary.add_argument("--csv", type=Path, metavar="FILE", help="also write one CSV row per task x setting")
    summary.add_argument(
        "--eval-info", type=Path, metavar="JSON", help="also write the results as lerobot-eval's eval_info.json"
    )
    summary.add_argument("--plot", type=Path, metavar="PNG", help="also draw success per task, settings side by side")

    to_wandb = add_client_command(commands, "wandb", cmd_wandb, "log a submission's results as a Weights & Biases run")
    to_wandb.add_argument("submission")
    to_wandb.add_argument("--project", required=True, help="the W&B project")
    to_wandb.add_argument("--entity", help="the W&B entity (team or user); W&B's default otherwise")
    to_wandb.add_argument("--name", help="the run's name (default: the submission id)")
    to_wandb.add_argument("--mode", choices=("online", "offline"), help="W&B's mode (default: WANDB_MODE, else online)")
    to_wandb.add_argument("--dir", type=Path, help="the folder wandb writes its run folder under (default: WANDB_DIR)")
    to_wandb.add_argument("--no-videos", action="store_true", help="leave out the failed episodes' videos")

    robust = add_client_command(
        commands, "robustness", cmd_robustness, "per perturbation axis: success, drop from the base, broken tasks"
    )
    robust.add_argument("submission")
    robust.add_argument(
        "--plot", type=Path, metavar="PNG", help="also draw each axis's success per task against the base"
    )

    compare = add_client_command(commands, "compare", cmd_compare, "compare two submissions of the same manifests")
    compare.add_argument("submission_a")
    compare.add_argument("submission_b")
    compare.add_argument("--plot", type=Path, metavar="PNG", help="also draw the differences per task x setting")
    compare.add_argument(
        "--allow-incomplete", action="store_true", help="compare even if one is incomplete (marked in the output)"
    )
    compare.add_argument(
        "--sequential",
        action="store_true",
        help="only the sequential comparison of B with A (B submitted with --paired-with A): its verdict, "
        "always-valid p and anytime-valid interval",
    )
    compare.add_argument(
        "--unpaired",
        action="store_true",
        help="compare submissions of different manifests as independent samples (marked in the output)",
    )


def cmd_summary(args: argparse.Namespace) -> int:
    plots = plots_module() if args.plot else None
    with connect(args) as client:
        response = client.summary(args.submission)
        if args.out:
            document = results_document(response, client.workers(), datetime.datetime.now(datetime.timezone.utc))
            write_results(args.out, document)
        if args.eval_info:
            _write_eval_info(client, args.submission, args.eval_info)
    if args.csv:
        report.write_csv(args.csv, response)
    if plots is not None:
        plots.plot_summary(args.plot, response)
    if args.json:
        valid = sequential_report.fixed_n_valid(response)
        data = message_dict(response)
        data["tasks"] = counts_dict(response.tasks)
        data.update(rate_fields(response.episodes_succeeded, response.episodes_completed, interval_valid=valid))
        for entry, manifest in zip(data["manifests"], response.manifests, strict=True):
            entry["tasks"] = counts_dict(manifest.tasks)
            entry.update(rate_fields(manifest.episodes_succeeded, manifest.episodes_completed, interval_valid=valid))
        data["marks"] = [*provenance.marks(response), *sequential_report.marks(response)]
        print_json(data)
        return 0
    console().print(summary_table(response))
    return 0


def cmd_robustness(args: argparse.Namespace) -> int:
    """The submission's robustness rows (``scheduler.robustness``); exit 2 when it evaluates no
    perturbed setting beside the setting it perturbs."""
    plots = plots_module() if args.plot else None
    with connect(args) as client:
        summary = client.summary(args.submission, include_episodes=True)
        manifests = {
            m.manifest_hash: manifest_format.parse(client.get_manifest(m.manifest_hash), expected_hash=m.manifest_hash)
            for m in summary.manifests
        }
    rows = robustness.robustness(summary, manifests)
    if not rows:
        raise UsageError(
            f"{args.submission} evaluates no perturbed setting beside the setting it perturbs "
            "(docs/benchmarks.md says which benchmarks have perturbations and how a spec runs them)"
        )
    if plots is not None:
        plots.plot_robustness(args.plot, rows)
    if args.json:
        print_json({"submission_id": summary.submission_id, "robustness": robustness.document(rows)})
        return 0
    for line in robustness.lines(rows):
        print(line)
    return 0


def cmd_wandb(args: argparse.Namespace) -> int:
    """The submission as one W&B run: summary, per-task table, success chart, failed episodes' videos."""
    if importlib.util.find_spec("wandb") is None:
        raise UsageError("scheduler wandb needs wandb: pip install 'evalfleet[wandb]'")
    from scheduler import local_run, wandb_export

    destination = wandb_export.Destination(args.project, args.entity, args.name, args.mode, args.dir)
    with connect(args) as client, tempfile.TemporaryDirectory(prefix="evalfleet-wandb-") as scratch:
        summary = client.summary(args.submission, include_episodes=True)
        document = results_document(summary, client.workers(), datetime.datetime.now(datetime.timezone.utc))
        chart = None
        if importlib.util.find_spec("matplotlib") is not None:
            chart = Path(scratch) / "success.png"
            plots_module().plot_summary(chart, summary)
        videos = {} if args.no_videos else local_run.download_videos(client, args.submission, Path(scratch) / "videos")
        logged = wandb_export.log(document, destination, chart, _failure_videos(summary, videos))
    if args.json:
        print_json({"run_id": logged.run_id, "url": logged.url, "folder": str(logged.folder)})
    elif logged.url:
        print(f"logged {args.submission} as W&B run {logged.run_id}: {logged.url}")
    else:
        print(f"logged {args.submission} as W&B run {logged.run_id} offline in {logged.folder} (wandb sync uploads it)")
    return 0


def _failure_videos(
    summary: pb.GetSummaryResponse, videos: Mapping[eval_info.EpisodeKey, Path]
) -> list[tuple[str, Path]]:
    """(label, file) of each kept video of a failed episode, labelled task/setting/index."""
    failed: list[tuple[str, Path]] = []
    for manifest in summary.manifests:
        for index in manifest.failed_episodes:
            video = videos.get(eval_info.EpisodeKey(manifest.manifest_hash, index))
            if video is not None:
                failed.append((f"{manifest.task}/{manifest.setting}/{index:04d}", video))
    return failed


def _write_eval_info(client: SchedulerClient, submission_id: str, path: Path) -> None:
    """The submission's results in lerobot-eval's shape (task ids read from its stored manifests);
    no video paths: `scheduler run` lists those of the videos it downloaded."""
    summary = client.summary(submission_id, include_episodes=True)
    stored = [manifest_format.parse(client.get_manifest(m.manifest_hash), m.manifest_hash) for m in summary.manifests]
    eval_info.write(path, eval_info.eval_info(summary, eval_info.task_numbers(stored)))


# Headers of the number columns, on two lines where one word would widen the column past its values.
_NUMBER_HEADERS = ("solved", "rate", "95% CI", "done/\nplanned", "tries")


def summary_table(response: pb.GetSummaryResponse) -> Group:
    """`scheduler summary`'s table: one row per task x setting, totals per setting and overall; its
    notes under it, as wide as the terminal (a caption would wrap at the table's width)."""
    title = f"summary of {response.submission_id}"
    benchmarks = {m.benchmark for m in response.manifests}
    settings = _setting_totals(response.manifests)
    # One benchmark or one setting says itself in the title: its column would repeat it on every row.
    shared = [*(benchmarks if len(benchmarks) == 1 else ()), *(s for _, s in settings if len(settings) == 1)]
    if shared:
        title += f": {' '.join(shared)}"
    if not response.complete:
        title += f" (INCOMPLETE: {response.episodes_completed}/{response.episodes_planned} episodes)"
    marks = provenance.marks(response)
    if any(mark.startswith(provenance.REMOTE_UNSEALED) for mark in marks):
        title += f" ({provenance.REMOTE_UNSEALED.upper()})"
    if response.sequential.stopped_at:
        title += " (STOPPED BY ITS SEQUENTIAL RULE)"
    marks += sequential_report.marks(response)
    every_failure = [failure for m in response.manifests for failure in m.failures]
    # The reasons go under the table (their names are long); the column counts the failed attempts.
    reasons = [f"failed attempts by reason: {_failures(every_failure)}"] if every_failure else []
    notes = [provenance.execution_line(response), *reasons, *(f"NOTE {mark}" for mark in marks)]
    valid = sequential_report.fixed_n_valid(response)

    def interval(succeeded: int, completed: int) -> str:
        return interval_text(wilson_interval(succeeded, completed) if valid else None)

    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    labels = [("benchmark", len(benchmarks) > 1), ("task", True), ("setting", len(settings) > 1)]
    shown = [name for name, wanted in labels if wanted]
    for name in shown:
        # Long task names (some benchmarks' run past 80 characters) fold onto more lines, never cut short.
        table.add_column(name, overflow="fold", ratio=1 if name == "task" else None, no_wrap=name != "task")
    for header in _NUMBER_HEADERS:
        table.add_column(header, justify="right", no_wrap=True)
    for header in ("failed", "workers", "mean s"):
        table.add_column(header, justify="right", no_wrap=True)

    def labelled(benchmark: str, task: str, setting: str) -> list[str]:
        values = {"benchmark": benchmark, "task": task, "setting": setting}
        return [values[name] for name in shown]

    for m in response.manifests:
        table.add_row(
            *labelled(m.benchmark, m.task, m.setting),
            str(m.episodes_succeeded),
            success_percent(m.episodes_succeeded, m.episodes_completed),
            interval(m.episodes_succeeded, m.episodes_completed),
            f"{m.episodes_completed}/{m.episodes_planned}",
            str(m.attempts),
            str(_failed(m.failures)),
            str(m.workers),
            f"{m.episode_wall_seconds_mean:.1f}",
        )
    table.add_section()
    if len(settings) > 1:
        for (benchmark, setting), (planned, completed, succeeded) in settings.items():
            table.add_row(
                *labelled(benchmark, "all", setting),
                str(succeeded),
                success_percent(succeeded, completed),
                interval(succeeded, completed),
                f"{completed}/{planned}",
                "",
                "",
                "",
                "",
            )
    table.add_row(
        *(["all", *[""] * (len(shown) - 1)]),
        str(response.episodes_succeeded),
        success_percent(response.episodes_succeeded, response.episodes_completed),
        interval(response.episodes_succeeded, response.episodes_completed),
        f"{response.episodes_completed}/{response.episodes_planned}",
        str(sum(m.attempts for m in response.manifests)),
        str(_failed(every_failure)),
        "",
        "",
    )
    return Group(table, *(Text(note) for note in notes))


def _setting_totals(manifests: Iterable[pb.ManifestSummary]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(planned, completed, succeeded) per benchmark and setting, in the order they first appear."""
    totals: dict[tuple[str, str], tuple[int, int, int]] = {}
    for m in manifests:
        planned, completed, succeeded = totals.get((m.benchmark, m.setting), (0, 0, 0))
        totals[(m.benchmark, m.setting)] = (
            planned + m.episodes_planned,
            completed + m.episodes_completed,
            succeeded + m.episodes_succeeded,
        )
    return totals


def _failed(failures: Iterable[pb.FailureCount]) -> int:
    """How many attempts failed or were lost, whatever the reason."""
    return sum(failure.attempts for failure in failures)


def _failures(failures: Iterable[pb.FailureCount]) -> str:
    """Failed or lost attempts by reason: "timeout 2, lease_expired 1", or "-"."""
    return ", ".join(f"{name} {count}" for name, count in failure_counts(failures).items()) or "-"


def cmd_compare(args: argparse.Namespace) -> int:
    plots = plots_module() if args.plot else None
    with connect(args) as client:
        episodes = not args.unpaired
        a = client.summary(args.submission_a, include_episodes=episodes)
        b = client.summary(args.submission_b, include_episodes=episodes)
        # Manifests one side lacks may be the other's trials under another stack: read them to pair.
        unmatched = [] if args.unpaired else report.unmatched_hashes(a, b)
        manifests = {h: manifest_format.parse(client.get_manifest(h), expected_hash=h) for h in unmatched}
    sequential = _sequential_comparison(a, b, args)
    # A sequential comparison is read before the end by design: incomplete is no reason to refuse it.
    allow_incomplete = args.allow_incomplete or sequential is not None
    comparison = report.compare(a, b, allow_incomplete, unpaired=args.unpaired, manifests=manifests)
    differing = factors.factors(comparison)
    if plots is not None:
        plots.plot_comparison(args.plot, comparison)
    if args.json:
        document = {} if args.sequential else _comparison_json(comparison, differing)
        document["fixed_n_valid"] = comparison.fixed_n_valid
        document["sequential"] = None if sequential is None else sequential_report.document(sequential)
        print_json(document)
        return 0
    if args.sequential:
        assert sequential is not None
        console().print(f"{b.submission_id} - {a.submission_id}, {sequential_report.state_line(sequential)}")
        return 0
    title = f"{_marked(a)} vs {_marked(b)}" + ("" if comparison.paired else " (UNPAIRED)")
    tests, pairing = _method(comparison)
    lines = (
        []
        if sequential is None
        else [f"{b.submission_id} - {a.submission_id}, " + sequential_report.state_line(sequential)]
    )
    if not comparison.fixed_n_valid:
        lines.append(
            f"NOTE the fixed-N differences, intervals and tests below are {sequential_report.FIXED_N_NOT_VALID}:"
            " not shown" + ("; read the sequential line" if sequential is not None else "")
        )
    elif sequential is not None:
        lines.append(
            f"NOTE the sequential design decides at the end by the exact McNemar test at {rules.FINAL_ALPHA}"
            " (0.01 was spent on its early boundary): read the sequential line, not the 0.05 tests below"
        )
    lines += [f"difference = {b.submission_id} - {a.submission_id} in points, 95% CI; {tests}", pairing]
    lines += [f"differs: {factor.text()}" for factor in differing]
    if not differing and comparison.paired:
        lines.append("differs: nothing recorded (same checkpoint, execute_steps, policy server and manifests)")
    if len(differing) > 1:
        names = ", ".join(factor.name for factor in differing)
        lines.append(f"NOTE {len(differing)} factors differ at once ({names}): the gap is not down to one of them")
    for group in [*comparison.by_setting(), comparison.overall()]:
        name = f"{group.benchmark} {group.setting}" if group.setting else "overall"
        lines.append(f"{name}: {'-' if group.difference is None else group.difference.verdict()}")
    for side, only in ((a, comparison.only_a), (b, comparison.only_b)):
        lines += [f"NOTE only in {side.submission_id}, not compared: {m.benchmark} {m.task} {m.setting}" for m in only]
    table = Table(title=title, caption="\n".join(lines), caption_justify="left")
    for column in ("benchmark", "task", "setting", _marked(a), _marked(b), "difference", "95% CI", "p", "significant"):
        table.add_column(column, justify="left" if column in ("benchmark", "task", "setting") else "right")
    for row in comparison.rows:
        valid = comparison.fixed_n_valid
        cells = (_cell(row.a, valid), _cell(row.b, valid), *_difference_cells(row.difference))
        table.add_row(row.benchmark, row.task, row.setting, *cells)
    console().print(table)
    return 0


def _sequential_comparison(
    a: pb.GetSummaryResponse, b: pb.GetSummaryResponse, args: argparse.Namespace
) -> pb.SequentialState | None:
    """The sequential comparison of B with A, if B was submitted paired with A; with --sequential
    there must be one (named in order: A the partner, B the one paired with it)."""
    found = sequential_report.comparison(a, b)
    if found is None and args.sequential:
        if sequential_report.comparison(b, a) is not None:
            raise UsageError(
                f"{a.submission_id} is paired with {b.submission_id}: name the partner first "
                f"(scheduler compare --sequential {b.submission_id} {a.submission_id})"
            )
        raise UsageError(
            f"{b.submission_id} is not a sequential comparison with {a.submission_id} "
            f"(submit it with --paired-with {a.submission_id})"
        )
    return found


def _pairing(comparison: report.Comparison) -> str:
    if not comparison.paired:
        return "unpaired"
    return "same trials, other stack" if comparison.links else "same manifests"


def _method(comparison: report.Comparison) -> tuple[str, str]:
    """The tests, and how the episodes were paired, in words."""
    if not comparison.paired:
        return ("Fisher exact test, Newcombe hybrid score interval", "UNPAIRED (compared as independent samples)")
    tests = "exact McNemar test, Newcombe paired interval"
    if not comparison.links:
        return (tests, "paired by trial (same manifests, episode by episode)")
    return (
        tests,
        f"paired by trial (same trials, other manifests): {len(comparison.links)} of {len(comparison.rows)}"
        " manifests matched by trial identity to the same trials built under another simulator stack",
    )


def _difference_cells(difference: Difference | None) -> tuple[str, str, str, str]:
    if difference is None:
        return ("-", "-", "-", "-")
    interval = f"[{100.0 * difference.interval.low:+.1f}, {100.0 * difference.interval.high:+.1f}]"
    significant = "yes" if difference.significant else "no"
    if difference.borderline:
        significant += " (borderline)"
    return (f"{100.0 * difference.estimate:+.1f} pts", interval, f"{difference.p_value:.3g}", significant)


def _comparison_json(comparison: report.Comparison, differing: list[factors.Factor]) -> dict[str, Any]:
    a, b = comparison.a, comparison.b
    return {
        "a": {"submission_id": a.submission_id, "checkpoint": a.checkpoint, "complete": a.complete},
        "b": {"submission_id": b.submission_id, "checkpoint": b.checkpoint, "complete": b.complete},
        "paired": comparison.paired,
        "pairing": _pairing(comparison),
        "factors": [{"name": f.name, "a": f.a, "b": f.b, "details": f.details, "text": f.text()} for f in differing],
        "stack_links": [
            {
                "manifest_a": link.a.hash,
                "manifest_b": link.b.hash,
                "trial_identity": link.trial_identity,
                "stack_a": link.stack_a,
                "stack_b": link.stack_b,
                "distributions": link.distributions,
                "stack_computed_differences": link.computed,
            }
            for link in comparison.links.values()
        ],
        "rows": [
            {
                "benchmark": row.benchmark,
                "task": row.task,
                "setting": row.setting,
                "manifest_hash": row.a.manifest_hash,
                "manifest_hash_b": row.b.manifest_hash,
                "a": _side([row.a], comparison.fixed_n_valid),
                "b": _side([row.b], comparison.fixed_n_valid),
                "delta": row.delta,
                "difference": _difference_json(row.difference, row.pairs.pairs if row.pairs else None),
            }
            for row in comparison.rows
        ],
        "by_setting": [_group_json(group, comparison.fixed_n_valid) for group in comparison.by_setting()],
        "overall": _group_json(comparison.overall(), comparison.fixed_n_valid),
        "only_a": [_only(m, comparison.fixed_n_valid) for m in comparison.only_a],
        "only_b": [_only(m, comparison.fixed_n_valid) for m in comparison.only_b],
    }


def _group_json(group: report.GroupDifference, valid: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"benchmark": group.benchmark, "setting": group.setting} if group.setting else {}
    entry["a"] = _side((row.a for row in group.rows), valid)
    entry["b"] = _side((row.b for row in group.rows), valid)
    entry["difference"] = _difference_json(group.difference, group.pairs)
    return entry


def _difference_json(difference: Difference | None, pairs: int | None) -> dict[str, Any] | None:
    if difference is None:
        return None
    return {
        "estimate": difference.estimate,
        "low": difference.interval.low,
        "high": difference.interval.high,
        "paired": difference.paired,
        "pairs": pairs,
        "test": difference.test,
        "p_value": difference.p_value,
        "significant": difference.significant,
        "words": difference.words(),
    }


def _only(m: pb.ManifestSummary, valid: bool) -> dict[str, Any]:
    return {"benchmark": m.benchmark, "task": m.task, "setting": m.setting, **_side([m], valid)}


def _marked(summary: pb.GetSummaryResponse) -> str:
    return summary.submission_id + ("" if summary.complete else " (INCOMPLETE)")


def _side(manifests: Iterable[pb.ManifestSummary], interval_valid: bool) -> dict[str, Any]:
    manifests = list(manifests)
    planned = sum(m.episodes_planned for m in manifests)
    completed = sum(m.episodes_completed for m in manifests)
    succeeded = sum(m.episodes_succeeded for m in manifests)
    rates = rate_fields(succeeded, completed, interval_valid=interval_valid)
    return {"planned": planned, "completed": completed, "succeeded": succeeded, **rates}


def _cell(m: pb.ManifestSummary, interval_valid: bool) -> str:
    rate = success_percent(m.episodes_succeeded, m.episodes_completed)
    found = wilson_interval(m.episodes_succeeded, m.episodes_completed) if interval_valid else None
    interval = interval_text(found)
    cell = f"{m.episodes_succeeded}/{m.episodes_completed} {rate} {interval}"
    return cell + (f" (of {m.episodes_planned})" if m.episodes_completed < m.episodes_planned else "")
