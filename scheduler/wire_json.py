"""Wire messages as plain JSON values, one spelling for the CLI's ``--json`` and the dashboard's API.

``MessageToDict`` writes 64-bit integers as strings and enums as their long names; people and
scripts read ``"fencing_token": 3``, ``"state": "failed"`` and ``"failure_reason": "timeout"``, so
these are normalized here.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from evalfleet.scheduler_api.vocabulary import TASK_STATE_NAMES, failure_reason_name, task_state_name
from evalfleet.v1 import scheduler_pb2 as pb


def message_dict(message: Message) -> dict[str, Any]:
    """A protobuf message as plain JSON values: ints stay ints, states and reasons are short names."""
    data: dict[str, Any] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return {key: _plain_field(key, item) for key, item in data.items()}


# Fields of type FailureReason: Attempt.failure_reason, TaskInfo.last_failure_reason, FailureCount.reason.
_FAILURE_REASON_FIELDS = frozenset({"failure_reason", "last_failure_reason", "reason"})


def counts_dict(counts: pb.StateCounts) -> dict[str, int]:
    return {name: getattr(counts, name) for name in (*TASK_STATE_NAMES, "total")}


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain_field(key, item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


# 64-bit integer fields, which MessageToDict writes as strings.
_INT64_FIELDS = frozenset({"fencing_token", "size_bytes", "bytes_freed", "seed"})


def _plain_field(key: str, value: Any) -> Any:
    if key in _INT64_FIELDS:
        return int(value)
    if key == "state" and isinstance(value, str) and value in pb.TaskState.keys():
        return task_state_name(pb.TaskState.Value(value))
    if key in _FAILURE_REASON_FIELDS and isinstance(value, str) and value in pb.FailureReason.keys():
        return failure_reason_name(pb.FailureReason.Value(value))
    return _plain(value)
