"""Percentiles of measured samples, in one function, for every benchmark.

Two definitions are in use, and ``percentile`` names which one with ``method``:

- ``"nearest-rank"`` (the default): the smallest sample with at least q% of the samples at or
  below it. It is always a value that was observed (a latency some call really had), never one
  interpolated between two calls, and it needs no assumption about the distribution between
  samples. The scheduler and load benchmarks judge their targets on it (claim p99), and their
  figures in BENCHMARKS.md were computed with it.
- ``"linear"``: linear interpolation between the two closest ranks, numpy's default
  (``np.percentile``), computed here bit for bit as numpy does. The inference, remote-hop and
  LIBERO per-step benchmarks' figures in BENCHMARKS.md were computed with it; it is kept for them so
  that their commands reproduce those figures. On thousands of samples the two differ by a
  fraction of the gap between neighbouring samples.

Standard library only: the Labtasker baseline computes its percentiles in a virtual environment
without numpy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

Method = Literal["nearest-rank", "linear"]


def percentile(values: Iterable[float], q: float, method: Method = "nearest-rank") -> float:
    """The ``q``-th percentile (0 <= q <= 100) of ``values``; NaN when there are none."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    if method == "nearest-rank":
        return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]
    # numpy's "linear": the virtual index (n - 1) * q, then its lerp, which for a weight of 0.5 or
    # more interpolates from the upper neighbour (fewer rounding steps there).
    position = (len(ordered) - 1) * (q / 100)
    below = math.floor(position)
    weight = position - below
    low, high = ordered[below], ordered[min(below + 1, len(ordered) - 1)]
    if weight >= 0.5:
        return high - (high - low) * (1 - weight)
    return low + (high - low) * weight
