"""The operator's commands: submit evaluations, follow them, and list, inspect and change their tasks.

`submit`, `status` (``--watch`` follows progress), `tasks`, `task`, `workers`, and `cancel`,
`requeue` and `priority`, which act on the tasks a selector names (submission, task ids, route,
states).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from evalfleet.auth import read_token
from evalfleet.channels import read_tls_ca
from evalfleet.scheduler_api import client as client_module
from evalfleet.scheduler_api.limits import DEFAULT_LIST_TASKS
from evalfleet.scheduler_api.vocabulary import TASK_STATE_NAMES, failure_reason_name, success_percent, task_state_name
from evalfleet.v1 import scheduler_pb2 as pb
from manifests import format as manifest_format
from manifests.expected import longest_first
from scheduler.cli.common import UsageError, add_client_command, connect, console, print_json
from scheduler.watch import note
from scheduler.wire_json import counts_dict, message_dict

if TYPE_CHECKING:
    from scheduler.cli.common import Subcommands


def add_submission_commands(commands: Subcommands) -> None:
    """`submit` and `status`."""
    submit = add_client_command(commands, "submit", cmd_submit, "submit manifests for evaluation")
    submit.add_argument(
        "--spec",
        type=Path,
        metavar="SPEC",
        help="the evaluation a spec file describes (docs/specs.md): its manifests built or reused here, every "
        "other option from it; replaces --manifest, --route and the options the spec holds",
    )
    submit.add_argument("--manifest", type=Path, nargs="+", metavar="FILE")
    submit.add_argument("--route", help="worker route, e.g. libero, robotwin, synthetic")
    submit.add_argument("--batch-size", type=int, default=None, help="episodes per task (minibatch; default 5)")
    submit.add_argument("--max-attempts", type=int, default=None, help="default 3")
    submit.add_argument("--priority", type=int, default=None, help="higher runs first (default 0)")
    submit.add_argument(
        "--order",
        choices=("longest-first", "given"),
        default=None,
        help="task claim order: manifests by expected episode time, longest first (see manifests.expected), "
        "or as given",
    )
    submit.add_argument("--submission-id", help="reuse to resume an interrupted submit (idempotent)")
    submit.add_argument("--checkpoint", default="", help="checkpoint identity digest that must serve the tasks")
    submit.add_argument(
        "--policy-server",
        metavar="HOST:PORT",
        help="resolve --checkpoint from this inference server's identity, once, now (same --token-file)",
    )
    submit.add_argument(
        "--policy-tls-ca", type=Path, help="CA certificate of a TLS --policy-server (--tls-ca is the scheduler's)"
    )
    submit.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    submit.add_argument(
        "--execute-steps",
        type=int,
        default=None,
        metavar="N",
        help="actions of each policy chunk to execute before asking again, overriding the checkpoint's declared "
        "execute_steps (0: the whole chunk); part of the submission's definition",
    )
    submit.add_argument(
        "--max-leased",
        type=int,
        default=None,
        metavar="N",
        help="at most N of its tasks leased at once (a paired sequential submission shares its partner's cap)",
    )
    sequential = submit.add_argument_group(
        "sequential evaluation (docs/sequential.md): claimed in a seeded random order, stopped once decided"
    )
    sequential.add_argument(
        "--sequential-seed", type=int, default=None, metavar="SEED", help="the dispatch order's seed (recorded)"
    )
    sequential.add_argument(
        "--threshold", type=float, default=None, metavar="P", help="stop once the rate is decided >= P or < P"
    )
    sequential.add_argument(
        "--precision", type=float, default=None, metavar="E", help="stop once the rate is known to +-E"
    )
    sequential.add_argument(
        "--paired-with",
        default=None,
        metavar="SUBMISSION",
        help="compare with this sequential submission on the same episodes, side by side, and stop both when decided",
    )
    sequential.add_argument(
        "--margin",
        type=float,
        default=None,
        metavar="D",
        help="with --paired-with: also stop as equivalent once B - A lies within +-D",
    )
    sequential.add_argument(
        "--cancel-leased", action="store_true", default=None, help="the stop cancels running tasks too"
    )

    status = add_client_command(commands, "status", cmd_status, "task and episode counts per submission")
    status.add_argument("submission", nargs="?", default="")
    status.add_argument(
        "--watch",
        action="store_true",
        help="follow progress until no task is pending or leased (bars on a terminal, lines otherwise)",
    )
    status.add_argument("--interval", type=float, default=2.0, help="seconds between polls with --watch")


def add_task_commands(commands: Subcommands) -> None:
    """`tasks`, `task`, `workers`, `cancel`, `requeue` and `priority`."""
    tasks = add_client_command(commands, "tasks", cmd_tasks, "list tasks")
    _selector_arguments(tasks, positional=False)
    tasks.add_argument("--limit", type=int, default=DEFAULT_LIST_TASKS)

    task = add_client_command(commands, "task", cmd_task, "one task: every attempt and its episode results")
    task.add_argument("task_id")

    add_client_command(commands, "workers", cmd_workers, "list workers (active, idle, lost)")

    cancel = add_client_command(commands, "cancel", cmd_cancel, "cancel pending and leased tasks")
    _selector_arguments(cancel)
    requeue = add_client_command(commands, "requeue", cmd_requeue, "requeue failed or cancelled tasks")
    _selector_arguments(requeue)
    for name, func, help_text in (
        ("pause", cmd_pause, "hold a submission's pending tasks back from claims (leased ones run on)"),
        ("resume", cmd_resume, "let a paused submission's tasks be claimed again (after a canary's pause, too)"),
    ):
        sub = add_client_command(commands, name, func, help_text)
        sub.add_argument("submission")
    priority = add_client_command(commands, "priority", cmd_priority, "change the priority of tasks")
    priority.add_argument("priority", type=int)
    _selector_arguments(priority)


def _selector_arguments(sub: argparse.ArgumentParser, positional: bool = True) -> None:
    if positional:
        sub.add_argument("submission", nargs="?", default="")
    else:
        sub.add_argument("--submission", default="")
    sub.add_argument("--task", action="append", default=[], dest="task_ids", metavar="TASK_ID")
    sub.add_argument("--route", default="")
    sub.add_argument("--state", action="append", default=[], choices=TASK_STATE_NAMES)


# What a spec holds, as the flags that would otherwise say it.
_SPEC_FLAGS = (
    ("--manifest", "manifest"),
    ("--route", "route"),
    ("--batch-size", "batch_size"),
    ("--max-attempts", "max_attempts"),
    ("--priority", "priority"),
    ("--order", "order"),
    ("--submission-id", "submission_id"),
    ("--label", "label"),
    ("--execute-steps", "execute_steps"),
    ("--max-leased", "max_leased"),
    ("--sequential-seed", "sequential_seed"),
    ("--threshold", "threshold"),
    ("--precision", "precision"),
    ("--paired-with", "paired_with"),
    ("--margin", "margin"),
    ("--cancel-leased", "cancel_leased"),
)


def _max_leased(value: int | None) -> int:
    if value is not None and value < 1:
        raise UsageError(f"--max-leased {value} must be >= 1 (leave it out for no cap)")
    return value or 0


def _sequential(args: argparse.Namespace) -> pb.SequentialSettings | None:
    """The sequential settings the flags ask for (None: no flag of them given); the scheduler
    checks their values and names the one it refuses."""
    names = ("sequential_seed", "threshold", "precision", "paired_with", "margin", "cancel_leased")
    if all(getattr(args, name) is None for name in names):
        return None
    if args.sequential_seed is not None and args.sequential_seed < 0:
        raise UsageError(f"--sequential-seed {args.sequential_seed} must be >= 0")
    return pb.SequentialSettings(
        seed=args.sequential_seed or 0,
        threshold=args.threshold,
        precision=args.precision,
        paired_with=args.paired_with or "",
        margin=args.margin,
        cancel_leased=bool(args.cancel_leased),
    )


def cmd_submit(args: argparse.Namespace) -> int:
    if args.spec is not None:
        given = [flag for flag, name in _SPEC_FLAGS if getattr(args, name) not in (None, [])]
        if given:
            raise UsageError(f"--spec holds the evaluation's options; {', '.join(given)} cannot be given with it")
        return _submit_spec(args)
    for flag, name in (("--manifest", "manifest"), ("--route", "route")):
        if not getattr(args, name):
            raise UsageError(f"{flag} is required (or --spec)")
    labels = {}
    for label in args.label:
        key, sep, value = label.partition("=")
        if not sep or not key:
            raise UsageError(f"--label {label!r} must be KEY=VALUE")
        labels[key] = value
    manifests = [manifest_format.read(path) for path in args.manifest]
    if args.order in (None, "longest-first"):
        manifests = longest_first(manifests)
    if args.execute_steps is not None and args.execute_steps < 0:
        raise UsageError(f"--execute-steps {args.execute_steps} must be >= 0 (0: the whole chunk)")
    checkpoint = args.checkpoint
    if args.policy_server:
        tls_ca = read_tls_ca(args.policy_tls_ca, "--policy-tls-ca")
        checkpoint = _resolve_checkpoint(
            args.policy_server, args.checkpoint, args.token_file, tls_ca, args.execute_steps
        )
        labels.setdefault("policy_server", args.policy_server)
    with connect(args) as client:
        response = client.submit(
            manifests,
            args.route,
            batch_size=5 if args.batch_size is None else args.batch_size,
            max_attempts=3 if args.max_attempts is None else args.max_attempts,
            priority=args.priority or 0,
            submission_id=args.submission_id,
            checkpoint=checkpoint,
            labels=labels,
            execute_steps=args.execute_steps,
            sequential=_sequential(args),
            max_leased_tasks=_max_leased(args.max_leased),
        )
    _print_submitted(args, response)
    return 0


def _submit_spec(args: argparse.Namespace) -> int:
    """`submit --spec`: the spec's manifests (built or reused in its output folder) and options,
    its checkpoint pinned from --policy-server, the spec's server or its sealed folder."""
    from scheduler import local_run, spec

    loaded = spec.load(args.spec)
    document = loaded.spec
    plan = local_run.make_plan(loaded)
    manifests = local_run.order_manifests(plan, local_run.prepare_manifests(plan))
    labels = dict(document.labels)
    server = args.policy_server or document.checkpoint.server
    if server:
        tls_ca = read_tls_ca(args.policy_tls_ca, "--policy-tls-ca")
        checkpoint = _resolve_checkpoint(server, args.checkpoint, args.token_file, tls_ca, document.actions_per_chunk)
        labels.setdefault("policy_server", server)
    else:
        local_run.seal_checkpoint(plan)
        checkpoint = local_run.checkpoint_digest(plan)
        if args.checkpoint and args.checkpoint != checkpoint:
            raise UsageError(f"--checkpoint {args.checkpoint} but the spec's folder is {checkpoint}")
    with connect(args) as client:
        response = local_run.submit(client, plan, manifests, checkpoint, labels)
    _print_submitted(args, response)
    return 0


def _print_submitted(args: argparse.Namespace, response: pb.SubmitResponse) -> None:
    if args.json:
        print_json(message_dict(response))
    else:
        print(response.submission_id)
        print(
            f"{response.tasks_total} tasks ({response.tasks_created} new), {response.episodes_total} episodes",
            file=sys.stderr,
        )


def _resolve_checkpoint(
    address: str, stated: str, token_file: Path | None, tls_ca: bytes | None, execute_steps: int | None
) -> str:
    """The identity digest the inference server at ``address`` serves (it must match ``stated``,
    and its chunks must hold ``execute_steps`` actions)."""
    from evalfleet.policy_api.client import PolicyClient
    from evalfleet.policy_api.errors import PolicyError

    token = read_token(token_file) if token_file else None
    try:
        with PolicyClient(address, token, timeout_s=30, tls_ca=tls_ca) as policy:
            identity = policy.identity()
    except PolicyError as exc:
        raise UsageError(f"--policy-server {address}: {exc}") from None
    digest, chunk_length = identity.digest, identity.identity.chunk_length
    if execute_steps is not None and chunk_length and execute_steps > chunk_length:
        raise UsageError(
            f"--execute-steps {execute_steps} but the checkpoint at {address} answers chunks of {chunk_length}"
        )
    if stated and stated != digest:
        raise UsageError(f"--checkpoint {stated} but --policy-server {address} serves {digest}")
    return digest


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch:
        return _watch_status(args)
    with connect(args) as client:
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
        stacks = [message_dict(demand) for demand in response.stacks]
        print_json({**counts_dict(response.tasks), **episodes, "submissions": submissions, "stacks": stacks})
        return 0
    table = Table(title="submissions")
    for column in ("submission", "route", "prio", *TASK_STATE_NAMES, "episodes", "success"):
        table.add_column(column, justify="left" if column in ("submission", "route") else "right")
    for sub in response.submissions:
        table.add_row(
            sub.submission_id,
            sub.route,
            str(sub.priority),
            *(str(getattr(sub.tasks, name)) for name in TASK_STATE_NAMES),
            f"{sub.episodes_completed}/{sub.episodes_planned}",
            success_percent(sub.episodes_succeeded, sub.episodes_completed),
        )
    console().print(table)
    if response.stacks:
        needed = Table(title="simulator stacks pending tasks need")
        for column in ("stack", "pending", "connected workers on it"):
            needed.add_column(column, justify="right" if column == "pending" else "left")
        for demand in response.stacks:
            workers = ", ".join(demand.workers) or "no connected worker: these tasks wait"
            needed.add_row(demand.stack, str(demand.pending_tasks), workers)
        console().print(needed)
    for sub in response.submissions:
        if text := note(sub):
            print(text)
    if args.submission:
        for sub in response.submissions:
            if sub.spec_json:
                print(f"spec of {sub.submission_id}: {sub.spec_json}")
    return 0


def _watch_status(args: argparse.Namespace) -> int:
    from scheduler.watch import watch

    if args.json:
        raise UsageError("--watch and --json do not combine; poll `scheduler status --json` instead")
    if not 0.1 <= args.interval <= 3600:
        raise UsageError(f"--interval {args.interval} is outside [0.1, 3600] seconds")
    with connect(args) as client:
        return watch(client, args.submission, args.interval, sys.stdout, live=sys.stdout.isatty())


def _selector(args: argparse.Namespace) -> pb.TaskSelector:
    submission = getattr(args, "submission", "")
    return client_module.selector(submission, args.task_ids, args.route, args.state)


def cmd_tasks(args: argparse.Namespace) -> int:
    with connect(args) as client:
        response = client.tasks(_selector(args), args.limit)
    if args.json:
        print_json({"tasks": message_dict(response).get("tasks", []), "truncated": response.truncated})
        return 0
    table = Table(title="tasks" + (" (truncated)" if response.truncated else ""))
    for column in ("task", "state", "route", "prio", "episodes", "done", "attempt", "worker", "last error"):
        table.add_column(column)
    for task in response.tasks:
        table.add_row(
            task.task_id,
            task_state_name(task.state),
            task.route,
            str(task.priority),
            f"{task.episode_start}-{task.episode_end - 1}",
            str(task.episodes_done),
            f"{task.attempts}/{task.max_attempts}",
            task.worker_id,
            task.last_error[:60],
        )
    console().print(table)
    return 0


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "-"


def cmd_task(args: argparse.Namespace) -> int:
    with connect(args) as client:
        response = client.task(args.task_id)
    if args.json:
        print_json(message_dict(response))
        return 0
    task = response.task
    state = task_state_name(task.state)
    print(f"task       {task.task_id}  ({state}, submission {task.submission_id}, route {task.route})")
    print(f"episodes   {task.episode_start}-{task.episode_end - 1}, {task.episodes_done} stored")
    print(f"attempts   {task.attempts}/{task.max_attempts}, priority {task.priority}")
    attempts = Table(title="attempts")
    for column in ("attempt", "token", "worker", "started", "ended", "outcome", "reason", "error"):
        attempts.add_column(column)
    for attempt in response.attempts:
        reason = failure_reason_name(attempt.failure_reason)
        attempts.add_row(
            str(attempt.attempt),
            str(attempt.fencing_token),
            attempt.worker_id,
            _when(attempt.started_at),
            _when(attempt.ended_at),
            attempt.outcome,
            reason,
            attempt.error.removeprefix(f"[{reason}] ") if reason else attempt.error,
        )
    episodes = Table(title="episodes")
    for column in ("episode", "success", "steps", "wall s", "worker", "token", "artifacts"):
        episodes.add_column(column)
    for stored in response.episodes:
        episodes.add_row(
            str(stored.result.episode_index),
            "yes" if stored.result.success else "no",
            str(stored.result.steps),
            f"{stored.result.wall_seconds:.1f}",
            stored.worker_id,
            str(stored.fencing_token),
            "\n".join(_artifact_cell(artifact) for artifact in stored.artifacts),
        )
    out = console()
    out.print(attempts)
    out.print(episodes)
    return 0


def _artifact_cell(artifact: pb.Artifact) -> str:
    """``video <sha256> 1.2 MB``: the hash `scheduler artifact get` takes, and its size or "collected"."""
    where = "collected" if artifact.collected_at else f"{artifact.size_bytes / 1e6:.1f} MB"
    return f"{artifact.kind} {artifact.sha256} {where}"


def cmd_workers(args: argparse.Namespace) -> int:
    with connect(args) as client:
        workers = client.workers()
    if args.json:
        print_json({"workers": [message_dict(worker) for worker in workers]})
        return 0
    table = Table(title="workers")
    for column in ("worker", "state", "host", "gpu", "routes", "stacks", "current task"):
        table.add_column(column)
    for worker in workers:
        table.add_row(
            worker.worker_id,
            worker.state,
            worker.host,
            worker.gpu_uuid,
            ",".join(worker.routes),
            ",".join(worker.stacks),
            worker.current_task,
        )
    console().print(table)
    return 0


def _change(
    args: argparse.Namespace, verb: str, call: Callable[[client_module.SchedulerClient, pb.TaskSelector], int]
) -> int:
    with connect(args) as client:
        changed = call(client, _selector(args))
    if args.json:
        print_json({"changed": changed})
    else:
        print(f"{verb} {changed} task{'s' if changed != 1 else ''}")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    return _change(args, "cancelled", lambda client, sel: client.cancel(sel))


def cmd_requeue(args: argparse.Namespace) -> int:
    return _change(args, "requeued", lambda client, sel: client.requeue(sel))


def cmd_pause(args: argparse.Namespace) -> int:
    return _pause(args, paused=True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _pause(args, paused=False)


def _pause(args: argparse.Namespace, paused: bool) -> int:
    with connect(args) as client:
        changed = client.pause(args.submission, paused)
    if args.json:
        print_json({"submission_id": args.submission, "paused": paused, "changed": changed})
    else:
        state = "paused" if paused else "resumed"
        print(f"{args.submission}: {state}" if changed else f"{args.submission}: already {state}")
    return 0


def cmd_priority(args: argparse.Namespace) -> int:
    return _change(args, "reprioritized", lambda client, sel: client.set_priority(sel, args.priority))
