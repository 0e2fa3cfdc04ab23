"""The `scheduler` command: serve, submit, watch and operate evaluations, build manifests.

Human output is aligned tables; every reading command has ``--json`` for scripts and agents. Bad
input (ours or refused by the server) prints one line on stderr and exits 2; an unreachable
server exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from rich.console import Console
from rich.table import Table

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.auth import TokenError, read_token
from evalfleet.channels import read_tls_ca
from evalfleet.scheduler_api import client as client_module
from evalfleet.scheduler_api.errors import SchedulerError
from evalfleet.v1 import scheduler_pb2 as pb
from manifests import format as manifest_format
from manifests.expected import longest_first
from scheduler import report, store
from scheduler.results import results_document, write_results
from scheduler.wire_json import STATE_NAMES, counts_dict, message_dict

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 1
_BAD_INPUT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
# Benchmarks whose manifest builders need their simulator; imported only when used.
BENCHMARK_BUILDERS = {
    "libero": "benchmarks.libero.adapter",
    "robotwin": "benchmarks.robotwin.adapter",
}


class UsageError(Exception):
    """Bad command-line input detected before any request is sent."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "forwards_arguments", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args) or 0
    except (UsageError, TokenError, manifest_format.ManifestError) as exc:
        print(f"scheduler: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SchedulerError as exc:
        print(f"scheduler: {exc.code.name}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if exc.code in _BAD_INPUT_CODES else EXIT_UNAVAILABLE


# ---------------------------------------------------------------------------------------------
# Parser.


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scheduler", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the scheduler server")
    serve.add_argument("--db", type=Path, required=True, help="SQLite database file (created if missing)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=50051, help="0 picks a free port (printed at start)")
    serve.add_argument("--lease-seconds", type=float, default=60.0)
    serve.add_argument(
        "--synchronous",
        choices=("normal", "full"),
        default="normal",
        help="normal survives a process crash; full also survives power loss (slower commits)",
    )
    serve.add_argument("--token-file", type=Path, help="require this bearer token (needed beyond loopback)")
    serve.add_argument("--tls-cert", type=Path)
    serve.add_argument("--tls-key", type=Path)
    serve.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="serve the web dashboard and /metrics on this port, same host and token (0 picks one; off by default)",
    )
    serve.set_defaults(func=cmd_serve)

    submit = _client_command(commands, "submit", cmd_submit, "submit manifests for evaluation")
    submit.add_argument("--manifest", type=Path, nargs="+", required=True, metavar="FILE")
    submit.add_argument("--route", required=True, help="worker route, e.g. libero, robotwin, synthetic")
    submit.add_argument("--batch-size", type=int, default=5, help="episodes per task (minibatch)")
    submit.add_argument("--max-attempts", type=int, default=3)
    submit.add_argument("--priority", type=int, default=0, help="higher runs first")
    submit.add_argument(
        "--order",
        choices=("longest-first", "given"),
        default="longest-first",
        help="task claim order: manifests by expected episode time, longest first (see manifests.expected), "
        "or as given",
    )
    submit.add_argument("--submission-id", help="reuse to resume an interrupted submit (idempotent)")
    submit.add_argument("--checkpoint", default="", help="checkpoint identity digest that must serve the tasks")
    submit.add_argument(
        "--policy-server",
        metavar="HOST:PORT",
        help="resolve --checkpoint from this inference server's identity, once, now",
    )
    submit.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")

    status = _client_command(commands, "status", cmd_status, "task and episode counts per submission")
    status.add_argument("submission", nargs="?", default="")
    status.add_argument(
        "--watch",
        action="store_true",
        help="follow progress until no task is pending or leased (bars on a terminal, lines otherwise)",
    )
    status.add_argument("--interval", type=float, default=2.0, help="seconds between polls with --watch")

    summary = _client_command(commands, "summary", cmd_summary, "results per benchmark task x setting")
    summary.add_argument("submission")
    summary.add_argument("--out", type=Path, metavar="RESULTS.json", help="also write the results document")
    summary.add_argument("--csv", type=Path, metavar="FILE", help="also write one CSV row per task x setting")
    summary.add_argument("--plot", type=Path, metavar="PNG", help="also draw success per task, settings side by side")

    compare = _client_command(commands, "compare", cmd_compare, "compare two submissions of the same manifests")
    compare.add_argument("submission_a")
    compare.add_argument("submission_b")
    compare.add_argument("--plot", type=Path, metavar="PNG", help="also draw both submissions side by side")
    compare.add_argument(
        "--allow-incomplete", action="store_true", help="compare even if one is incomplete (marked in the output)"
    )

    tasks = _client_command(commands, "tasks", cmd_tasks, "list tasks")
    _selector_arguments(tasks, positional=False)
    tasks.add_argument("--limit", type=int, default=1000)

    task = _client_command(commands, "task", cmd_task, "one task: every attempt and its episode results")
    task.add_argument("task_id")

    _client_command(commands, "workers", cmd_workers, "list workers (active, idle, lost)")

    cancel = _client_command(commands, "cancel", cmd_cancel, "cancel pending and leased tasks")
    _selector_arguments(cancel)
    requeue = _client_command(commands, "requeue", cmd_requeue, "requeue failed or cancelled tasks")
    _selector_arguments(requeue)
    priority = _client_command(commands, "priority", cmd_priority, "change the priority of tasks")
    priority.add_argument("priority", type=int)
    _selector_arguments(priority)

    _manifest_commands(commands)
    return parser


def _client_command(
    commands: Any, name: str, func: Callable[[argparse.Namespace], int | None], help_text: str
) -> argparse.ArgumentParser:
    sub = commands.add_parser(name, help=help_text)
    sub.add_argument(
        "--server",
        default=None,
        help=f"scheduler address (default ${client_module.ADDRESS_ENV} or {client_module.DEFAULT_ADDRESS})",
    )
    sub.add_argument("--token-file", type=Path, default=os.environ.get("EVALFLEET_TOKEN_FILE"))
    sub.add_argument("--tls-ca", type=Path, help="CA certificate to verify a TLS scheduler")
    sub.add_argument("--json", action="store_true", help="machine-readable output")
    sub.set_defaults(func=func)
    return sub


def _selector_arguments(sub: argparse.ArgumentParser, positional: bool = True) -> None:
    if positional:
        sub.add_argument("submission", nargs="?", default="")
    else:
        sub.add_argument("--submission", default="")
    sub.add_argument("--task", action="append", default=[], dest="task_ids", metavar="TASK_ID")
    sub.add_argument("--route", default="")
    sub.add_argument("--state", action="append", default=[], choices=STATE_NAMES)


def _manifest_commands(commands: Any) -> None:
    manifest = commands.add_parser("manifest", help="build, verify and show sealed manifests")
    actions = manifest.add_subparsers(dest="action", required=True, metavar="ACTION")

    build = actions.add_parser("build", help="build manifests of a benchmark")
    benchmarks = build.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    synthetic = benchmarks.add_parser("synthetic", help="N episodes with seeded durations and successes")
    synthetic.add_argument("--episodes", type=int, required=True)
    synthetic.add_argument("--seed", type=int, default=0)
    synthetic.add_argument("--mean-seconds", type=float, default=1.0)
    synthetic.add_argument("--success-rate", type=float, default=0.5)
    synthetic.add_argument("--task", default="synthetic")
    synthetic.add_argument("--setting", default="default")
    synthetic.add_argument("--out", type=Path, required=True, help="file, or directory (<hash>.json)")
    synthetic.set_defaults(func=cmd_manifest_build_synthetic)
    for name in BENCHMARK_BUILDERS:
        # The benchmark's own parser (imported only when used) takes every option after the name.
        sub = benchmarks.add_parser(name, help=f"scan {name} (needs the {name} extra)", add_help=False)
        sub.set_defaults(func=cmd_manifest_build_benchmark, forwards_arguments=True)

    verify = actions.add_parser("verify", help="check files are sealed, canonical manifests")
    verify.add_argument("files", type=Path, nargs="+")
    verify.add_argument("--expect", metavar="HASH", help="the hash the manifest must have (else its file name)")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=cmd_manifest_verify)

    show = actions.add_parser("show", help="describe a manifest")
    show.add_argument("file", type=Path)
    show.add_argument("--json", action="store_true", help="print the whole manifest")
    show.set_defaults(func=cmd_manifest_show)

    imports = actions.add_parser("import", help="import a published episode subset")
    kinds = imports.add_subparsers(dest="kind", required=True, metavar="KIND")
    subset = kinds.add_parser("robotwin-subset", help="a checksummed RoboTwin episode subset")
    subset.add_argument("--root", type=Path, required=True)
    subset.add_argument("--out", type=Path, required=True, help="directory for <hash>.json manifests")
    subset.set_defaults(func=cmd_manifest_import_robotwin)


# ---------------------------------------------------------------------------------------------
# Server.


def cmd_serve(args: argparse.Namespace) -> int:
    from scheduler.server import ServeConfig, is_loopback, serve

    token = read_token(args.token_file) if args.token_file else None
    if not is_loopback(args.host) and token is None:
        raise UsageError(f"--host {args.host} is beyond loopback: --token-file is required")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.lease_seconds <= 0:
        raise UsageError("--lease-seconds must be > 0")
    if args.http_port is not None and not 0 <= args.http_port <= 65535:
        raise UsageError(f"--http-port {args.http_port} is outside [0, 65535]")
    config = ServeConfig(
        db_path=args.db,
        host=args.host,
        port=args.port,
        lease_seconds=args.lease_seconds,
        synchronous=args.synchronous.upper(),
        token=token,
        tls_cert=args.tls_cert.read_bytes() if args.tls_cert else None,
        tls_key=args.tls_key.read_bytes() if args.tls_key else None,
        http_port=args.http_port,
    )
    try:
        asyncio.run(serve(config))
    except store.SchemaVersionError as exc:
        raise UsageError(f"{args.db}: {exc}") from None
    return 0


# ---------------------------------------------------------------------------------------------
# Client commands.


def _client(args: argparse.Namespace) -> client_module.SchedulerClient:
    token = read_token(args.token_file) if args.token_file else None
    return client_module.SchedulerClient(args.server, token, tls_ca=read_tls_ca(args.tls_ca))


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def _rate(succeeded: int, completed: int) -> str:
    return f"{100.0 * succeeded / completed:.1f}%" if completed else "-"


def cmd_submit(args: argparse.Namespace) -> int:
    labels = {}
    for label in args.label:
        key, sep, value = label.partition("=")
        if not sep or not key:
            raise UsageError(f"--label {label!r} must be KEY=VALUE")
        labels[key] = value
    manifests = [manifest_format.read(path) for path in args.manifest]
    if args.order == "longest-first":
        manifests = longest_first(manifests)
    checkpoint = args.checkpoint
    if args.policy_server:
        checkpoint = _resolve_checkpoint(args.policy_server, args.checkpoint, args.token_file)
        labels.setdefault("policy_server", args.policy_server)
    with _client(args) as client:
        response = client.submit(
            manifests,
            args.route,
            batch_size=args.batch_size,
            max_attempts=args.max_attempts,
            priority=args.priority,
            submission_id=args.submission_id,
            checkpoint=checkpoint,
            labels=labels,
        )
    if args.json:
        _print_json(message_dict(response))
    else:
        print(response.submission_id)
        print(
            f"{response.tasks_total} tasks ({response.tasks_created} new), {response.episodes_total} episodes",
            file=sys.stderr,
        )
    return 0


def _resolve_checkpoint(address: str, stated: str, token_file: Path | None) -> str:
    """The identity digest the inference server at ``address`` serves (it must match ``stated``)."""
    from evalfleet.policy_api.client import PolicyClient
    from evalfleet.policy_api.errors import PolicyError

    token = read_token(token_file) if token_file else None
    try:
        with PolicyClient(address, token, timeout_s=30) as policy:
            digest = policy.identity().digest
    except PolicyError as exc:
        raise UsageError(f"--policy-server {address}: {exc}") from None
    if stated and stated != digest:
        raise UsageError(f"--checkpoint {stated} but --policy-server {address} serves {digest}")
    return digest


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch:
        return _watch_status(args)
    with _client(args) as client:
        response = client.status(args.submission)
    if args.json:
        submissions = []
        for sub in response.submissions:
            entry = message_dict(sub)
            entry.pop("tasks")
            entry.update(counts_dict(sub.tasks))
            submissions.append(entry)
        episodes = {
            key: sum(getattr(sub, key) for sub in response.submissions)
            for key in ("episodes_planned", "episodes_completed", "episodes_succeeded")
        }
        _print_json({**counts_dict(response.tasks), **episodes, "submissions": submissions})
        return 0
    table = Table(title="submissions")
    for column in ("submission", "route", "prio", *STATE_NAMES, "episodes", "success"):
        table.add_column(column, justify="left" if column in ("submission", "route") else "right")
    for sub in response.submissions:
        table.add_row(
            sub.submission_id,
            sub.route,
            str(sub.priority),
            *(str(getattr(sub.tasks, name)) for name in STATE_NAMES),
            f"{sub.episodes_completed}/{sub.episodes_planned}",
            _rate(sub.episodes_succeeded, sub.episodes_completed),
        )
    _console().print(table)
    return 0


def _watch_status(args: argparse.Namespace) -> int:
    from scheduler.watch import watch

    if args.json:
        raise UsageError("--watch and --json do not combine; poll `scheduler status --json` instead")
    if not 0.1 <= args.interval <= 3600:
        raise UsageError(f"--interval {args.interval} is outside [0.1, 3600] seconds")
    with _client(args) as client:
        return watch(client, args.submission, args.interval, sys.stdout, live=sys.stdout.isatty())


def _plots() -> Any:
    """The plotting module, or a usage error naming the extra that provides matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib: pip install 'evalfleet[plots]'")
    from scheduler import plots

    return plots


def cmd_summary(args: argparse.Namespace) -> int:
    plots = _plots() if args.plot else None
    with _client(args) as client:
        response = client.summary(args.submission)
        if args.out:
            write_results(args.out, results_document(client, args.submission))
    if args.csv:
        report.write_csv(args.csv, response)
    if plots is not None:
        plots.plot_summary(args.plot, response)
    if args.json:
        data = message_dict(response)
        data["tasks"] = counts_dict(response.tasks)
        data["success_rate"] = _ratio(response.episodes_succeeded, response.episodes_completed)
        for entry, manifest in zip(data["manifests"], response.manifests, strict=True):
            entry["tasks"] = counts_dict(manifest.tasks)
            entry["success_rate"] = _ratio(manifest.episodes_succeeded, manifest.episodes_completed)
        _print_json(data)
        return 0
    title = f"summary of {response.submission_id}"
    if not response.complete:
        title += f" (INCOMPLETE: {response.episodes_completed}/{response.episodes_planned} episodes)"
    table = Table(title=title)
    for column in ("benchmark", "task", "setting", "success", "rate", "done/planned", "attempts", "workers", "mean s"):
        table.add_column(column, justify="left" if column in ("benchmark", "task", "setting") else "right")
    for m in response.manifests:
        table.add_row(
            m.benchmark,
            m.task,
            m.setting,
            str(m.episodes_succeeded),
            _rate(m.episodes_succeeded, m.episodes_completed),
            f"{m.episodes_completed}/{m.episodes_planned}",
            str(m.attempts),
            str(m.workers),
            f"{m.episode_wall_seconds_mean:.1f}",
        )
    table.add_section()
    table.add_row(
        "all",
        "",
        "",
        str(response.episodes_succeeded),
        _rate(response.episodes_succeeded, response.episodes_completed),
        f"{response.episodes_completed}/{response.episodes_planned}",
        str(sum(m.attempts for m in response.manifests)),
        "",
        "",
    )
    _console().print(table)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    plots = _plots() if args.plot else None
    with _client(args) as client:
        a, b = client.summary(args.submission_a), client.summary(args.submission_b)
    rows = report.compare(a, b, args.allow_incomplete)
    if plots is not None:
        plots.plot_comparison(args.plot, a, b, rows)
    if args.json:
        _print_json(
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
    _console().print(table)
    return 0


def _marked(summary: pb.GetSummaryResponse) -> str:
    return summary.submission_id + ("" if summary.complete else " (INCOMPLETE)")


def _side(m: pb.ManifestSummary) -> dict[str, Any]:
    return {
        "planned": m.episodes_planned,
        "completed": m.episodes_completed,
        "succeeded": m.episodes_succeeded,
        "success_rate": _ratio(m.episodes_succeeded, m.episodes_completed),
    }


def _cell(m: pb.ManifestSummary) -> str:
    cell = f"{m.episodes_succeeded}/{m.episodes_completed} {_rate(m.episodes_succeeded, m.episodes_completed)}"
    return cell + (f" (of {m.episodes_planned})" if m.episodes_completed < m.episodes_planned else "")


def _console() -> Console:
    """Tables keep their columns when piped: a non-terminal gets a wide page, not 80 columns."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def _ratio(succeeded: int, completed: int) -> float | None:
    return succeeded / completed if completed else None


def _selector(args: argparse.Namespace) -> pb.TaskSelector:
    submission = getattr(args, "submission", "")
    return client_module.selector(submission, args.task_ids, args.route, args.state)


def cmd_tasks(args: argparse.Namespace) -> int:
    with _client(args) as client:
        response = client.tasks(_selector(args), args.limit)
    if args.json:
        _print_json({"tasks": message_dict(response).get("tasks", []), "truncated": response.truncated})
        return 0
    table = Table(title="tasks" + (" (truncated)" if response.truncated else ""))
    for column in ("task", "state", "route", "prio", "episodes", "done", "attempt", "worker", "last error"):
        table.add_column(column)
    for task in response.tasks:
        table.add_row(
            task.task_id,
            pb.TaskState.Name(task.state).removeprefix("TASK_STATE_").lower(),
            task.route,
            str(task.priority),
            f"{task.episode_start}-{task.episode_end - 1}",
            str(task.episodes_done),
            f"{task.attempts}/{task.max_attempts}",
            task.worker_id,
            task.last_error[:60],
        )
    _console().print(table)
    return 0


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "-"


def cmd_task(args: argparse.Namespace) -> int:
    with _client(args) as client:
        response = client.task(args.task_id)
    if args.json:
        _print_json(message_dict(response))
        return 0
    task = response.task
    state = pb.TaskState.Name(task.state).removeprefix("TASK_STATE_").lower()
    print(f"task       {task.task_id}  ({state}, submission {task.submission_id}, route {task.route})")
    print(f"episodes   {task.episode_start}-{task.episode_end - 1}, {task.episodes_done} stored")
    print(f"attempts   {task.attempts}/{task.max_attempts}, priority {task.priority}")
    attempts = Table(title="attempts")
    for column in ("attempt", "token", "worker", "started", "ended", "outcome", "error"):
        attempts.add_column(column)
    for attempt in response.attempts:
        attempts.add_row(
            str(attempt.attempt),
            str(attempt.fencing_token),
            attempt.worker_id,
            _when(attempt.started_at),
            _when(attempt.ended_at),
            attempt.outcome,
            attempt.error,
        )
    episodes = Table(title="episodes")
    for column in ("episode", "success", "steps", "wall s", "worker", "token"):
        episodes.add_column(column)
    for stored in response.episodes:
        episodes.add_row(
            str(stored.result.episode_index),
            "yes" if stored.result.success else "no",
            str(stored.result.steps),
            f"{stored.result.wall_seconds:.1f}",
            stored.worker_id,
            str(stored.fencing_token),
        )
    console = _console()
    console.print(attempts)
    console.print(episodes)
    return 0


def cmd_workers(args: argparse.Namespace) -> int:
    with _client(args) as client:
        workers = client.workers()
    if args.json:
        _print_json({"workers": [message_dict(worker) for worker in workers]})
        return 0
    table = Table(title="workers")
    for column in ("worker", "state", "host", "gpu", "routes", "current task"):
        table.add_column(column)
    for worker in workers:
        table.add_row(
            worker.worker_id, worker.state, worker.host, worker.gpu_uuid, ",".join(worker.routes), worker.current_task
        )
    _console().print(table)
    return 0


def _change(
    args: argparse.Namespace, verb: str, call: Callable[[client_module.SchedulerClient, pb.TaskSelector], int]
) -> int:
    with _client(args) as client:
        changed = call(client, _selector(args))
    if args.json:
        _print_json({"changed": changed})
    else:
        print(f"{verb} {changed} task{'s' if changed != 1 else ''}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    return _change(args, "cancelled", lambda client, sel: client.cancel(sel))


def cmd_requeue(args: argparse.Namespace) -> int:
    return _change(args, "requeued", lambda client, sel: client.requeue(sel))


def cmd_priority(args: argparse.Namespace) -> int:
    return _change(args, "reprioritized", lambda client, sel: client.set_priority(sel, args.priority))


# ---------------------------------------------------------------------------------------------
# Manifests.


def cmd_manifest_build_synthetic(args: argparse.Namespace) -> int:
    try:
        manifest = build_synthetic(
            args.episodes,
            seed=args.seed,
            mean_seconds=args.mean_seconds,
            success_rate=args.success_rate,
            task=args.task,
            setting=args.setting,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    path = manifest_format.write(manifest, args.out)
    print(f"{manifest.hash}  {path}  ({len(manifest)} episodes)")
    return 0


def cmd_manifest_build_benchmark(args: argparse.Namespace) -> int:
    module = _benchmark_module(args.benchmark)
    parser = argparse.ArgumentParser(prog=f"scheduler manifest build {args.benchmark}")
    parser.add_argument("--out", type=Path, required=True, help="directory for <hash>.json manifests")
    module.add_build_arguments(parser)
    sub_args = parser.parse_args(args.rest)
    sub_args.out.mkdir(parents=True, exist_ok=True)
    _write_manifests(lambda: module.build_manifests(sub_args), sub_args.out)
    return 0


def cmd_manifest_import_robotwin(args: argparse.Namespace) -> int:
    module = _benchmark_module("robotwin")
    args.out.mkdir(parents=True, exist_ok=True)
    _write_manifests(lambda: module.import_subset(args.root), args.out)
    return 0


def _write_manifests(build: Callable[[], Sequence[manifest_format.Manifest]], out: Path) -> None:
    from benchmarks.base import BenchmarkError

    try:
        manifests = build()
    except BenchmarkError as exc:
        raise UsageError(str(exc)) from None
    for manifest in manifests:
        path = manifest_format.write(manifest, out)
        print(f"{manifest.hash}  {path}  ({manifest.task} / {manifest.setting}, {len(manifest)} episodes)")


def _benchmark_module(name: str) -> Any:
    try:
        return importlib.import_module(BENCHMARK_BUILDERS[name])
    except ImportError as exc:
        raise UsageError(f"the {name} builder is unavailable ({exc}); install evalfleet[{name}]") from None


def cmd_manifest_verify(args: argparse.Namespace) -> int:
    results, bad = [], 0
    for path in args.files:
        try:
            manifest = manifest_format.read(path, expected_hash=args.expect)
            results.append({"path": str(path), "ok": True, "hash": manifest.hash, "episodes": len(manifest)})
        except manifest_format.ManifestError as exc:
            bad += 1
            results.append({"path": str(path), "ok": False, "field": exc.field, "error": exc.message})
    if args.json:
        _print_json({"manifests": results})
    for result in results:
        if result["ok"] and not args.json:
            print(f"OK   {result['hash']}  {result['path']}  ({result['episodes']} episodes)")
        elif not result["ok"]:
            print(f"scheduler: {result['path']}: {result['field']}: {result['error']}", file=sys.stderr)
    return EXIT_BAD_INPUT if bad else 0


def cmd_manifest_show(args: argparse.Namespace) -> int:
    manifest = manifest_format.read(args.file)
    if args.json:
        _print_json(manifest.data)
        return 0
    print(f"hash       {manifest.hash}")
    print(f"benchmark  {manifest.benchmark}")
    print(f"task       {manifest.task}")
    print(f"setting    {manifest.setting}")
    print(f"episodes   {len(manifest)}")
    for key in ("protocol", "versions", "source"):
        if manifest.data[key]:
            print(f"{key:<10} {json.dumps(manifest.data[key], sort_keys=True)}")
    first, last = manifest.episodes[0]["episode_id"], manifest.episodes[-1]["episode_id"]
    print(f"ids        {first} .. {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
