"""`scheduler run SPEC`: one evaluation on this machine, every process started and stopped here.

It does what an operator would with eight commands: a scheduler on SQLite in the spec's output
folder, the checkpoint sealed (or verified) and served, the manifests built (or reused), renderer
workers sized to the machine, the submission, live progress with an ETA, then the summary table,
RESULTS.json, eval_info.json, results.csv, the plot and the kept videos in the output folder; everything it
started is stopped at the end, on Ctrl-C and on SIGTERM. The same command again resumes
(``scheduler.local_run`` says how). What to do is ``scheduler.local_run.make_plan``'s; this module
carries it out and talks to the user.
"""

from __future__ import annotations

import argparse
import datetime
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from evalfleet.local_fleet import WORKER_LINE, LocalFleet, scheduler_argv
from evalfleet.policy_api import client as policy_client
from evalfleet.policy_api.errors import PolicyError
from evalfleet.processes import ServiceProcess
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.v1 import policy_pb2
from manifests.format import Manifest
from scheduler import eval_info, local_run, report, robustness, spec
from scheduler.cli.common import EXIT_UNAVAILABLE, UsageError, console
from scheduler.cli.results import summary_table
from scheduler.results import results_document, write_results
from scheduler.watch import watch

if TYPE_CHECKING:
    from scheduler.cli.common import Subcommands

EXIT_INTERRUPTED = 130
DASHBOARD_LINE = re.compile(r"dashboard on (\S+)")


class Interrupted(Exception):
    """SIGTERM (or SIGINT) arrived: stop what was started, keep what was done."""


def add_commands(commands: Subcommands) -> None:
    run = commands.add_parser(
        "run", help="evaluate a spec on this machine: start a fleet, write the results, stop it (again: resume)"
    )
    run.add_argument("spec", type=Path, metavar="SPEC", help="the evaluation's YAML file (docs/specs.md)")
    run.add_argument(
        "--dry-run", action="store_true", help="print what would run (processes, GPUs, manifests, episodes)"
    )
    run.add_argument("--output", type=Path, help="the output folder, instead of the spec's")
    run.add_argument(
        "--fresh",
        action="store_true",
        help="start over: an earlier run's database, results and videos in the output folder are deleted "
        "(its manifests and checkpoint are kept); without it, a run resumes",
    )
    run.add_argument("--dashboard", action="store_true", help="also serve the web dashboard and print its URL")
    run.add_argument("--timeout", type=float, default=None, help="stop after this many seconds (resumable)")
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    loaded = spec.load(args.spec)
    plan = local_run.make_plan(loaded, args.output)
    if args.dry_run:
        for line in local_run.describe(plan):
            print(line)
        return 0
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout} must be > 0")
    with local_run.exclusive(plan.output, str(loaded.source)):
        previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return _run(plan, args)
        except (Interrupted, KeyboardInterrupt):
            print(
                f"scheduler run: interrupted; every process it started is stopped. Run `scheduler run {args.spec}` "
                "again to resume",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _say(text: str) -> None:
    print(f"scheduler run: {text}", file=sys.stderr, flush=True)


def _run(plan: local_run.Plan, args: argparse.Namespace) -> int:
    started = time.monotonic()
    record = local_run.FleetRecord(plan.output)
    record.stop_leftovers(grace_s=40.0, say=_say)
    if args.fresh:
        local_run.discard_results(plan)
    if not plan.manifests_built:
        duration = plan.loaded.spec.benchmark.definition.build_duration
        _say(f"building manifests into {plan.manifests}" + (f" ({duration})" if duration else ""))
    manifests = local_run.order_manifests(plan, local_run.prepare_manifests(plan))
    local_run.seal_checkpoint(plan, manifests)
    try:
        complete = _evaluate(plan, args, manifests, record, started)
    finally:
        record.clear()  # everything it started is stopped by now
    _say(f"done in {time.monotonic() - started:.0f}s; results in {plan.output}")
    _say(f"dashboard: scheduler serve --db {plan.database} --http-port 8080, then open http://127.0.0.1:8080")
    return 0 if complete else EXIT_UNAVAILABLE


def _evaluate(
    plan: local_run.Plan,
    args: argparse.Namespace,
    manifests: list[Manifest],
    record: local_run.FleetRecord,
    started: float,
) -> bool:
    """Starts the fleet, submits, follows, writes the results; the fleet is stopped on the way out."""
    spec_doc = plan.loaded.spec

    def recorded(name: str) -> Callable[[ServiceProcess], None]:
        return lambda service: record.add(name, service.pid)

    with LocalFleet(plan.output) as fleet:
        http = ["--http-port", "0"] if args.dashboard else []
        lease = ["--lease-seconds", f"{spec_doc.fleet.lease_seconds:g}"]
        argv = scheduler_argv(plan.database, *lease, *http)
        scheduler = fleet.start("scheduler", argv, spawned=recorded("scheduler"))
        if args.dashboard:
            url = scheduler.wait_for_line(lambda line: (m := DASHBOARD_LINE.search(line)) and m.group(1), 30)
            _say(f"dashboard at {url}")
        if plan.checkpoint.server:
            policy_address = plan.checkpoint.server
        else:
            argv = local_run.policy_argv(plan)
            policy_address = fleet.start("inference-server", argv, spawned=recorded("inference-server")).address
        identity = _identity(policy_address)
        for worker in plan.workers:
            argv = local_run.worker_argv(plan, worker, scheduler.address, policy_address)
            fleet.start(worker.worker_id, argv, ready=WORKER_LINE, spawned=recorded(worker.worker_id))
        with SchedulerClient(scheduler.address) as client:
            submission = local_run.submit(client, plan, manifests, identity.digest, spec_doc.labels)
            resumed = submission.tasks_total - submission.tasks_created
            _say(
                f"{submission.episodes_total} episodes in {submission.tasks_total} tasks"
                + (f" ({resumed} submitted before: resuming)" if resumed else "")
                + f" on {len(plan.workers)} workers; logs in {plan.output / 'logs'}"
            )
            _say(f"scheduler at {scheduler.address} (`scheduler --server {scheduler.address} status {spec_doc.id}`)")
            _follow(client, spec_doc.id, args.timeout, started)
            return _write_results(plan, client, identity.identity, manifests)


def _identity(address: str) -> policy_pb2.GetIdentityResponse:
    try:
        with policy_client.PolicyClient(address, timeout_s=60) as policy:
            return policy.identity()
    except PolicyError as exc:
        raise UsageError(f"the inference server at {address}: {exc}") from None


def _follow(client: SchedulerClient, submission_id: str, timeout: float | None, started: float) -> None:
    """Progress (bars on a terminal, changed lines otherwise) until nothing is pending or leased;
    with a deadline, cut off by SIGALRM (its handler raises Interrupted)."""
    if timeout is not None:
        signal.signal(signal.SIGALRM, _interrupt)
        signal.setitimer(signal.ITIMER_REAL, max(0.1, timeout - (time.monotonic() - started)))
    try:
        watch(client, submission_id, 2.0, sys.stdout, live=sys.stdout.isatty())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _write_results(
    plan: local_run.Plan,
    client: SchedulerClient,
    identity: policy_pb2.IdentityRecord,
    manifests: list[Manifest],
) -> bool:
    """The summary table, RESULTS.json, lerobot-eval's eval_info.json, results.csv, the plot (with
    matplotlib) and kept videos; whether the evaluation is done (every episode has a result, or its
    sequential rule stopped it)."""
    summary = client.summary(plan.spec_id, include_episodes=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    axes = robustness.robustness(summary, {manifest.hash: manifest for manifest in manifests})
    document = results_document(summary, client.workers(), now, identity, axes)
    write_results(plan.output / "RESULTS.json", document)
    report.write_csv(plan.output / "results.csv", summary)
    try:
        from scheduler import plots

        plots.plot_summary(plan.output / "success.png", summary)
        if axes:
            plots.plot_robustness(plan.output / "robustness.png", axes)
    except ImportError:
        _say("no plot: matplotlib is not installed (the plots extra)")
    videos = local_run.download_videos(client, plan.spec_id, plan.output / "videos")
    lerobot_shaped = eval_info.eval_info(summary, eval_info.task_numbers(manifests), videos)
    eval_info.write(plan.output / eval_info.FILE_NAME, lerobot_shaped)
    console().print(summary_table(summary))
    overall = document["overall"]
    _say(f"{overall['succeeded']}/{overall['completed']} episodes solved ({overall['planned']} planned)")
    charts = "success.png and robustness.png" if axes else "success.png"
    _say(f"results: {plan.output / 'RESULTS.json'} (also eval_info.json, results.csv and {charts} there)")
    _say(f"videos: {len(videos)} in {plan.output / 'videos'}")
    for line in robustness.lines(axes):
        _say(line)
    if summary.sequential.stopped_at:
        _say(f"stopped by its sequential rule: {summary.sequential.words}")
    # Done: every episode has a result, or the sequential rule decided and stopped the rest.
    return bool(document["complete"] or summary.sequential.stopped_at)
