"""A consistent copy of the scheduler's database, taken while the scheduler serves, and its check.

The copy is SQLite's online backup (``sqlite3.Connection.backup``) from a connection of its own
(opened read-write only so that it can remove the -wal and -shm files it opens; it writes nothing
and never creates the database), in one step: one read transaction, so the copy is one committed
state of the database. In WAL mode that read never blocks the scheduler's writer, nor does the
writer disturb it (a stepwise backup would restart at every commit and might never end under load).
The copy is written beside its destination under a temporary name, reopened and checked
(``integrity_check``, the schema version, each table's rows) and only then renamed into place, so a
failed backup leaves no file that looks like one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from scheduler.store import schema


class BackupError(Exception):
    """The backup was refused or failed; no file was left at the destination. One line."""


@dataclass(frozen=True)
class Verified:
    """What reopening a copy found: SQLite's integrity check, the schema version, rows per table."""

    path: Path
    integrity: str
    schema_version: int | None
    rows: dict[str, int]
    pages: int


def backup(source: Path, destination: Path, *, overwrite: bool = False) -> Verified:
    """Copies ``source`` to ``destination`` and verifies the copy; ``BackupError`` on any refusal."""
    if not source.is_file():
        raise BackupError(f"--db {source}: no such database file")
    if destination.exists() and not overwrite:
        raise BackupError(f"--out {destination} exists; pass --force to replace it")
    if destination.exists() and destination.resolve() == source.resolve():
        raise BackupError(f"--out {destination} is the database itself")
    if not destination.parent.is_dir():
        raise BackupError(f"--out {destination}: no such folder {destination.parent}")
    if destination.is_dir():
        raise BackupError(f"--out {destination} is a folder; name the file")
    partial = destination.with_name(f".{destination.name}.partial-{os.getpid()}")
    try:
        _copy(source, partial)
        verified = verify(partial)
        if verified.integrity != "ok":
            raise BackupError(f"the copy failed its integrity check: {verified.integrity}")
        os.replace(partial, destination)
    except sqlite3.Error as exc:
        raise BackupError(f"backup of {source} failed: {exc}") from exc
    except OSError as exc:  # the copy could not be written or renamed (permissions, a full disk)
        raise BackupError(f"--out {destination}: {exc.strerror or exc}") from exc
    finally:
        for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return Verified(destination, verified.integrity, verified.schema_version, verified.rows, verified.pages)


def _copy(source: Path, destination: Path) -> None:
    """One backup step over every page: the copy is one snapshot of ``source``."""
    # Never created (mode=rw): a mistyped path is refused, not made into an empty database. Not
    # read-only either: a read-only connection cannot remove the -wal and -shm files it opens.
    src = sqlite3.connect(f"file:{source.resolve()}?mode=rw", uri=True, timeout=30)
    try:
        try:
            schema.stored_version(src)
        except schema.SchemaVersionError as exc:
            raise BackupError(f"--db {source}: {exc}") from None
        dst = sqlite3.connect(destination)
        try:
            src.backup(dst, pages=-1)
            # The copy is one self-contained file (a WAL database needs its -shm beside it to be read).
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
    finally:
        src.close()


def verify(path: Path) -> Verified:
    """Reopens a database and reports what it holds, changing nothing in it."""
    conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    try:
        integrity = "; ".join(row[0] for row in conn.execute("PRAGMA integrity_check"))
        try:
            version = schema.stored_version(conn)
        except schema.SchemaVersionError as exc:
            raise BackupError(f"the copy {path}: {exc}") from None
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        rows = {table: int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]) for table in tables}
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    finally:
        conn.close()
    return Verified(path, integrity, version, rows, pages)
