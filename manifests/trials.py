"""Which trials a manifest fixes, apart from the simulator stack it was built under.

A manifest's hash covers everything in it, ``versions`` (the simulator stack) included, so the same
trials scanned under two stacks are two manifests. To pair their episodes, `scheduler compare`
needs to know that episode i of one is the same trial as episode i of the other. The trial
identity says so: the sha256 of the canonical JSON of everything that decides a trial (benchmark,
task, setting, ``protocol``, ``source`` and each entry, in order) without ``versions`` and without
the entry fields the simulator computes during the scan. Those fields (LIBERO's fixture poses and
solver warm start, any initial-observation digest) are results of the stack, not choices of the
trial: the same seed and init state give other values under another MuJoCo, and the entry records
them so that a worker of that stack replays the evaluators' run. Which fields a benchmark's scan
computes is a table in code (``benchmarks.REGISTRY``), never read from the manifest, so no
manifest can declare its way into pairing with another: everything else must be equal.

The stack identity is derived here too, from ``versions`` alone (one small function), so that a
comparison can say which distributions differ without depending on any other record of the stack.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from typing import Any

from manifests.format import Manifest, canonical_bytes

TRIALS_FORMAT = "evalfleet.trials/v1"


def trial_record(manifest: Manifest, stack_computed: Collection[str]) -> dict[str, Any]:
    """What the trial identity is the hash of: the manifest without ``versions`` and without the
    entry fields named in ``stack_computed``."""
    data = manifest.data
    return {
        "format": TRIALS_FORMAT,
        "benchmark": data["benchmark"],
        "task": data["task"],
        "setting": data["setting"],
        "protocol": data["protocol"],
        "source": data["source"],
        "episodes": [{k: v for k, v in entry.items() if k not in stack_computed} for entry in data["episodes"]],
    }


def trial_identity(manifest: Manifest, stack_computed: Collection[str]) -> str:
    """The sha256 of ``trial_record``: equal for two manifests exactly when they fix the same
    trials in the same order, whatever stack each was built under."""
    return hashlib.sha256(canonical_bytes(trial_record(manifest, stack_computed))).hexdigest()


def stack_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """One phrase per distribution whose recorded version differs, by name: "mujoco 2.3.7 vs
    3.1.6", "gl_renderer (none) vs llvmpipe"."""
    return [
        f"{name} {_version(a.get(name))} vs {_version(b.get(name))}"
        for name in sorted(set(a) | set(b))
        if a.get(name) != b.get(name)
    ]


def _version(value: Any) -> str:
    return "(none)" if value is None else value if isinstance(value, str) else str(canonical_bytes(value), "utf-8")


def computed_differences(a: Manifest, b: Manifest, stack_computed: Collection[str]) -> dict[str, int]:
    """For two manifests of the same trials: per stack-computed field, how many entries disagree
    on it (fields neither records are left out)."""
    counts: dict[str, int] = {}
    pairs = list(zip(a.episodes, b.episodes, strict=True))
    for name in sorted(stack_computed):
        if any(name in ea or name in eb for ea, eb in pairs):
            counts[name] = sum(ea.get(name) != eb.get(name) for ea, eb in pairs)
    return counts
