"""`scheduler backup`: a verified copy of the scheduler's database, taken while it serves.

It runs on the scheduler's host, against the database file: SQLite's online backup reads one
committed state beside the running scheduler (WAL mode) without stopping it or waiting for it, so
no RPC is needed and a scheduler that is down can be backed up the same way. The copy and its
check are ``scheduler.store.backup``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.cli.common import UsageError, print_json

if TYPE_CHECKING:
    from scheduler.cli.common import Subcommands


def add_commands(commands: Subcommands) -> None:
    backup = commands.add_parser("backup", help="copy the scheduler's database while it serves, and verify the copy")
    backup.add_argument("--db", type=Path, required=True, help="the database file `scheduler serve --db` uses")
    backup.add_argument("--out", type=Path, required=True, metavar="FILE", help="where the copy goes")
    backup.add_argument("--force", action="store_true", help="replace FILE if it exists")
    backup.add_argument("--json", action="store_true", help="machine-readable output")
    backup.set_defaults(func=cmd_backup)


def cmd_backup(args: argparse.Namespace) -> int:
    from scheduler.store.backup import BackupError, backup

    try:
        verified = backup(args.db, args.out, overwrite=args.force)
    except BackupError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print_json(
            {
                "path": str(verified.path),
                "integrity": verified.integrity,
                "schema_version": verified.schema_version,
                "pages": verified.pages,
                "rows": verified.rows,
            }
        )
        return 0
    version = verified.schema_version
    print(f"backed up {args.db} to {verified.path}: integrity {verified.integrity}, schema version {version}")
    print("rows: " + ", ".join(f"{table} {count}" for table, count in verified.rows.items()))
    return 0
