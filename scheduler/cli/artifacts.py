"""Episode artifacts from the command line: `artifact get` downloads one, `gc` frees a submission's.

Artifacts (episode videos, ...) are listed on their episodes by `scheduler task ID`; these commands
fetch their bytes over gRPC, so no filesystem is shared with the scheduler, and free the space of a
submission whose results are final.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evalfleet.auth import CredentialError
from manifests.format import is_hash
from scheduler.cli.common import EXIT_UNAVAILABLE, UsageError, add_client_command, connect, print_json
from scheduler.wire_json import message_dict

if TYPE_CHECKING:
    from scheduler.cli.common import Subcommands


def add_commands(commands: Subcommands) -> None:
    """`artifact get` and `gc`."""
    artifact = commands.add_parser("artifact", help="episode artifacts (videos) stored by the scheduler")
    verbs = artifact.add_subparsers(dest="verb", required=True, metavar="VERB")
    get = add_client_command(verbs, "get", cmd_artifact_get, "download an artifact by its sha256")
    get.add_argument("sha256", metavar="HASH", help="as `scheduler task ID` lists it")
    get.add_argument("--out", type=Path, required=True, metavar="FILE", help="where to write it ('-': stdout)")

    gc = add_client_command(commands, "gc", cmd_gc, "free the space of a finished submission's artifacts")
    gc.add_argument("submission")
    gc.add_argument(
        "--force", action="store_true", help="also while tasks are pending or leased (their artifacts are lost)"
    )


def cmd_artifact_get(args: argparse.Namespace) -> int:
    if not is_hash(args.sha256):
        raise UsageError(f"{args.sha256!r} is not a sha256 (64 lowercase hex characters)")
    if str(args.out) == "-":
        with connect(args) as client:
            client.download_artifact(args.sha256, sys.stdout.buffer)
        return 0
    if args.out.is_dir():
        raise UsageError(f"--out {args.out} is a folder; name the file")
    if not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: no folder {args.out.parent}")
    # Written beside the target and renamed once whole and verified: a refused or broken download
    # leaves no partial file under the name asked for.
    partial = args.out.with_name(f".{args.out.name}.partial")
    try:
        with connect(args) as client, open(partial, "wb") as out:
            size = client.download_artifact(args.sha256, out)
        os.replace(partial, args.out)
    except CredentialError:  # a ValueError too, but the user's: exit 2 in main
        raise
    except ValueError as exc:  # the bytes did not hash to the name: kept nowhere
        print(f"scheduler: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except OSError as exc:  # the folder is not writable, or the disk is full
        raise UsageError(f"--out {args.out}: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    if args.json:
        print_json({"sha256": args.sha256, "path": str(args.out), "size_bytes": size})
    else:
        print(f"{args.out}: {size} bytes")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    with connect(args) as client:
        response = client.collect_artifacts(args.submission, force=args.force)
    if args.json:
        print_json(message_dict(response))
    else:
        print(
            f"{args.submission}: collected {response.artifacts_collected} artifact(s), deleted "
            f"{response.files_deleted} file(s), freed {response.bytes_freed} bytes"
        )
    return 0
