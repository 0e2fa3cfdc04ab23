"""Keeps RoboTwin's NumPy draws to each episode.

RoboTwin draws from NumPy's process-global generator: ``setup_demo`` reseeds it and scene code
keeps drawing from it while an episode runs (randomized lights on every render). With several
episodes in flight, or anything else in the process drawing numbers, those streams would
interleave and an episode would no longer follow from its manifest entry. Each episode therefore
owns a stream that is swapped into the global generator only while RoboTwin code runs; the
caller's generator state is restored afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


class NumpyStream:
    """One episode's NumPy global-RNG state, carried between the calls that run RoboTwin code."""

    def __init__(self) -> None:
        self._state: Any = np.random.RandomState(0).get_state()

    @contextmanager
    def active(self) -> Iterator[None]:
        """Runs the block with this stream as NumPy's global RNG, then puts the caller's back."""
        outer = np.random.get_state()
        np.random.set_state(self._state)
        try:
            yield
        finally:
            self._state = np.random.get_state()
            np.random.set_state(outer)
