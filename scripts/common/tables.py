"""Tables the benchmarks print: plain aligned columns for the terminal, or Markdown for BENCHMARKS.md.

The cells come formatted (each benchmark knows its units and digits); these functions only lay
them out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def number(value: float, digits: int = 1) -> str:
    """``value`` with thousands separators and ``digits`` decimals; "-" for NaN (not measured)."""
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def aligned(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    """Plain aligned columns under a dashed rule: the first left-aligned, numbers right-aligned."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        cells = [
            str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def markdown(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table: the header, its rule, one line per row (an empty cell stays empty)."""

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"

    return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)])
