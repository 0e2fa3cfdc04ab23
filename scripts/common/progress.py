"""Progress lines of a long run, on stderr so that the report on stdout stays clean to redirect."""

from __future__ import annotations

import sys
import time


def progress(message: str) -> None:
    """One timestamped line: ``[bench HH:MM:SS] message``."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
