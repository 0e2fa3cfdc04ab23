"""A worker on another simulator stack: `renderer-worker --stack NAME` runs on an overlay `make stacks` built.

A stack other than the one the environment installs (openpi's MuJoCo 3.2.3 and robosuite 1.4.1,
say) is a directory of its own, ``.stacks/NAME``, holding only the distributions that differ,
installed without their dependencies (``scripts/install_stack.sh``; what it pins is
``requirements/stacks/NAME.txt``, copied beside them as ``stack.txt``). Put first on the Python
path, it shadows those distributions for imports and for ``importlib.metadata`` alike, so the
worker's episode processes, which inherit the path, run that stack and the stack id the worker
advertises (``manifests.stacks.installed_stacks``) is the overlay's, read from what imports, not
from the flag.

``--stack NAME`` therefore re-executes the worker (same process id) with the overlay first on
``PYTHONPATH``; the re-executed worker checks that every pin of ``stack.txt`` is what
``importlib.metadata`` now reports before it registers, so a broken overlay is one start-up line,
never a worker that claims under the wrong stack.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Sequence
from pathlib import Path

# Set in the re-executed worker: the overlay it runs on (so it does not re-execute again).
RUNNING_STACK_ENV = "EVALFLEET_STACK"
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


def enter(name: str, argv: Sequence[str]) -> None:
    """Makes this worker run on stack ``name``: re-executes it with the overlay first on the path
    (returns only in the re-executed worker, once the pins are checked). StackError otherwise."""
    path = overlay(name)
    if os.environ.get(RUNNING_STACK_ENV) != name:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(path), *filter(None, [env.get("PYTHONPATH")])])
        env[RUNNING_STACK_ENV] = name
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "renderer_worker.cli", *argv], env)
    for distribution, wanted in pins(path).items():
        try:
            have = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            have = "not installed"
        if have != wanted:
            raise StackError(f"--stack {name}: {distribution} is {have} here, the stack pins {wanted} ({path})")
