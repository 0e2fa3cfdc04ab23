"""Simulator stack overlays: where `make stacks` puts them, what each pins, how a process runs on one.

A stack other than the one the environment installs (openpi's MuJoCo 3.2.3 and robosuite 1.4.1,
say) is a directory of its own, ``.stacks/NAME``, holding only the distributions that differ,
installed without their dependencies (``scripts/install_stack.sh``; what it pins is
``requirements/stacks/NAME.txt``, copied beside them as ``stack.txt``). Put first on the Python
path, it shadows those distributions for imports and for ``importlib.metadata`` alike, so a process
started with ``python_path`` runs that stack: a renderer worker (``renderer_worker.stacks``) and the
manifest builder that `scheduler run` starts for a spec's ``fleet.stack``, whose manifests must pin
the stack the workers run (``manifests.stacks``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# Where `make stacks` put the overlays (default: .stacks beside this checkout's packages).
STACKS_DIR_ENV = "EVALFLEET_STACKS_DIR"
STAMP = ".evalfleet-installed"
PINS_FILE = "stack.txt"


class StackError(Exception):
    """The stack asked for is not built, or is not what it pins; the message says which, in one line."""


def stacks_dir() -> Path:
    configured = os.environ.get(STACKS_DIR_ENV)
    return Path(configured) if configured else Path(__file__).resolve().parent.parent / ".stacks"


def built_stacks() -> list[str]:
    root = stacks_dir()
    return sorted(path.parent.name for path in root.glob(f"*/{STAMP}")) if root.is_dir() else []


def overlay(name: str) -> Path:
    """The directory of stack ``name``; StackError when it is not built."""
    path = stacks_dir() / name
    if "/" in name or name in ("", ".", "..") or not (path / STAMP).is_file():
        built = ", ".join(built_stacks()) or "none"
        raise StackError(f"--stack {name}: not built in {stacks_dir()} (built: {built}); `make stacks` builds them")
    return path


def pins(path: Path) -> dict[str, str]:
    """``stack.txt``'s ``distribution==version`` lines."""
    pinned = {}
    for line in (path / PINS_FILE).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            if not sep:
                raise StackError(f"{path / PINS_FILE}: {line!r} is not NAME==VERSION")
            pinned[name.strip()] = version.strip()
    return pinned


def python_path(name: str, environ: Mapping[str, str]) -> str:
    """``PYTHONPATH`` for a process on stack ``name``: its overlay first, then what ``environ`` has."""
    return os.pathsep.join([str(overlay(name)), *filter(None, [environ.get("PYTHONPATH")])])
