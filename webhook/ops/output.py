"""How every ``podium`` command speaks: one exit-code scheme, one error format, and output that
suits whoever reads it — tables that fit the terminal for a person, plain columns (no box drawing,
no colour, nothing folded) when stdout is a pipe or a file.

Exit codes, for every command::

    0   ok
    1   findings: the command ran and found something wrong (``doctor``: a broken job;
        ``audit``: a job split across zones; ``certs rotate``: a step refused as unsafe;
        ``certs show``: a row in error)
    2   could not run: a bad argument, an unreadable input (``audit``: one without a single
        audit record), a namespace or kubeconfig that is not there, an unreachable cluster

Errors are one line on stderr, ``Error: <what>``, in the same words click uses for a bad
argument, and they name the flag that fixes them when there is one.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterable
from typing import Any

import typer
import typer.core
from rich import box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

OK = 0
FINDINGS = 1
CANNOT_RUN = 2

#: Wide enough that a plain (piped) table never folds a cell; trailing blanks are stripped.
PLAIN_WIDTH = 4096


class Command(typer.core.TyperCommand):
    """A command whose help names its arguments as its usage line does (``[FILE]...``,
    ``INPUT``), not with typer's type label (``FILE <list[str]>``, ``INPUT <path>``): the help
    says what to type, the argument's own help says what it is."""

    # ``Any``: typer bundles its own click, whose classes it does not export.
    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((_usage_name(param), record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _usage_name(param: Any) -> str:
    """``INPUT``, ``[FILE]...``: an argument as click writes it in a usage line."""
    name = str(param.metavar or (param.name or "").upper())
    if not param.required:
        name = f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def error(message: str) -> None:
    """Say what went wrong, on stderr, in the one format every command uses."""
    typer.echo(f"Error: {message}", err=True)


def fail(message: str) -> typer.Exit:
    """``raise output.fail("…")``: the error line, then exit 2 (could not run)."""
    error(message)
    return typer.Exit(CANNOT_RUN)


def note(message: str) -> None:
    """Something worth knowing that is not the output (stderr, so pipes stay clean)."""
    typer.echo(message, err=True)


def is_terminal() -> bool:
    """Whether stdout is a terminal (rich's test, so ``TTY_COMPATIBLE=1`` forces it)."""
    return Console().is_terminal


def table(title: str | None = None, *, plain: bool) -> Table:
    """A table as podium draws it: boxed on a terminal, kubectl-like columns when plain."""
    if plain:
        return Table(
            title=None,
            box=None,
            show_edge=False,
            pad_edge=False,
            padding=(0, 3, 0, 0),
            header_style="",
            title_style="",
        )
    return Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        show_edge=False,
    )


def make_plain(table: Table) -> Table:
    """A table built for a terminal, redrawn as plain columns (for a pipe)."""
    table.box = None
    table.show_edge = False
    table.pad_edge = False
    table.padding = (0, 3, 0, 0)
    table.title = None
    table.header_style = ""
    for column in table.columns:
        column.header = str(column.header).upper()
    return table


def render(renderables: Iterable[RenderableType | str], *, plain: bool) -> None:
    """Print to stdout: rich on a terminal (a table too wide for it as ``fit`` lays it out);
    plain text otherwise."""
    if not plain:
        console = Console(highlight=False)
        for item in renderables:
            console.print(fit(item, width=console.width) if isinstance(item, Table) else item)
        return
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=PLAIN_WIDTH,
        color_system=None,
        force_terminal=False,
        highlight=False,
        emoji=False,
    )
    for item in renderables:
        console.print(item)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))
    sys.stdout.flush()


def fit(table: Table, *, width: int) -> RenderableType:
    """``table`` when every column gets at least its longest word in ``width`` columns (cells
    with spaces then wrap between words, a name stays whole); otherwise the same rows one below
    the other, a ``column: value`` line per cell (as ``kubectl describe``), so that no name is
    folded mid-word (``ml-t/eam``) and no value is cut. Only a single word wider than the whole
    value column folds."""
    widths = _word_widths(table, width)
    if widths is not None:
        for column, chosen in zip(table.columns, widths, strict=True):
            column.width = chosen
        return table
    names = [str(column.header) for column in table.columns]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    rows = zip(*(list(column.cells) for column in table.columns), strict=True)
    for i, cells in enumerate(rows):
        if i:
            grid.add_row("", "")
        for name, cell in zip(names, cells, strict=True):
            grid.add_row(f"{name}:", cell)
    title = table.title
    return Group(Text(str(title), style="bold"), grid) if title else grid


def _word_widths(table: Table, width: int) -> list[int] | None:
    """Column widths (content, as ``Column.width``) that give every column its longest word —
    a name (no spaces in any cell) all of itself — and share what is left in proportion to what
    each column could use; None when ``width`` is too narrow for that. rich's own shrinking
    ignores word lengths, so the widths are fixed here."""
    spans = []
    for column in table.columns:
        cells = [column.header, *column.cells]
        measured = [Measurement.get(_MEASURING, _MEASURING.options, _text(c)) for c in cells]
        longest = max(m.maximum for m in measured)
        name = column.no_wrap or all(len(str(c).split()) <= 1 for c in column.cells)
        spans.append((longest if name else max(m.minimum for m in measured), longest))
    natural = Measurement.get(_MEASURING, _MEASURING.options, table).maximum
    room = width - (natural - sum(most for _, most in spans))  # less padding and borders
    spare = room - sum(least for least, _ in spans)
    if spare < 0:
        return None
    wanted = sum(most - least for least, most in spans) or 1
    share = min(1.0, spare / wanted)
    return [least + int((most - least) * share) for least, most in spans]


def _text(cell: Any) -> RenderableType:
    return _MEASURING.render_str(cell) if isinstance(cell, str) else cell


#: A console only to measure with (never printed to).
_MEASURING = Console(file=io.StringIO(), width=PLAIN_WIDTH, color_system=None)


def under_labels(lines: Iterable[str], *, gutter: int) -> Group:
    """Lines of rich markup whose first ``gutter`` characters are a label (``  patch    ``), for
    a terminal: a line wider than it wraps between words and goes on under its text, not under
    its label; lines without a label (not indented) wrap as they are."""
    parts: list[Text | Table] = []
    grid: Table | None = None
    for line in lines:
        text = Text.from_markup(line)
        if not (text.plain.startswith("  ") and len(text) > gutter):
            parts.append(text)
            grid = None
            continue
        if grid is None:
            grid = Table.grid()
            grid.add_column(width=gutter, no_wrap=True)
            grid.add_column(overflow="fold")
            parts.append(grid)
        label, rest = text.divide([gutter])
        grid.add_row(label, rest)
    return Group(*parts)
