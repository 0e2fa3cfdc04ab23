"""benchmarks.idle_pool: which environment a take gets back, and which ones are closed when.

The LIBERO and Meta-World adapter tests check that a pooled environment plays as a fresh one; these
check the pool's own rules on plain objects.
"""

from __future__ import annotations

import threading

from benchmarks.idle_pool import IdlePool


class Env:
    made = 0

    def __init__(self) -> None:
        Env.made += 1
        self.serial = Env.made


def pool(capacity: int) -> tuple[IdlePool[str, Env], list[Env]]:
    closed: list[Env] = []
    return IdlePool(capacity, close=closed.append), closed


def test_a_given_back_env_is_taken_again_only_for_its_key() -> None:
    idle, closed = pool(2)
    first = idle.take("a", Env)
    idle.give("a", first)
    other = idle.take("b", Env)
    assert other is not first, "another key builds its own"
    assert idle.take("a", Env) is first
    assert idle.take("a", Env) is not first, "taken once, it is no longer idle"
    assert closed == []


def test_beyond_capacity_the_oldest_is_closed() -> None:
    idle, closed = pool(2)
    envs = [idle.take(key, Env) for key in "abc"]
    for key, env in zip("abc", envs, strict=True):
        idle.give(key, env)
    assert closed == [envs[0]]
    assert idle.take("a", Env) is not envs[0]
    assert idle.take("b", Env) is envs[1] and idle.take("c", Env) is envs[2]


def test_an_unhealthy_env_or_a_pool_of_none_closes_it_at_once() -> None:
    idle, closed = pool(2)
    broken = idle.take("a", Env)
    idle.give("a", broken, healthy=False)
    assert closed == [broken] and idle.take("a", Env) is not broken
    none, closed_none = pool(0)
    env = none.take("a", Env)
    none.give("a", env)
    assert closed_none == [env]


def test_close_closes_every_idle_env() -> None:
    idle, closed = pool(3)
    envs = [idle.take(key, Env) for key in "ab"]
    for key, env in zip("ab", envs, strict=True):
        idle.give(key, env)
    idle.close()
    assert closed == envs
    assert idle.take("a", Env) not in envs


def test_threads_never_hold_the_same_env_at_once() -> None:
    idle, closed = pool(4)
    held: set[int] = set()
    guard = threading.Lock()
    clashes: list[int] = []

    def borrow() -> None:
        for _ in range(300):
            env = idle.take("a", Env)
            with guard:
                if id(env) in held:
                    clashes.append(env.serial)
                held.add(id(env))
            with guard:
                held.discard(id(env))
            idle.give("a", env)

    threads = [threading.Thread(target=borrow) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert clashes == []
    assert not any(thread.is_alive() for thread in threads)
