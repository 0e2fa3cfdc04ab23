"""What every `scheduler` command shares: exit codes, the usage error, the connection flags, printing.

A command that talks to a scheduler is added with ``add_client_command``, which gives it
``--server``, ``--token-file``, ``--tls-ca`` and ``--json`` (the first three also before the
subcommand), and opens its client with ``connect``. Machine-readable output goes through
``print_json``, tables through ``console``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rich.console import Console

from evalfleet.auth import read_token
from evalfleet.channels import read_tls_ca
from evalfleet.scheduler_api import client as client_module

if TYPE_CHECKING:
    # What ``add_subparsers`` returns; argparse names the class privately.
    Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]

Command = Callable[[argparse.Namespace], int | None]

EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 1


class UsageError(Exception):
    """Bad command-line input detected before any request is sent."""


# The connection flags, accepted before the subcommand too (`scheduler --server H:P status`).
CONNECTION_FLAGS = ("server", "token_file", "tls_ca")
TOKEN_FILE_ENV = "EVALFLEET_TOKEN_FILE"


def add_connection_arguments(parser: argparse.ArgumentParser, dest_prefix: str = "") -> None:
    """``--server``, ``--token-file`` and ``--tls-ca``; before the subcommand they are stored under
    ``dest_prefix`` and ``merge_connection`` moves them onto the subcommand's."""
    parser.add_argument(
        "--server",
        dest=f"{dest_prefix}server",
        default=None,
        help=f"scheduler address (default ${client_module.ADDRESS_ENV} or {client_module.DEFAULT_ADDRESS})",
    )
    parser.add_argument(
        "--token-file", dest=f"{dest_prefix}token_file", type=Path, default=None, help=f"default ${TOKEN_FILE_ENV}"
    )
    parser.add_argument(
        "--tls-ca", dest=f"{dest_prefix}tls_ca", type=Path, help="CA certificate to verify a TLS scheduler"
    )


def merge_connection(args: argparse.Namespace, prefix: str) -> None:
    """The subcommand's connection flags, else those given before it, else the token file's
    environment variable; UsageError for a flag before a subcommand that takes none."""
    for name in CONNECTION_FLAGS:
        given = getattr(args, f"{prefix}{name}")
        if given is None:
            continue
        if not getattr(args, "connects", False):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} does not apply to `scheduler {args.command}`")
        if getattr(args, name) is None:
            setattr(args, name, given)
    if getattr(args, "connects", False) and args.token_file is None and os.environ.get(TOKEN_FILE_ENV):
        args.token_file = Path(os.environ[TOKEN_FILE_ENV])


def add_client_command(commands: Subcommands, name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
    """A subcommand that talks to a scheduler: the connection flags and ``--json`` come with it."""
    sub = commands.add_parser(name, help=help_text)
    add_connection_arguments(sub)
    sub.add_argument("--json", action="store_true", help="machine-readable output")
    sub.set_defaults(func=func, connects=True)
    return sub


def connect(args: argparse.Namespace) -> client_module.SchedulerClient:
    """A client for the scheduler that ``add_client_command``'s flags name."""
    token = read_token(args.token_file) if args.token_file else None
    return client_module.SchedulerClient(args.server, token, tls_ca=read_tls_ca(args.tls_ca))


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def console() -> Console:
    """Tables keep their columns when piped: a non-terminal gets a wide page, not 80 columns."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def plots_module() -> ModuleType:
    """The plotting module (``--plot``), or a usage error naming the extra that provides matplotlib:
    it is imported only when a chart is asked for."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib: pip install 'evalfleet[plots]'")
    from scheduler import plots

    return plots
