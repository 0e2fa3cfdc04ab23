"""A sequential submission's record: admitted at submit, advanced in the write that ends a task.

A sequential submission's ``sequential`` column holds a ``SequentialState`` as canonical JSON: its
settings (the seed of its dispatch order, its stopping rule, its partner when paired) and where it
stands. ``advance`` runs in the write that ends a task (Complete, Fail): it reads the longest
prefix of the dispatch order whose tasks have all succeeded (for a paired comparison, B's task and
A's of the same rank both), feeds what the prefix gained to the anytime-valid statistics
(``scheduler.sequential``) and stores the new state; once the rule is decided it returns the
submissions to stop, which the caller cancels in the same write. Results that arrive after the
prefix, or after the stop, never change the statistic: only the dispatch order does.

The statistics are a pure function of the prefix, so ``Progress`` keeps each one's running state
in memory, keyed by the prefix length the record holds: after a restart, or a write that was rolled
back, the record and the memory disagree and the state is rebuilt from the prefix.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

from google.protobuf import json_format

from evalfleet.scheduler_api.errors import Conflict, InvalidArgument, NotFound
from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import sequential as rules
from scheduler.differences import PairedCounts


def to_json(state: pb.SequentialState) -> str:
    return json.dumps(json_format.MessageToDict(state, preserving_proto_field_name=True), sort_keys=True)


def read(text: str) -> pb.SequentialState | None:
    """The stored state; None for a submission that is not sequential ('')."""
    return json_format.ParseDict(json.loads(text), pb.SequentialState()) if text else None


def admit(
    conn: sqlite3.Connection,
    submission_id: str,
    definition_json: str,
    settings: pb.SequentialSettings,
    tasks_total: int,
    episodes_total: int,
) -> pb.SequentialState:
    """The state a new sequential submission starts with. A paired one (B) must name a sequential
    submission (A) with the same manifests and batch size, without a stopping rule of its own (the
    comparison decides when both stop), not paired itself nor compared by another; B takes A's
    seed (a different one is refused) and A records that B compares it."""
    settled = pb.SequentialSettings()
    settled.CopyFrom(settings)
    if settings.paired_with:
        partner = conn.execute(
            "SELECT definition, sequential FROM submissions WHERE id = ?", (settings.paired_with,)
        ).fetchone()
        if partner is None:
            raise NotFound(f"no submission {settings.paired_with!r}", field="sequential.paired_with")
        theirs = read(partner["sequential"])
        if theirs is None:
            raise InvalidArgument(
                f"{settings.paired_with!r} is not sequential: submit it with a dispatch seed first",
                field="sequential.paired_with",
            )
        if theirs.settings.paired_with:
            raise InvalidArgument(
                f"{settings.paired_with!r} is itself paired with {theirs.settings.paired_with!r}",
                field="sequential.paired_with",
            )
        for rule in ("threshold", "precision"):
            if theirs.settings.HasField(rule):
                raise InvalidArgument(
                    f"{settings.paired_with!r} stops on its own {rule}; the partner of a comparison stops "
                    "with the comparison: submit it without a rule",
                    field="sequential.paired_with",
                )
        if theirs.compared_by and theirs.compared_by != submission_id:
            raise Conflict(
                f"{settings.paired_with!r} is already compared by {theirs.compared_by!r}",
                field="sequential.paired_with",
            )
        mine, other = json.loads(definition_json), json.loads(partner["definition"])
        for key in ("manifest_hashes", "batch_size"):
            if mine[key] != other[key]:
                raise InvalidArgument(
                    f"a paired submission runs the episodes of {settings.paired_with!r}: its {key} differ",
                    field=key,
                )
        if settings.seed and settings.seed != theirs.settings.seed:
            raise InvalidArgument(
                f"{settings.seed} is not the seed of {settings.paired_with!r} ({theirs.settings.seed}); "
                "give 0 to take it",
                field="sequential.seed",
            )
        settled.seed = theirs.settings.seed
        theirs.compared_by = submission_id
        conn.execute("UPDATE submissions SET sequential = ? WHERE id = ?", (to_json(theirs), settings.paired_with))
    return pb.SequentialState(
        settings=settled,
        tasks_total=tasks_total,
        episodes_total=episodes_total,
        words=f"undecided: no results yet (0 of {episodes_total} {'pairs' if settings.paired_with else 'episodes'})",
    )


@dataclass
class Running:
    """The statistics over the first ``prefix_tasks`` tasks of one sequential submission's order."""

    sequence: rules.TotalSequence
    prefix_tasks: int = 0
    episodes: int = 0
    successes: int = 0
    counts: PairedCounts = field(default_factory=PairedCounts)
    largest_e: float = 1.0


@dataclass
class Progress:
    """Each sequential submission's running statistics, by id (see the module's docstring)."""

    running: dict[str, Running] = field(default_factory=dict)


@dataclass(frozen=True)
class Stop:
    """A decided submission: the submissions to stop (with a comparison, both) and how."""

    submissions: tuple[str, ...]
    cancel_leased: bool


def advance(conn: sqlite3.Connection, task_id: str, now: float, progress: Progress) -> Stop | None:
    """Brings the statistic of the task's sequential submission (or of the comparison it is part
    of) up to the prefix and stores it; the submissions to stop once decided, else None."""
    row = conn.execute(
        "SELECT s.id, s.sequential, s.definition FROM tasks t JOIN submissions s ON s.id = t.submission_id"
        " WHERE t.id = ?",
        (task_id,),
    ).fetchone()
    if row is None or not row["sequential"]:
        return None
    submission, state = row["id"], read(row["sequential"])
    assert state is not None
    if state.compared_by:  # A's task: the comparison lives on B (same manifests and batch size)
        submission = state.compared_by
        found = read(conn.execute("SELECT sequential FROM submissions WHERE id = ?", (submission,)).fetchone()[0])
        assert found is not None
        state = found
    if state.stopped_at or state.verdict:
        return None
    running = progress.running.get(submission)
    if running is None or running.prefix_tasks != state.prefix_tasks:
        running = _start(state, int(json.loads(row["definition"])["batch_size"]))
    _extend(conn, submission, state, running)
    progress.running[submission] = running
    _describe(state, running)
    decided = bool(state.verdict) and state.verdict not in ("complete", "final")
    if decided:
        state.stopped_at = now
    conn.execute("UPDATE submissions SET sequential = ? WHERE id = ?", (to_json(state), submission))
    if not decided:
        return None
    partner = state.settings.paired_with
    return Stop((submission, partner) if partner else (submission,), state.settings.cancel_leased)


def record_stop(conn: sqlite3.Connection, submission_id: str, cancelled: int, now: float) -> None:
    """Adds to a stopped submission's record when it stopped and the tasks its stop cancelled; A
    of a comparison, stopped with B, says so."""
    state = read(conn.execute("SELECT sequential FROM submissions WHERE id = ?", (submission_id,)).fetchone()[0])
    assert state is not None
    state.cancelled_tasks = cancelled
    if not state.stopped_at:
        state.stopped_at = now
        state.words = f"stopped with the comparison {state.compared_by!r} decided"
    conn.execute("UPDATE submissions SET sequential = ? WHERE id = ?", (to_json(state), submission_id))


def _start(state: pb.SequentialState, batch_size: int) -> Running:
    """Statistics over no task yet: a task adds its successes (at most ``batch_size``), or in a
    comparison its episodes plus B's successes minus A's (at most twice that)."""
    scale = 2 if state.settings.paired_with else 1
    sequence = rules.TotalSequence(
        state.tasks_total, scale * batch_size, scale * state.episodes_total, rules.INTERVAL_ALPHA
    )
    return Running(sequence)


def _extend(conn: sqlite3.Connection, submission: str, state: pb.SequentialState, running: Running) -> None:
    """Feeds the tasks the prefix gained since ``running.prefix_tasks`` (in dispatch order)."""
    tasks = conn.execute(
        "SELECT id, idx, state, episode_start, episode_end FROM tasks WHERE submission_id = ?"
        " ORDER BY dispatch_rank, seq LIMIT -1 OFFSET ?",
        (submission, running.prefix_tasks),
    ).fetchall()
    partner = state.settings.paired_with
    state.blocked = ""
    for task in tasks:
        mine = _outcomes(conn, task)
        if mine is None:
            state.blocked = _blocked(task)
            break
        n = task["episode_end"] - task["episode_start"]
        if partner:
            theirs_row = conn.execute(
                "SELECT id, idx, state, episode_start, episode_end FROM tasks WHERE submission_id = ? AND idx = ?",
                (partner, task["idx"]),
            ).fetchone()
            theirs = _outcomes(conn, theirs_row) if theirs_row is not None else None
            if theirs is None:
                state.blocked = _blocked(theirs_row) if theirs_row is not None else ""
                break
            pair = _pair(theirs, mine)  # A is the partner, B this submission
            running.counts = running.counts + pair
            running.sequence.observe(n + pair.b_only - pair.a_only, 2 * n)
            running.largest_e = max(
                running.largest_e, rules.mcnemar_e_value(running.counts.a_only, running.counts.b_only)
            )
        else:
            running.sequence.observe(sum(mine), n)
            running.successes += sum(mine)
        running.episodes += n
        running.prefix_tasks += 1


def _outcomes(conn: sqlite3.Connection, task: sqlite3.Row) -> list[int] | None:
    """A succeeded task's episode outcomes in episode order; None while it has not succeeded."""
    if task["state"] != "succeeded":
        return None
    rows = conn.execute(
        "SELECT success FROM episode_results WHERE task_id = ? ORDER BY episode_index", (task["id"],)
    ).fetchall()
    return [int(r["success"]) for r in rows]


def _blocked(task: sqlite3.Row) -> str:
    if task["state"] in ("failed", "cancelled"):
        return (
            f"task {task['id']} {task['state']}: the statistic cannot pass it (requeue it, or the run "
            "decides on what came before)"
        )
    return ""


def _pair(a: list[int], b: list[int]) -> PairedCounts:
    both = sum(x and y for x, y in zip(a, b, strict=True))
    a_only = sum(x and not y for x, y in zip(a, b, strict=True))
    b_only = sum(y and not x for x, y in zip(a, b, strict=True))
    return PairedCounts(both, a_only, b_only, len(a) - both - a_only - b_only)


def _describe(state: pb.SequentialState, running: Running) -> None:
    """Writes the running statistic, and the rule's verdict on it, into the state."""
    bounds = running.sequence.bounds()
    state.prefix_tasks, state.prefix_episodes = running.prefix_tasks, running.episodes
    settings = state.settings
    if settings.paired_with:
        rule = rules.PairedRule(margin=settings.margin if settings.HasField("margin") else None)
        paired = rules.paired_status(bounds, running.counts, running.largest_e, state.episodes_total, rule)
        state.low, state.high, state.a_only, state.b_only = paired.low, paired.high, paired.a_only, paired.b_only
        state.e_value, state.p_value = paired.e_value, paired.p_value
        state.verdict, state.words = paired.verdict, paired.words
    else:
        single = rules.rate_status(
            bounds,
            running.episodes,
            running.successes,
            state.episodes_total,
            rules.RateRule(
                threshold=settings.threshold if settings.HasField("threshold") else None,
                precision=settings.precision if settings.HasField("precision") else None,
            ),
        )
        state.successes, state.low, state.high = single.successes, single.low, single.high
        state.verdict, state.words = single.verdict, single.words
    if state.blocked and not state.verdict:
        state.words += f"; blocked: {state.blocked}"
