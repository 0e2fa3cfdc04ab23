"""The backend contract: a checkpoint folder in, a batched `act(observations, histories)` out.

A backend is built by a factory `factory(checkpoint, options) -> Backend`. Built-in factories are
named in a checkpoint's manifest (`"backend": "noop"`); any other runtime plugs in as
`module:factory`, from the manifest or from `--backend`. The server validates every observation
against the backend's declared cameras and state before it reaches `act`, and a backend never sees
the network: only decoded arrays, the session's causal history and its episode metadata.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from evalfleet.v1 import policy_pb2
from inference_server.checkpoint import Checkpoint


@dataclass(frozen=True)
class RuntimeOptions:
    """How to run the model; the backend reports which of these are actually in effect."""

    device: str = "cpu"
    dtype: str = "float32"
    attn_impl: str = "sdpa"
    compile: bool = False
    tf32: bool = False
    autocast: bool = False


@dataclass(frozen=True)
class Observation:
    """One decoded step of one session: images [H, W, C] (of the dtype each camera declares) and
    float64 state vectors by name."""

    step: int
    images: dict[str, npt.NDArray[np.generic]]
    state: dict[str, npt.NDArray[np.float64]]


@dataclass(frozen=True)
class HistoryEntry:
    """A past step: the public state that was sent and the commands of its chunk actually executed."""

    step: int
    state: dict[str, npt.NDArray[np.float64]]
    executed: npt.NDArray[np.float32]  # [n_executed, action_dim], a prefix of the chunk answered at `step`


@dataclass(frozen=True)
class History:
    """Everything a session has confirmed so far, oldest first, plus what the episode is."""

    session_id: str
    episode: policy_pb2.EpisodeMeta
    entries: tuple[HistoryEntry, ...] = field(default=())


class Backend(Protocol):
    """A policy. Built without touching the device (so `--dry-run` can describe it), then `load`ed;
    `act` runs on a worker thread, one batch at a time."""

    cameras: Sequence[policy_pb2.CameraSpec]
    state: Sequence[policy_pb2.StateSpec]
    action_dim: int
    chunk_length: int
    precision: policy_pb2.Precision

    def load(self) -> None:
        """Puts the weights on the device and runs the model once, so the first real step pays no
        compilation or allocation."""

    def act(self, observations: Sequence[Observation], histories: Sequence[History]) -> npt.NDArray[np.float32]:
        """Returns float32 chunks [batch, chunk_length, action_dim], one per observation."""


@runtime_checkable
class EndsSessions(Protocol):
    """Optional for a backend: one that holds something per session (the `remote` backend's
    vla-eval connection, bound to the session's episode) also has `end_session`. The server calls
    it once a session is closed (before it answers the close) or evicted, on a thread of its own,
    never on the event loop; what it raises is logged and ignored, so a backend without it, or
    with a failing one, serves alike."""

    def end_session(self, session_id: str) -> None:
        """Releases what the backend holds for the session; a session it never saw is a no-op."""


BackendFactory = Callable[[Checkpoint, RuntimeOptions], Backend]

BUILTIN = {
    "noop": "inference_server.backends.reference:noop",
    "deterministic": "inference_server.backends.reference:deterministic",
    "history-echo": "inference_server.backends.reference:history_echo",
    "flat-cost": "inference_server.backends.reference:flat_cost",
    "seeded-random": "inference_server.backends.reference:seeded_random",
    "vla": "inference_server.backends.vla:load",
    "libero-oracle": "inference_server.backends.oracle:oracle",
    # Runs from .venv-lerobot (make lerobot-venv): LeRobot pins its own torch and numpy.
    "lerobot": "inference_server.backends.lerobot:load",
    "remote": "inference_server.backends.remote:remote",
}


class BackendError(Exception):
    """The backend named by the manifest or `--backend` cannot be resolved or built."""


def resolve(name: str) -> BackendFactory:
    """Turns a built-in name or a `module:factory` reference into a factory."""
    target = BUILTIN.get(name, name)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise BackendError(f"backend {name!r} is neither built-in ({', '.join(sorted(BUILTIN))}) nor module:factory")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, TypeError) as exc:  # TypeError: a relative name (".x") without a package
        raise BackendError(f"backend {name!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise BackendError(f"backend {name!r}: {module_name} has no callable {attr}")
    return cast(BackendFactory, factory)  # a plugin's factory is taken at its word
