"""The artifact store: episode files (videos, ...) beside the database, named by their sha256.

Workers and the scheduler share no filesystem, so an episode's files travel over gRPC
(``UploadArtifact``) and land here. A file is written to a temporary name under ``tmp/``, checked
against the size and sha256 its upload declared, fsynced, and only then renamed to
``<root>/<sha256[:2]>/<sha256>``: a name in the store always holds the whole, verified file, and a
refused or broken upload leaves nothing but a temporary file that is removed at once (or, after a
crash, at the next start). Equal bytes are stored once. What the store accepts is counted here
too (``UploadQuota``), before an upload's first byte is received. Which episode names which file is in the
database (``scheduler.store.artifacts``); the database row is written after the rename, so a crash
between the two leaves an unnamed file, which ``sweep`` removes at start-up.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from evalfleet.scheduler_api.errors import InvalidArgument, ResourceExhausted
from evalfleet.scheduler_api.limits import DEFAULT_MAX_ARTIFACT_BYTES, DEFAULT_MAX_ARTIFACTS_TOTAL_BYTES

TMP = "tmp"
OWNER_FILE = "STORE_ID"


def default_root(db_path: Path) -> Path:
    """Where a database's artifacts live unless ``--artifacts-dir`` says otherwise."""
    return db_path.with_name(db_path.name + ".artifacts")


class Incoming:
    """One file being received: bytes go to a temporary file while their hash and size are kept."""

    def __init__(self, store: ArtifactStore, sha256: str, size: int) -> None:
        self.sha256 = sha256
        self.size = size
        self.received = 0
        self._store = store
        self._hash = hashlib.sha256()
        self.tmp_path = store.root / TMP / f"{sha256}.{uuid.uuid4().hex}"
        self._file: BinaryIO = open(self.tmp_path, "xb")

    def write(self, data: bytes) -> None:
        """Appends a chunk; refused as soon as the bytes exceed the declared size."""
        if self.received + len(data) > self.size:
            raise InvalidArgument(
                f"the upload sent more than the declared {self.size} bytes", field="header.size_bytes"
            )
        self._hash.update(data)
        self._file.write(data)
        self.received += len(data)

    def verify(self) -> None:
        """Refuses bytes that are not what the header declared."""
        if self.received != self.size:
            raise InvalidArgument(
                f"the upload sent {self.received} bytes, the header declared {self.size}", field="header.size_bytes"
            )
        actual = self._hash.hexdigest()
        if actual != self.sha256:
            raise InvalidArgument(
                f"the bytes hash to {actual}, the header declared {self.sha256}", field="header.sha256"
            )

    def commit(self) -> Path:
        """Makes the verified file durable under its final name (blocking: fsyncs)."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        final = self._store.path(self.sha256)
        final.parent.mkdir(exist_ok=True)
        os.replace(self.tmp_path, final)
        _fsync_dir(final.parent)
        return final

    def close(self) -> None:
        """Removes the temporary file unless ``commit`` renamed it."""
        if not self._file.closed:
            self._file.close()
        self.tmp_path.unlink(missing_ok=True)


class ArtifactStoreError(Exception):
    """The artifact folder cannot serve this database (it belongs to another one)."""


def check_root(root: Path, new_database: bool) -> None:
    """Refuses, before anything is created, a folder that cannot be a database's store: a path that
    exists but is not a folder, a folder (or the nearest existing parent of a missing one) that this
    process cannot write, or, for a database not created yet, a store another database owns.
    ``ArtifactStore`` checks an existing database's store against its id when it opens it."""
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ArtifactStoreError(f"--artifacts-dir {root}: {os.strerror(errno.ENOTDIR)}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ArtifactStoreError(f"--artifacts-dir {root}: {os.strerror(errno.EACCES)}")
    marker = root / OWNER_FILE
    if new_database and marker.is_file():
        raise ArtifactStoreError(
            f"{root} holds the artifacts of another scheduler database (store id {marker.read_text().strip()});"
            " give each database its own --artifacts-dir"
        )


class ArtifactStore:
    """Files named by sha256 under ``root``; the database says which exist (``artifact_files``).

    A store belongs to one database: ``STORE_ID`` holds the id the database keeps in its ``meta``
    table, and a store with another id is refused, since the start-up sweep deletes every file its
    own database does not name. A copy of the database (a backup) keeps the id and its store.
    """

    def __init__(self, root: Path, store_id: str) -> None:
        self.root = root
        try:
            self._claim(store_id)
        except OSError as exc:  # not a folder, not writable, ...: the flag is at fault, not the scheduler
            raise ArtifactStoreError(f"--artifacts-dir {root}: {exc.strerror or exc}") from None

    def _claim(self, store_id: str) -> None:
        """Makes the folder this database's store, or refuses one that is another database's."""
        marker = self.root / OWNER_FILE
        if marker.exists() and (owner := marker.read_text().strip()) != store_id:
            raise ArtifactStoreError(
                f"{self.root} holds the artifacts of another scheduler database (store id {owner}, this database's"
                f" is {store_id}); give each database its own --artifacts-dir"
            )
        (self.root / TMP).mkdir(parents=True, exist_ok=True)
        if not marker.exists():
            marker.write_text(store_id + "\n")

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    @contextlib.contextmanager
    def receive(self, sha256: str, size: int) -> Iterator[Incoming]:
        """A file being received; whatever happens, no temporary file outlives the block. A full
        disk refuses the upload (``ResourceExhausted``): the worker goes on without the file."""
        try:
            incoming = Incoming(self, sha256, size)
        except OSError as exc:
            self._refuse_if_full(exc)
            raise
        try:
            yield incoming
        except OSError as exc:
            self._refuse_if_full(exc)
            raise
        finally:
            incoming.close()

    def _refuse_if_full(self, exc: OSError) -> None:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ResourceExhausted(
                f"the artifact store {self.root} is out of disk space ({exc.strerror}); nothing was stored"
                " (free space, e.g. with scheduler gc)",
                field="header.size_bytes",
            ) from exc

    def delete(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

    def open(self, sha256: str) -> BinaryIO:
        return open(self.path(sha256), "rb")

    def sweep(self, known: set[str]) -> tuple[int, int]:
        """Removes what a crash left: temporary files, and files no database row names.

        Returns (files removed, bytes freed). Run at start-up, before any upload.
        """
        removed, freed = 0, 0
        for path in (self.root / TMP).iterdir():
            freed += path.stat().st_size
            path.unlink()
            removed += 1
        for folder in self.root.iterdir():
            if folder.name == TMP or not folder.is_dir():
                continue  # the temporary folder, and STORE_ID
            for path in folder.iterdir():
                if path.name not in known:
                    freed += path.stat().st_size
                    path.unlink()
                    removed += 1
        return removed, freed


def _fsync_dir(folder: Path) -> None:
    """Makes a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ArtifactLimits:
    """What the store accepts: ``scheduler serve --max-artifact-bytes`` and ``--max-artifacts-total-bytes``."""

    per_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES
    total_bytes: int = DEFAULT_MAX_ARTIFACTS_TOTAL_BYTES


class UploadQuota:
    """Counts each upload's declared size against ``limits`` before any of its bytes is received.

    Uploads in flight hold their bytes (``reserve``) until they are stored or refused, so uploads
    arriving together cannot all pass a total that only one of them fits.
    """

    def __init__(self, limits: ArtifactLimits) -> None:
        self.limits = limits
        # Bytes of uploads in flight, counted against the total limit before they are stored.
        self._reserved_bytes = 0

    @contextlib.asynccontextmanager
    async def reserve(self, size: int, stored_bytes: Callable[[], Awaitable[int]]) -> AsyncIterator[None]:
        """Holds ``size`` bytes for the upload the block receives. Refused (``ResourceExhausted``)
        past the limit per artifact, or when the bytes stored (``stored_bytes()``), those of the
        uploads in flight and ``size`` together pass the limit on all artifacts."""
        limits = self.limits
        if size > limits.per_artifact_bytes:
            raise ResourceExhausted(
                f"{size} bytes is above the limit per artifact, {limits.per_artifact_bytes} bytes"
                " (scheduler serve --max-artifact-bytes)",
                field="header.size_bytes",
            )
        # Reserved before the stored total is read, so that uploads arriving together cannot all pass.
        self._reserved_bytes += size
        try:
            stored = await stored_bytes()
            if stored + self._reserved_bytes > limits.total_bytes:
                raise ResourceExhausted(
                    f"storing {size} more bytes would pass the limit on all artifacts,"
                    f" {limits.total_bytes} bytes ({stored} stored,"
                    f" {self._reserved_bytes - size} being uploaded;"
                    " scheduler serve --max-artifacts-total-bytes, or free space with scheduler gc)",
                    field="header.size_bytes",
                )
            yield
        finally:
            self._reserved_bytes -= size
