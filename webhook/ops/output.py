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

import datetime
import enum
import io
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

import orjson
import typer
import typer.core
import yaml
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
#: The width a default table keeps to when piped, as a terminal's: ``-o wide`` for more.
TABLE_WIDTH = 80


class Format(enum.StrEnum):
    """``-o`` of every command that prints objects, as kubectl spells it: ``table`` (the
    default, piped or not), ``wide`` (more columns, no width limit), ``json``, ``yaml``."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def tabular(self) -> bool:
        return self in (Format.TABLE, Format.WIDE)


def format_parser(aliases: Mapping[str, Format] | None = None) -> Callable[[Any], Format]:
    """``typer.Option(parser=…)`` for ``-o``: a ``Format``, or one of a command's older names
    (``aliases``, e.g. review's ``summary``), so scripts that used them keep working."""
    known = {f.value: f for f in Format} | dict(aliases or {})

    def parse(value: Any) -> Format:
        if isinstance(value, Format):
            return value
        text = str(value)  # as kubectl: exactly, in lower case
        if text not in known:
            names = ", ".join(repr(f.value) for f in Format)
            raise typer.BadParameter(f"{value!r} is not one of {names}.")
        return known[text]

    return parse


def format_option(aliases: Mapping[str, Format] | None = None) -> Any:
    """The ``-o/--output`` option of a command that prints objects."""
    return typer.Option(
        "--output",
        "-o",
        metavar="table|wide|json|yaml",
        parser=format_parser(aliases),
        help="Output format: table (default), wide (more columns), json or yaml.",
    )


#: ``-o`` of a command without older names for its formats.
FormatOption = Annotated[Format, format_option()]


def age(moment: datetime.datetime | None, now: datetime.datetime) -> str:
    """How long ago ``moment`` was, as kubectl's AGE column says it (apimachinery's
    ``duration.HumanDuration``): ``45s``, ``5m3s``, ``94m``, ``3h20m``, ``30h``, ``3d4h``,
    ``12d``, ``2y3d``; ``-`` for no time."""
    if moment is None:
        return "-"
    seconds = int((now - moment).total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = divmod(hours // 24, 365)
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


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


def stdin_is_terminal() -> bool:
    """Whether stdin is a terminal (a person would have to type the input)."""
    return sys.stdin is not None and sys.stdin.isatty()


def dump(doc: Any, output_format: Format | None) -> str:
    """``-o json`` (indented; also for None) or ``-o yaml`` (keys in their order)."""
    if output_format is Format.YAML:
        return str(yaml.dump(doc, Dumper=_YAML_DUMPER, sort_keys=False, allow_unicode=True))
    try:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
    except TypeError:  # integers past 64 bits in a hand-made input
        return json.dumps(doc, indent=2, default=str) + "\n"


_YAML_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


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


def render(
    renderables: Iterable[RenderableType | str],
    *,
    plain: bool,
    wide: bool = False,
    width: int = PLAIN_WIDTH,
) -> None:
    """Print to stdout: rich on a terminal (a table too wide for it as ``fit`` lays it out);
    plain text otherwise, in ``width`` columns, a table in ``TABLE_WIDTH`` unless ``wide``
    (``narrow``), without trailing blanks."""
    if not plain:
        console = Console(highlight=False)
        for item in renderables:
            console.print(fit(item, width=console.width) if isinstance(item, Table) else item)
        return
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system=None,
        force_terminal=False,
        highlight=False,
        emoji=False,
    )
    for item in renderables:
        if isinstance(item, Table):  # whole rows: a table is never folded to ``width``
            console.print(item if wide else narrow(item), width=PLAIN_WIDTH)
        else:
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


def narrow(table: Table, *, width: int = TABLE_WIDTH) -> Table:
    """A plain table in ``width`` columns when its text can wrap between words to get there (a
    name never folds, a row never becomes a block); as it is otherwise, one line a row, as kubectl
    prints a table whose names are longer than the screen."""
    natural = Measurement.get(_MEASURING, _MEASURING.options, table).maximum
    if natural <= width:
        return table
    widths = _word_widths(table, width)
    if widths is not None:
        for column, chosen in zip(table.columns, widths, strict=True):
            column.width = chosen
    return table


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
