"""The benchmark adapter contract.

An adapter only defines how to prepare evaluation instances (the scan that produces manifest
entries) and how to run one episode from its manifest entry; claiming, leases, policy sessions,
retries and reporting are shared by every benchmark (the renderer worker).

The worker drives an episode like this::

    episode = adapter.open_episode(manifest, index)   # rebuilds the episode exactly from its entry
    obs = episode.reset()                              # initial observation (after settle steps)
    while not episode.done:
        chunk = policy(obs)                            # (T, action_dim) float array
        for action in chunk[:k]:
            obs = episode.step(action)
            if episode.done:
                break
    episode.result()                                   # success, steps, trace digest
    episode.close()

Everything the benchmark owns (its RNG, its simulator state) lives inside the Episode, so the
policy side's RNG use can never change what the benchmark does.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from manifests.format import Manifest, ManifestError, content_hash

# What crosses the adapter contract: camera images H x W x C, state entries, one action row.
Image = npt.NDArray[np.uint8]
StateVector = npt.NDArray[np.number[Any]]
Action = npt.NDArray[np.floating[Any]]


class BenchmarkError(Exception):
    """A benchmark cannot be prepared or an episode cannot be rebuilt (bad manifest, drift, setup).

    `field` names the offending input when there is one (a manifest path such as
    ``source.bddl_sha256`` or a build option such as ``--tasks``), so callers can point at it.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


@dataclass
class Observation:
    """What the policy sees: named camera images (H x W x C uint8) and a named public state (numeric
    arrays)."""

    images: dict[str, Image]
    state: dict[str, StateVector]


@dataclass(frozen=True)
class ArtifactFile:
    """A file an episode produced (a video, ...) for the worker to upload to the scheduler.

    ``kind`` says what it is (``video``: lowercase letters, digits, ``_`` and ``-``),
    ``media_type`` how to read it (``video/mp4``). The path is on the worker's machine; the
    scheduler stores the bytes by their sha256 and lists them on the episode.
    """

    path: str
    kind: str
    media_type: str


@dataclass(frozen=True)
class EpisodeVerdict:
    """What the benchmark says of an episode: success, steps taken and the digest of its trace.

    Named apart from the wire's `evalfleet.v1.EpisodeResult`, which the worker builds from this
    plus the wall time and the episode log.
    """

    success: bool
    steps: int
    trace_digest: str
    info: Mapping[str, Any] = field(default_factory=dict)
    # Files the adapter wrote for this episode, uploaded by the worker after it ends.
    artifacts: tuple[ArtifactFile, ...] = ()


class Episode(abc.ABC):
    """One episode rebuilt from one manifest entry."""

    instruction: str
    action_dim: int
    max_steps: int

    @abc.abstractmethod
    def reset(self) -> Observation:
        """Puts the simulator in the entry's initial state and returns the first observation."""

    @abc.abstractmethod
    def step(self, action: Action) -> Observation:
        """Executes one action; only valid while not ``done``."""

    @property
    @abc.abstractmethod
    def done(self) -> bool:
        """Success reached (latched) or the step limit hit."""

    @abc.abstractmethod
    def result(self) -> EpisodeVerdict:
        """Success, steps taken and the digest of the benchmark-owned trace so far."""

    def close(self) -> None:  # noqa: B027 (an optional hook: an episode without a simulator has nothing to release)
        """Releases the simulator."""


class Benchmark(abc.ABC):
    """A benchmark adapter: rebuilds episodes from manifest entries of its own benchmark name."""

    name: str

    @abc.abstractmethod
    def open_episode(self, manifest: Manifest, index: int) -> Episode:
        """Rebuilds episode ``index`` of ``manifest`` exactly; raises BenchmarkError on mismatch."""

    def close(self) -> None:  # noqa: B027 (an optional hook: an adapter that pools nothing has nothing to release)
        """Releases whatever the adapter keeps between episodes (e.g. pooled simulators)."""


class TraceDigest:
    """A running sha256 over what the benchmark produced: states and observations, step by step.

    Every array is framed with its name, dtype (with byte order) and shape, so two different traces
    cannot hash alike by their bytes running together; equal digests mean equal trajectories.
    """

    def __init__(self) -> None:
        self._sha = hashlib.sha256()

    def add(self, name: str, value: Any) -> None:
        array = np.ascontiguousarray(value)
        header = f"{name}|{array.dtype.str}|{array.shape}".encode()
        self._sha.update(len(header).to_bytes(4, "big") + header)
        self._sha.update(array.tobytes())

    def add_observation(self, observation: Observation) -> None:
        for name in sorted(observation.images):
            self.add(f"image/{name}", observation.images[name])
        for name in sorted(observation.state):
            self.add(f"state/{name}", observation.state[name])

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def observation_digest(observation: Observation) -> str:
    """The digest of one observation (images and public state), e.g. the initial one in a manifest."""
    trace = TraceDigest()
    trace.add_observation(observation)
    return trace.hexdigest()


def episode_entry(manifest: Manifest, benchmark: str, index: int) -> dict[str, Any]:
    """Returns entry ``index`` after checking the manifest is intact and meant for this benchmark.

    A Manifest is a plain dataclass that anyone can construct, so its bytes are hashed again here:
    an adapter must never run episodes of a manifest that is not the one its hash names.
    """
    digest = content_hash(manifest.body)
    if digest != manifest.hash:
        raise ManifestError("hash", f"content hashes to {digest}, expected {manifest.hash}")
    if manifest.benchmark != benchmark:
        raise BenchmarkError(f"is {manifest.benchmark!r}, this adapter runs {benchmark!r}", field="benchmark")
    if not 0 <= index < len(manifest):
        raise BenchmarkError(f"{index} is outside the manifest's {len(manifest)} episodes", field="index")
    return manifest.episodes[index]
