"""Session-bound connections, for a remote that keeps episode state per connection (vla-eval).

openpi's server is stateless, so any free connection can carry any session's step. vla-eval's
server keeps each connection's episode (its step counter, action-chunk buffer, whatever the model
keeps between steps), so here a connection belongs to one evalfleet session for its episode: opened
at the session's first step (HELLO, handshake checked, EPISODE_START from the episode's metadata),
one OBSERVATION/ACTION per step, EPISODE_END and closed when the session ends (closed or evicted
by the inference server, which calls `RemoteBackend.end_session`). `connections` caps how many
sessions hold one at a time; a session beyond the cap fails its step as unavailable.

A connection that breaks after the remote answered the session's first step took the remote's
episode state with it. Starting a fresh remote episode in the middle of evalfleet's would score a
policy that forgot its past, so every later step of that session fails as unavailable and the
worker retries the episode in a new session. An ERROR message keeps the connection and its state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalfleet.policy_api.errors import BackendFailed, RemoteUnavailable
from evalfleet.v1 import policy_pb2
from inference_server.backends.contract import Actions, History
from inference_server.backends.remote.dialect import Connection, EpisodeConnection, RemoteDown, RemoteSaid


def episode_start(episode: policy_pb2.EpisodeMeta) -> dict[str, Any]:
    """The EPISODE_START payload: vla-eval's `{"task": {...}}` as its own client sends it
    (vla_eval/runners/sync_runner.py:43-53: the task's str, int, float, bool and list values), with
    vla-eval's keys for what the episode's numbering says: `name`, the instruction (vla-eval's
    LIBERO task name is the task's language, vla_eval/benchmarks/libero/benchmark.py:162-175),
    `suite`, `task_id` and `episode_idx` (the orchestrator adds the last, orchestrator.py:430-434).
    Model servers read them: vla-eval's dexbotic CogACT server picks its chunk size by `suite`
    (model_servers/dexbotic/cogact.py:159-170). evalfleet's own names for the episode follow
    (`benchmark`, `task`, `setting`, `episode_id`), keys vla-eval's LIBERO tasks do not have."""
    task: dict[str, Any] = {"name": episode.instruction}
    if episode.suite:
        task["suite"] = episode.suite
    if episode.HasField("task_index"):
        task["task_id"] = episode.task_index
    if episode.HasField("episode_index"):
        task["episode_idx"] = episode.episode_index
    task |= {
        "benchmark": episode.benchmark,
        "task": episode.task,
        "setting": episode.setting,
        "episode_id": episode.episode_id,
    }
    return {"task": task}


@dataclass
class _Session:
    """One session's hold on the remote; `lock` keeps its steps and its end in order."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    connection: EpisodeConnection | None = None
    answered: int = 0  # steps the remote answered in this session's episode
    lost: str = ""  # why the remote no longer has this session's episode


class EpisodeConnections:
    """Each session's steps over its own connection, at most `capacity` sessions at a time.

    `connect(timeout_s)` opens a connection and checks its handshake (raising RemoteRestarted for
    another one); `check(actions)` turns a reply's actions into the chunk or raises RemoteSaid.
    """

    def __init__(
        self,
        where: str,
        capacity: int,
        connect: Callable[[float], Connection],
        check: Callable[[object], Actions],
    ) -> None:
        self.where = where
        self.capacity = capacity
        self._connect = connect
        self._check = check
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        # Connections opened but not yet given to a session (the one that pinned the handshake at load).
        self.idle: list[Connection] = []

    def step(self, request: dict[str, Any], history: History, timeout_s: float) -> Actions:
        """One step of `history.session_id` on its connection; raises typed policy errors."""
        session = self._session(history.session_id)
        with session.lock:
            if session.lost:
                raise RemoteUnavailable(f"{self.where}: {session.lost}")
            try:
                connection = session.connection or self._open(session, history, timeout_s)
                try:
                    (actions,) = connection.infer([request], timeout_s)
                except RemoteDown as exc:  # closed, or a reply that may still come: the connection is done
                    self._broke(session, exc)
                    raise
                except RemoteSaid as exc:
                    if not connection.is_open():  # the dialect closed it: out of step with the remote
                        self._broke(session, exc)
                    raise
                session.answered += 1
                return self._check(actions)
            except RemoteDown as exc:
                raise RemoteUnavailable(f"{self.where}: {exc}") from None
            except RemoteSaid as exc:
                raise BackendFailed(f"{self.where}: {exc}") from None

    def end(self, session_id: str) -> None:
        """Ends the session's remote episode (EPISODE_END) and closes its connection; never raises."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return
        with session.lock:
            connection, session.connection = session.connection, None
            if connection is not None:
                connection.end_episode({"steps": session.answered})

    def _session(self, session_id: str) -> _Session:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                holding = sum(1 for s in self._sessions.values() if not s.lost)
                if holding >= self.capacity:
                    raise RemoteUnavailable(
                        f"{self.where}: all {self.capacity} connections (settings.connections) carry other "
                        f"sessions' episodes; session {session_id} cannot start one until a session ends"
                    )
                session = self._sessions[session_id] = _Session()
            return session

    def _open(self, session: _Session, history: History, timeout_s: float) -> EpisodeConnection:
        with self._lock:
            opened = self.idle.pop() if self.idle else None
        if opened is not None and not opened.is_open():
            opened.close()
            opened = None
        connection = opened or self._connect(timeout_s)
        if not isinstance(connection, EpisodeConnection):
            raise TypeError(f"{type(connection).__name__} cannot carry an episode")
        try:
            connection.start_episode(episode_start(history.episode))
        except RemoteDown:
            connection.close()
            raise
        session.connection = connection
        return connection

    def _broke(self, session: _Session, exc: Exception) -> None:
        connection, session.connection = session.connection, None
        if connection is not None:
            connection.close()
        if session.answered:
            session.lost = (
                f"the connection carrying this session's episode broke after {session.answered} answered "
                f"steps ({exc}), and the remote's episode state went with it: retry the episode in a new session"
            )
