"""A fault of a chaos run: what is killed, and when.

Faults fire on progress, not on the clock: each is drawn (seeded) as a fraction of the run's
progress (episodes stored, or policy steps logged), so a slow machine sees the same fault schedule
as a fast one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    """Kill ``target`` once ``at`` of the run's progress is made."""

    at: float
    target: str
