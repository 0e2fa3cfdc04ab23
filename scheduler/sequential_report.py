"""How a sequential submission's numbers are reported, beside (or instead of) the fixed-N ones.

A sequential submission's tasks run in a seeded random order, and its statistic reads only the
longest prefix of that order whose results are all in (``scheduler.store.sequential``). Whatever
reports it must respect two facts:

- Until every planned episode has a result, the completed episodes are not a fixed-size sample.
  Past the prefix, the episodes that finished are the quick ones, and quick episodes are more often
  successes; and once a rule has stopped the submission, the data chose the sample size. A Wilson
  interval, a Newcombe interval or an exact McNemar test over such episodes is not valid, so
  reports leave them out and say why (``fixed_n_valid``). The interval to read is the
  anytime-valid one over the prefix, which the state carries.
- A paired comparison lives on B, the submission that named its partner A
  (``SequentialSettings.paired_with``). A's own record only says that B compares it and, once
  the comparison is decided, that it stopped with it.

Once every planned episode has a result, the fixed-N numbers are valid again. A comparison that
reached the end is decided by the exact McNemar test at ``scheduler.sequential.FINAL_ALPHA``
(0.04), not at the usual 0.05, because 0.01 was spent on the early boundary.
"""

from __future__ import annotations

import datetime
from typing import Any

from evalfleet.v1 import scheduler_pb2 as pb
from scheduler import sequential as rules
from scheduler.wire_json import message_dict

FIXED_N_NOT_VALID = "not valid for a sequential submission until every planned episode has a result"


def fixed_n_valid(summary: pb.GetSummaryResponse) -> bool:
    """Whether fixed-N intervals and tests over the submission's completed episodes are valid:
    always for a submission that is not sequential (its incompleteness is reported on its own);
    for a sequential one only once every planned episode has a result."""
    return not summary.HasField("sequential") or summary.complete


def state_line(state: pb.SequentialState) -> str:
    """Where a sequential submission stands, in one line: its statistic and verdict, its stop."""
    if state.compared_by and not state.stopped_at:
        return f"sequential: compared with {state.compared_by!r}, which holds the comparison"
    if state.stopped_at:
        cancelled = f"{state.cancelled_tasks} task{'s' if state.cancelled_tasks != 1 else ''} cancelled"
        # A partner's words already say that it stopped with the comparison.
        return f"sequential: {'' if state.compared_by else 'stopped: '}{state.words} ({cancelled})"
    return f"sequential: {state.words}"


def marks(summary: pb.GetSummaryResponse) -> list[str]:
    """What a reader of a sequential submission's summary must know; empty for any other."""
    if not summary.HasField("sequential"):
        return []
    state = summary.sequential
    lines = [state_line(state)]
    if fixed_n_valid(summary):
        if state.settings.paired_with:
            lines.append(
                f"its comparison with {state.settings.paired_with!r} was decided at the end by the exact McNemar "
                f"test at {rules.FINAL_ALPHA} (0.01 was spent on the early boundary), not at 0.05"
            )
        return lines
    past = summary.episodes_completed - state.prefix_episodes if not state.settings.paired_with else None
    counted = f" ({past} of them past the prefix)" if past else ""
    lines.append(
        f"95% intervals are {FIXED_N_NOT_VALID}: not shown. The rates count all {summary.episodes_completed} "
        f"completed episodes{counted}; episodes past the prefix of the dispatch order finished first because "
        "they were quick, and quick episodes are more often successes"
    )
    return lines


def document(state: pb.SequentialState) -> dict[str, Any]:
    """The state as RESULTS.json and the JSON outputs carry it, with its stop time in UTC."""
    entry = message_dict(state)
    entry["line"] = state_line(state)
    if state.stopped_at:
        stopped = datetime.datetime.fromtimestamp(state.stopped_at, datetime.timezone.utc)
        entry["stopped_at_utc"] = stopped.isoformat(timespec="seconds")
    entry["interval"] = (
        f"low and high bound the anytime-valid {1 - rules.INTERVAL_ALPHA:.0%} confidence sequence of "
        + ("B's rate minus A's over all episode pairs" if state.settings.paired_with else "the manifests' success rate")
        + " (every planned episode, not only those run), read over the prefix of the dispatch order"
    )
    return entry


def comparison(a: pb.GetSummaryResponse, b: pb.GetSummaryResponse) -> pb.SequentialState | None:
    """The sequential comparison of ``b`` with ``a`` (B named A with ``paired_with``), else None."""
    if b.HasField("sequential") and b.sequential.settings.paired_with == a.submission_id:
        return b.sequential
    return None
