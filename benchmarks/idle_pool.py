"""Finished simulator environments kept for the next episode that needs the same one.

Building an environment (compiling a MuJoCo scene, opening a GL context) costs more than most
episodes' first steps, and a worker runs many episodes of few tasks, so adapters keep a few
finished environments by what they were built for and hand one back out instead of building
anew. Episodes may run in several threads of one worker, so the pool is guarded by a lock; building
and closing (both slow) happen outside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Env = TypeVar("Env")


class IdlePool(Generic[Key, Env]):
    """Up to ``capacity`` idle environments, each under the key it was built for; the oldest is
    closed first when one more is given back."""

    def __init__(self, capacity: int, close: Callable[[Env], None]) -> None:
        self._capacity = capacity
        self._close = close
        self._idle: list[tuple[Key, Env]] = []  # oldest first
        self._lock = threading.Lock()

    def take(self, key: Key, build: Callable[[], Env]) -> Env:
        """An idle environment built for ``key``, or a new one from ``build``."""
        with self._lock:
            for i, (idle_key, env) in enumerate(self._idle):
                if idle_key == key:
                    del self._idle[i]
                    return env
        return build()

    def give(self, key: Key, env: Env, *, healthy: bool = True) -> None:
        """Keeps ``env`` for the next ``take(key)``; closes it instead where it is not ``healthy``
        (an episode left it in a state a reset may not undo), and closes the oldest beyond capacity."""
        evicted = [] if healthy and self._capacity > 0 else [env]
        with self._lock:
            if not evicted:
                self._idle.append((key, env))
            excess = max(0, len(self._idle) - self._capacity)
            evicted += [stale for _, stale in self._idle[:excess]]
            del self._idle[:excess]
        for stale in evicted:
            self._close(stale)

    def close(self) -> None:
        """Closes every idle environment."""
        with self._lock:
            idle, self._idle = self._idle, []
        for _, env in idle:
            self._close(env)
