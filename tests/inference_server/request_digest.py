"""What the closed-loop tests' hashing policies make of a request: a sha256 over every leaf of it
(each key path, each array's dtype, shape and bytes, each string and number with its type), one
digest per leaf to say where two requests differ, and actions drawn from the digest. So the
actions a policy answers depend on every byte it consumed, and one flipped bit anywhere moves the
rollout after it. Only numpy and the standard library: both policies' scripts import it, each under
its own server library."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt


def leaves(request: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, bytes]]:
    """(key path, the bytes that stand for the value) for every leaf, in key order."""
    for key in sorted(request, key=str):
        path = f"{prefix}{key}"
        value = request[key]
        if isinstance(value, Mapping):
            yield from leaves(value, path + ".")
        elif isinstance(value, np.ndarray):
            yield path, f"ndarray {value.dtype.str} {value.shape} ".encode() + np.ascontiguousarray(value).tobytes()
        elif isinstance(value, (str, bytes)):
            yield path, f"{type(value).__name__} ".encode() + (value.encode() if isinstance(value, str) else value)
        else:
            yield path, f"{type(value).__name__} {value!r}".encode()


def describe(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request's digest and one sha256 per leaf."""
    whole = hashlib.sha256()
    parts: dict[str, str] = {}
    for path, data in leaves(request):
        whole.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
        parts[path] = hashlib.sha256(data).hexdigest()
    return {"digest": whole.hexdigest(), "leaves": parts}


def actions_for(digest: str, chunk: int, action_dim: int) -> npt.NDArray[np.float64]:
    """[chunk, action_dim] actions in [-1, 1], a function of the digest alone: small arm moves and
    a gripper sign that flips, so rollouts go somewhere and diverge at the first differing bit."""
    rng = np.random.default_rng(int(digest[:16], 16))
    actions = rng.uniform(-1.0, 1.0, (chunk, action_dim))
    actions[:, : action_dim - 1] *= 0.5
    return actions


def replayed(recorded: Sequence[Sequence[float]], start: int, chunk: int) -> npt.NDArray[np.float64]:
    """Steps ``start`` to ``start + chunk - 1`` of one episode's recorded actions, float64; past the
    last one, still with the gripper as last commanded (as ``scripts/proofs/solved.py``'s
    ``Replay`` answers there)."""
    hold = [0.0] * (len(recorded[-1]) - 1) + [recorded[-1][-1]]
    return np.asarray([recorded[i] if i < len(recorded) else hold for i in range(start, start + chunk)], np.float64)


def record(path: Path, entry: Mapping[str, Any]) -> None:
    """Appends one JSON line (a policy's record of what it received) and flushes it."""
    with path.open("a") as out:
        out.write(json.dumps(entry, sort_keys=True) + "\n")


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
