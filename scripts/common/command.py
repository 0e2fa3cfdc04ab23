"""The command line of the running tool, as typed from the repository root, for its report's
header: a figure says how to reproduce it."""

from __future__ import annotations

import contextlib
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def command_line() -> str:
    """The interpreter (relative to the repository when inside it) and the arguments.

    Run as ``python -m scripts.bench.scheduler``, ``sys.argv[0]`` is the module's file: the
    module's name is put back in its place."""
    python = Path(sys.executable)
    with contextlib.suppress(ValueError):
        python = python.relative_to(REPO)
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is None:
        return shlex.join([str(python), *sys.argv])
    return shlex.join([str(python), "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]])
