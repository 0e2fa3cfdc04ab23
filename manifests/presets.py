"""A manifest's preset record in words, and the harness's simulator stack compared with the build's.

A benchmark's builder may record in ``protocol.preset`` which harness's protocol a manifest
reproduces (LIBERO: ``benchmarks.libero.protocols``): its ``name`` and ``label`` (the name plus
each override, ``openpi+trials=10``), the ``harness``, the preset's ``constants`` with their
``sources``, the values the options ``overridden``, ``notes``, and the ``stack`` the harness ran: an
``id`` and ``distributions`` (name -> the version it pinned, or the range, ``*`` or git URL it left
open). ``versions`` holds what the manifest was built under. This module reads both as plain JSON,
without the benchmark's code, so ``scheduler manifest show`` and anything that must decide whether
a stack runs a preset exactly (a worker's) read them the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_VERSION = re.compile(r"^\d+(\.\d+)*$")
_CLAUSE = re.compile(r"^(>=|<=|==|>|<)\s*(\d+(?:\.\d+)*)$")
_GIT_COMMIT = re.compile(r"^git\+\S+@[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class StackComparison:
    """How a set of installed versions stands against a harness's stack."""

    exact: bool  # every distribution the harness names is pinned by it, and installed at that version
    differences: list[str]  # one phrase per distribution that differs or that the harness left open


def compare_stack(stack: Mapping[str, Any], versions: Mapping[str, Any]) -> StackComparison:
    """Compares a preset's ``stack`` record with ``versions`` (a manifest's, or what is installed).

    A pinned version matches an installed one equal to it or extending it ("3.8" matches 3.8.10).
    Nothing matches a range or ``*`` exactly (the harness never fixed the version; the phrase says
    whether the installed one lies within it) nor a git checkout (not a released distribution).
    """
    distributions = stack.get("distributions")
    if not isinstance(distributions, dict):
        return StackComparison(exact=False, differences=["the stack record names no distributions"])
    differences = []
    for name, wanted in distributions.items():
        have = versions.get(name)
        here = f"{have} here" if isinstance(have, str) else "not in this stack"
        if not isinstance(wanted, str):
            differences.append(f"{name}: unreadable in the stack record ({json.dumps(wanted)})")
        elif _GIT_COMMIT.match(wanted):
            differences.append(f"{name}: the harness ran a git checkout ({wanted}), {here}")
        elif not _VERSION.match(wanted):
            inside = _within(have, wanted) if isinstance(have, str) else None
            verdict = {True: ", within it", False: ", outside it", None: ""}[inside]
            differences.append(f"{name}: the harness left it open ({wanted}), {here}{verdict}")
        elif not isinstance(have, str):
            differences.append(f"{name}: the harness ran {wanted}, {here}")
        elif have != wanted and not have.startswith(f"{wanted}."):
            differences.append(f"{name}: {have} here, the harness ran {wanted}")
    return StackComparison(exact=not differences, differences=differences)


def _within(have: str, spec: str) -> bool | None:
    """Whether version ``have`` satisfies ``spec`` (``*``, or clauses such as ``>=3.0.0,<3.9.0``);
    None when either is not plain dotted numbers."""
    if spec == "*":
        return True
    if not _VERSION.match(have):
        return None
    ok = True
    for clause in spec.split(","):
        match = _CLAUSE.match(clause.strip())
        if match is None:
            return None
        op, bound = match.groups()
        left, right = _numbers(have), _numbers(bound)
        ok &= {">=": left >= right, ">": left > right, "<=": left <= right, "<": left < right, "==": left == right}[op]
    return ok


def _numbers(version: str) -> tuple[int, ...]:
    parts = tuple(int(part) for part in version.split("."))
    return parts + (0,) * (4 - len(parts))


def describe(protocol: Mapping[str, Any], versions: Mapping[str, Any]) -> list[str]:
    """The lines ``manifest show`` prints for ``protocol.preset``: none when there is no record."""
    record = protocol.get("preset")
    if record is None:
        return []
    if not isinstance(record, dict):
        return [f"preset     (not an object: {json.dumps(record)})"]
    lines = [f"preset     {record.get('label', record.get('name'))}: {record.get('harness')}"]
    constants = record.get("constants")
    sources = _object(record.get("sources"))
    overridden = _object(record.get("overridden"))
    if isinstance(constants, dict):
        width = max((len(name) for name in constants), default=0)
        for name, value in constants.items():
            built = f" -> {overridden[name]} (overridden)" if name in overridden else ""
            source = f"  [{sources[name]}]" if name in sources else ""
            lines.append(f"  {name:<{width}}  {value}{built}{source}")
    notes = record.get("notes")
    for note in notes if isinstance(notes, list) else []:
        lines.append(f"  note: {note}")
    stack = record.get("stack")
    if isinstance(stack, dict):
        pins = ", ".join(f"{name} {value}" for name, value in _object(stack.get("distributions")).items())
        lines.append(f"stack      the harness ran {stack.get('id')}: {pins}")
        comparison = compare_stack(stack, versions)
        if comparison.exact:
            lines.append("           built under the harness's stack")
        else:
            lines.append("           built under another stack than the harness's:")
            lines.extend(f"             {difference}" for difference in comparison.differences)
    return lines


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
