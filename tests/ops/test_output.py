"""``output.fit``: a table that fits the terminal stays a table; one that does not becomes one
``column: value`` block per row, every value whole."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from webhook.ops import output

NAMES = ["ml-team-research", "llama-finetune-70b-worker-0", "PyTorchJob/llama-finetune-70b"]


def drawn(renderable: object, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


def names_table() -> object:
    table = output.table("jobs", plain=False)
    for column in ("namespace", "pod", "job", "reason"):
        table.add_column(column, overflow="fold")
    table.add_row(*NAMES, "no zone has room for the whole job; the roomiest was chosen")
    return table


def test_a_table_that_fits_stays_a_table() -> None:
    table = names_table()
    assert output.fit(table, width=200) is table  # type: ignore[arg-type]


@pytest.mark.parametrize("width", [100, 120])
def test_a_table_wide_enough_for_its_names_wraps_only_the_text_between_words(width: int) -> None:
    lines = drawn(output.fit(names_table(), width=width), width)  # type: ignore[arg-type]
    assert "─" in lines[2] and max(len(line) for line in lines) <= width
    assert all(name in lines[3] for name in NAMES)  # each name whole, on the row's first line
    assert " ".join(" ".join(lines).split()).endswith("chosen")


@pytest.mark.parametrize("width", [60, 80])
def test_a_table_too_narrow_for_its_names_becomes_blocks_with_every_name_whole(
    width: int,
) -> None:
    lines = drawn(output.fit(names_table(), width=width), width)  # type: ignore[arg-type]
    assert lines[0] == "jobs"
    assert max(len(line) for line in lines) <= width
    rows = dict(tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:4])
    assert rows == dict(zip(["namespace", "pod", "job"], NAMES, strict=True))
    reason = " ".join(" ".join(lines[4:]).split())
    assert reason == "reason: no zone has room for the whole job; the roomiest was chosen"


def test_a_table_whose_wrappable_cells_can_wrap_between_words_stays_a_table() -> None:
    """Only names (no spaces) force the blocks: a long reason wraps at its spaces."""
    table = output.table(None, plain=False)
    table.add_column("zone")
    table.add_column("reason")
    table.add_row("zone-c", "a reason long enough to wrap at eighty columns " * 3)
    assert output.fit(table, width=80) is table
    assert max(len(line) for line in drawn(table, 80)) <= 80


def test_a_column_is_never_narrower_than_its_longest_word() -> None:
    """`podium audit`'s per-job summary at 80 columns, as seen on the test bed: rich shrank the
    wrappable outcomes column below its own header and printed ``outcome`` / ``s``."""
    table = output.table("per job (1)", plain=False)
    columns = ["namespace", "job", "gang", "admissions", "zones", "outcomes", "verdict"]
    cells = ["hold-1d042d", "PyTorchJob/plugin", "f3aa1483", "5", "zone-a (1)"]
    cells += ["held (2), released (1), skipped (2)", "ok"]
    for column in columns:
        table.add_column(column, overflow="fold")
    table.add_row(*cells)
    lines = drawn(output.fit(table, width=80), 80)
    assert max(len(line) for line in lines) <= 80
    words = {word for line in lines for word in line.split()}
    assert set(columns) <= words
    assert {w for c in cells for w in c.split()} <= words
