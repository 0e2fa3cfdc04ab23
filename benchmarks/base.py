"""The benchmark adapter contract.

An adapter only defines how to prepare evaluation instances (the scan that produces manifest
entries) and how to run one episode from its manifest entry; claiming, leases, policy sessions,
retries and reporting are shared by every benchmark (the renderer worker).

The worker drives an episode like this::

    episode = adapter.open_episode(manifest, index, cameras=("agentview",))  # the policy's cameras
    obs = episode.reset()                              # initial observation (after settle steps)
    while not episode.done:
        chunk = policy(obs)                            # (T, action_dim) float array
        ran = episode.execute(chunk[:k])               # stops early once done
        obs = ran.observation                          # None once done: no policy sees it
    episode.result()                                   # success, steps, trace digest
    episode.close()

``execute`` hands back only the observation after the last action, the only one a policy sees, so
an adapter may leave the steps in between unrendered and render only the cameras given at
``open_episode``; what it returns must be bit-identical to what ``step`` by ``step`` would have
returned (``step`` observes after every action).

Everything the benchmark owns (its RNG, its simulator state) lives inside the Episode, so the
policy side's RNG use can never change what the benchmark does.
"""

from __future__ import annotations

import abc
import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from manifests.format import Manifest, verify

# What crosses the adapter contract: camera images H x W x C, state entries, one action row.
Image = npt.NDArray[np.uint8]
StateVector = npt.NDArray[np.number[Any]]
Action = npt.NDArray[np.floating[Any]]
# Actions to execute in order: rows of a (T, action_dim) array, or a sequence of rows.
Actions = Sequence[Action] | npt.NDArray[np.floating[Any]]


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
class SimObservation:
    """What an episode shows after a reset or a step, on the simulator's side: named camera images
    (H x W x C uint8) and a named public state (numeric arrays). The worker sends it as the wire's
    ``evalfleet.v1.Observation``; the inference server hands the backend a ``PolicyObservation``."""

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

    The benchmark's word only: the wire's `evalfleet.v1.EpisodeResult` is built from it, once, in
    the worker's episode process, which adds how the episode ran (its index, wall time, actions run
    per chunk, log).
    """

    success: bool
    steps: int
    trace_digest: str
    info: Mapping[str, Any] = field(default_factory=dict)
    # Files the adapter wrote for this episode, uploaded by the worker after it ends.
    artifacts: tuple[ArtifactFile, ...] = ()


@dataclass(frozen=True)
class Numbering:
    """Where an episode sits in its benchmark's own numbering, as the benchmark's harnesses number
    it: LIBERO's suite, the task's id in it and the trial (vla-eval's client sends them to its model
    server as ``suite``, ``task_id`` and ``episode_idx``). The worker passes them to the policy in
    the session's ``EpisodeMeta``; empty, or None, where a benchmark has no such number."""

    suite: str = ""
    task_index: int | None = None
    episode_index: int | None = None


@dataclass(frozen=True)
class Executed:
    """What :meth:`Episode.execute` did: how many actions ran, and the observation after the last
    one, or None when the episode is done (no policy sees it)."""

    executed: int
    observation: SimObservation | None


class Episode(abc.ABC):
    """One episode rebuilt from one manifest entry."""

    instruction: str
    action_dim: int
    max_steps: int
    # Its place in the benchmark's own numbering, for the policy (none unless the adapter says).
    numbering: Numbering = Numbering()

    @abc.abstractmethod
    def reset(self) -> SimObservation:
        """Puts the simulator in the entry's initial state and returns the first observation."""

    @abc.abstractmethod
    def step(self, action: Action) -> SimObservation:
        """Executes one action and observes; only valid while not ``done``."""

    def execute(self, actions: Actions) -> Executed:
        """Executes ``actions`` in order until the episode is done, observing only after the last.

        The default steps one by one; an adapter whose observations cost (rendering) overrides it
        to skip the observations in between, with the same simulator state after every action and
        the same final observation as ``step`` by ``step``. Like ``step``, only valid while not
        ``done``; ``actions`` must not be empty.
        """
        if len(actions) == 0:
            raise ValueError("execute() needs at least one action")
        observation: SimObservation | None = None
        executed = 0
        for action in actions:
            observation = self.step(action)
            executed += 1
            if self.done:
                return Executed(executed, None)
        return Executed(executed, observation)

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
    def open_episode(self, manifest: Manifest, index: int, cameras: Collection[str] | None = None) -> Episode:
        """Rebuilds episode ``index`` of ``manifest`` exactly; raises BenchmarkError on mismatch.

        ``cameras`` names the images the policy consumes (None: every camera the benchmark has). An
        adapter may render only those, or observe more; a name it does not know is left out of its
        observations (the worker then reports what the policy is missing).
        """

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

    def add_observation(self, observation: SimObservation) -> None:
        for name in sorted(observation.images):
            self.add(f"image/{name}", observation.images[name])
        for name in sorted(observation.state):
            self.add(f"state/{name}", observation.state[name])

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def observation_digest(observation: SimObservation) -> str:
    """The digest of one observation (images and public state), e.g. the initial one in a manifest."""
    trace = TraceDigest()
    trace.add_observation(observation)
    return trace.hexdigest()


_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


def check_versions(manifest: Manifest, installed: Mapping[str, str]) -> None:
    """Refuses a manifest built under other versions of the pinned distributions than ``installed``
    (a simulator's version moves scores); BenchmarkError on ``versions.<name>`` of the first that differs."""
    recorded = manifest.data["versions"]
    for name, version in installed.items():
        if recorded.get(name) != version:
            raise BenchmarkError(
                f"manifest was built with {recorded.get(name)!r}, this worker has {version!r}", field=f"versions.{name}"
            )


def recorded_observation_digest(entry: Mapping[str, Any], where: str) -> str | None:
    """The entry's ``initial_observation_digest`` (None where the scan recorded none);
    BenchmarkError on ``<where>.initial_observation_digest`` when it is not a sha256 hex digest."""
    digest = entry.get("initial_observation_digest")
    if digest is not None and not (isinstance(digest, str) and _DIGEST_RE.match(digest)):
        raise BenchmarkError("must be a sha256 hex digest", field=f"{where}.initial_observation_digest")
    return digest


def episode_entry(manifest: Manifest, benchmark: str, index: int) -> dict[str, Any]:
    """Returns entry ``index`` after checking the manifest is intact and meant for this benchmark.

    A Manifest is a plain dataclass that anyone can construct, so one that ``parse`` did not build is
    parsed again from its bytes here (``manifests.format.verify``, ManifestError on ``hash`` when
    they are not the ones its hash names): an adapter must never run episodes of another manifest.
    One that ``parse`` built had its bytes checked then, so a process that keeps it hashes it once.
    """
    manifest = verify(manifest)
    if manifest.benchmark != benchmark:
        raise BenchmarkError(f"is {manifest.benchmark!r}, this adapter runs {benchmark!r}", field="benchmark")
    if not 0 <= index < len(manifest):
        raise BenchmarkError(f"{index} is outside the manifest's {len(manifest)} episodes", field="index")
    return manifest.episodes[index]
