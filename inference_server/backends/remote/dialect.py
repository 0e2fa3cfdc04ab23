"""What a remote policy server's protocol must provide to the `remote` backend.

The backend owns everything the protocols share: the observation mapping, the connection pool,
spreading a batch over it, checking the replies and turning failures into typed policy errors.
A dialect owns one wire format: how to connect and read the server's handshake, how to carry a
list of mapped requests (one session's step each) and where each reply's actions are. openpi
carries one request per round trip; StarVLA carries several sessions' steps in one envelope, up
to `requests_per_message`: the backend splits a batch into groups of at most that many, one
message each. vla-eval's server keeps episode state per connection: its connections are
`EpisodeConnection`s, each bound to one session (`episodes.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

# What of a traceback or error message goes into an error of ours: its end says what failed.
QUOTE_CHARS = 2000


def quote(text: str) -> str:
    """The end of what the remote said, short enough for an error message."""
    text = text.strip()
    return text if len(text) <= QUOTE_CHARS else "..." + text[-QUOTE_CHARS:]


class RemoteDown(Exception):
    """The transport failed: no connection, a closed connection, no reply in time. Retry later."""


class RemoteSaid(Exception):
    """The remote answered, but with an error or with something that is not a reply (its traceback,
    an error message, bytes that do not decode); the message quotes what it said."""


class RemoteRefused(RemoteSaid):
    """The remote answered the request with an error of its own and keeps the connection open
    (StarVLA's error data): the step fails, the connection stays in the pool."""


class Connection(Protocol):
    """One open connection to the remote; used by one thread at a time."""

    handshake: bytes
    """The raw handshake the server sent on connect; its sha256 identifies what is served."""

    def infer(self, requests: Sequence[dict[str, Any]], timeout_s: float) -> list[object]:
        """Sends the requests (at most `requests_per_message`) and returns, per request, the raw
        `actions` value of its reply. Raises RemoteDown or RemoteSaid."""

    def is_open(self) -> bool:
        """False once the remote closed it (a remote that went away while it sat idle in the pool)."""

    def close(self) -> None:
        """Closes the connection; safe to call on a broken one."""


class Dialect(Protocol):
    """A dialect module's `from_settings(settings)` builds one from the checkpoint's settings,
    raising ValueError that names a bad setting of its own."""

    @property
    def name(self) -> str:
        """The `dialect` setting that selects it."""

    @property
    def requests_per_message(self) -> int:
        """How many sessions' steps one message may carry (openpi: 1)."""

    def connect(self, url: str, timeout_s: float) -> Connection:
        """Opens a connection and reads the handshake. Raises RemoteDown or RemoteSaid."""


@runtime_checkable
class EpisodeConnection(Connection, Protocol):
    """A connection whose server keeps per-connection episode state (vla-eval): it carries one
    session's episode from `start_episode` to `end_episode`, so it is bound to that session."""

    def start_episode(self, episode: dict[str, Any]) -> None:
        """Announces the episode (sent; the server answers only if it fails). Raises RemoteDown."""

    def end_episode(self, result: dict[str, Any]) -> None:
        """Ends the episode and closes the connection; never raises."""
