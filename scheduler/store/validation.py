"""Checks on the values the store keeps, made before a write reaches the writer.

The store trusts its callers on field shapes: an id's alphabet, a priority's range, a JSON field
being a small object. The gRPC service and the operations layer check them here first, so a bad
value is refused with ``InvalidArgument`` naming the field, before anything touches the database.
"""

from __future__ import annotations

import json
import re

from evalfleet.scheduler_api.errors import InvalidArgument
from evalfleet.scheduler_api.limits import MAX_EXECUTE_STEPS, MAX_PRIORITY, MAX_TEXT_BYTES

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
WORKER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")


def check_id(value: str, field: str, pattern: re.Pattern[str] = ID_RE) -> str:
    """A submission, route or task id: returns it, or refuses it naming ``field``."""
    if not pattern.match(value or ""):
        raise InvalidArgument(f"{value!r} must match {pattern.pattern}", field=field)
    return value


def check_worker_id(value: str, field: str = "worker_id") -> str:
    """A worker id, which may also hold a host name, a GPU or a path (``:@/``)."""
    return check_id(value, field, WORKER_ID_RE)


def check_json_object(text: str, field: str) -> str:
    """Free-form JSON fields must be objects and small; empty means ``{}``."""
    if not text:
        return "{}"
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise InvalidArgument(f"larger than {MAX_TEXT_BYTES} bytes", field=field)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"not valid JSON ({exc.msg} at {exc.pos})", field=field) from None
    except (ValueError, RecursionError) as exc:
        # An integer past Python's digit limit, or nesting deeper than the decoder's stack.
        raise InvalidArgument(f"not valid JSON ({type(exc).__name__}: {exc})", field=field) from None
    if not isinstance(value, dict):
        raise InvalidArgument("must be a JSON object", field=field)
    return text


def check_priority(priority: int, field: str = "priority") -> int:
    """A task priority in ``[0, MAX_PRIORITY]``; higher is claimed first."""
    if not 0 <= priority <= MAX_PRIORITY:
        raise InvalidArgument(f"{priority} is outside [0, {MAX_PRIORITY}]", field=field)
    return priority


def check_execute_steps(value: int, field: str) -> int:
    """Actions executed per chunk in ``[0, MAX_EXECUTE_STEPS]`` (0: the whole chunk)."""
    if not 0 <= value <= MAX_EXECUTE_STEPS:
        raise InvalidArgument(f"{value} is outside [0, {MAX_EXECUTE_STEPS}] (0: the whole chunk)", field=field)
    return value


ARTIFACT_KIND_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
# A media type as RFC 6838 spells one, without parameters: "video/mp4".
MEDIA_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,62}/[a-z0-9][a-z0-9!#$&^_.+-]{0,62}$")


def check_artifact_kind(value: str, field: str) -> str:
    """What an artifact is (``video``): lowercase, short, safe in a file name."""
    return check_id(value, field, ARTIFACT_KIND_RE)


def check_media_type(value: str, field: str) -> str:
    """An artifact's media type (``video/mp4``), later sent to browsers as its Content-Type."""
    return check_id(value, field, MEDIA_TYPE_RE)
