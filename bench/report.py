"""What the two studies' reports share: Markdown tables, numbers, the block a study rewrites inside
a hand-written document, the machine a run was made on, and matplotlib (a bench-only dependency,
imported only when plotting).

Each study keeps its own tables and plots (``bench.throughput.report``,
``bench.placement.report``); a document under ``docs/benchmarks/`` holds a study's tables
between two marker lines (`Markers`), and a run rewrites only what is between them.
"""

# ruff: noqa: PLC0415 - matplotlib is bench-only and imported only when plotting

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: What a table shows where there is no number (a quantile of no samples, say).
MISSING = "–"


@dataclass(frozen=True, kw_only=True)
class Markers:
    """The two lines of a document between which a study writes its tables."""

    begin: str
    end: str

    def embed(self, document: str, tables: str) -> str:
        """``document`` with ``tables`` between `begin` and `end`."""
        start, end = document.index(self.begin) + len(self.begin), document.index(self.end)
        return f"{document[:start]}\n{tables}{document[end:]}"

    def block(self, tables: str) -> str:
        """``tables`` between the markers: what a document starts from."""
        return f"{self.begin}\n{tables}{self.end}\n"


def num(value: float | None, digits: int = 1) -> str:
    """``value`` with thousands separators and ``digits`` decimals; `MISSING` for None."""
    return MISSING if value is None else f"{value:,.{digits}f}"


def row(*cells: object) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(map(str, cells)) + " |"


def table(header: str, rows: Iterable[str]) -> list[str]:
    """A Markdown table's lines: ``header`` (its cells joined by " | "), the separator, then
    ``rows`` (made by `row`)."""
    return [row(header), "|" + "---|" * (header.count(" | ") + 1), *rows]


def machine() -> dict[str, Any]:
    """What the results record of the machine a run was made on."""
    return {"cpus": os.cpu_count(), "python": sys.version.split()[0]}


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing to files only (the Agg backend): no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure: Any, path: Path, *, dpi: int) -> Path:
    """Lay ``figure`` out, write it to ``path`` and free it."""
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)
    return path
