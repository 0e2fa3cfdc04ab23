"""The `inference-server` command: serve one checkpoint, or seal, verify and show checkpoint folders.

`inference-server --epoch ep6 ...` serves (module `serve`); `inference-server checkpoint
seal|verify|show DIR` works on a folder offline (module `checkpoint`). The serving flags stay at
the top level, so every documented invocation keeps working; the first argument `checkpoint`
selects the folder tools. Bad input prints one line on stderr and exits 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from inference_server.cli import checkpoint, serve


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["checkpoint"]:
        return checkpoint.main(arguments[1:])
    return serve.main(arguments)
