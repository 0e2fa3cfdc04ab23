"""Expected episode durations, and the longest-first submission order built on them.

The scheduler claims tasks in submission order (within one priority), and a submission's tasks
follow its manifests' order. With long and short benchmark tasks mixed in that order, the last
tasks claimed may be long ones, and the evaluation ends on a tail of a few busy workers while
the rest sit idle. Submitting the manifests longest-first (the LPT rule) leaves the short tasks
for the end, where they fill the gaps.

A manifest's expected episode time comes from its entries (``duration_s``, as synthetic manifests
carry, or ``expected_seconds``), else from its protocol's ``expected_seconds`` (for example the
mean episode time of a previous run). Manifests without one keep their given order, ahead of the
ones with an estimate: an unknown task is not assumed to be short.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from manifests.format import Manifest

ENTRY_KEYS = ("expected_seconds", "duration_s")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def _entry_seconds(entry: Any) -> float | None:
    if not isinstance(entry, dict):
        return None
    for key in ENTRY_KEYS:
        if key in entry:
            return _number(entry[key])
    return None


def expected_seconds(manifest: Manifest) -> float | None:
    """The expected wall time of all the manifest's episodes, or None when it gives no estimate."""
    per_entry = [_entry_seconds(entry) for entry in manifest.episodes]
    known = [seconds for seconds in per_entry if seconds is not None]
    if per_entry and len(known) == len(per_entry):
        return float(sum(known))
    protocol = manifest.data.get("protocol") or {}
    mean = _number(protocol.get("expected_seconds")) if isinstance(protocol, dict) else None
    return None if mean is None else mean * len(manifest.episodes)


def mean_episode_seconds(manifest: Manifest) -> float | None:
    """The expected time of one episode of the manifest, or None."""
    total = expected_seconds(manifest)
    return None if total is None or not manifest.episodes else total / len(manifest.episodes)


def longest_first(manifests: Sequence[Manifest]) -> list[Manifest]:
    """The manifests by expected episode time, longest first; a stable sort, unknowns first.

    Ordering by the mean episode time (not the manifest's total) is what matters for the tail: the
    tasks claimed last are minibatches, whose length is batch size x episode time.
    """

    def key(pair: tuple[int, Manifest]) -> tuple[int, float, int]:
        index, manifest = pair
        mean = mean_episode_seconds(manifest)
        return (0, 0.0, index) if mean is None else (1, -mean, index)

    return [manifest for _, manifest in sorted(enumerate(manifests), key=key)]
