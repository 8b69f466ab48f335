"""``podium audit``: what podium's logs say it did, its audit trail filtered and summed up per
job (read whole, or followed as it is written)."""

from __future__ import annotations

import dataclasses
import datetime
import sys
from collections.abc import Callable
from typing import Annotated, TypeVar

import orjson
import typer

from webhook.core.audit import AuditEntry, Outcome
from webhook.ops import auditview, output
from webhook.ops.cli_options import (
    AuditFiles,
    OnlyNamespace,
    dump,
    hint_stdin,
)

T = TypeVar("T")

# ``podium audit``'s options, one name each.
OnlyJob = Annotated[
    str | None,
    typer.Option(
        "--job",
        metavar="KIND/NAME",
        help="Only this job: NAME, KIND/NAME (kind in any case, e.g. pytorchjob/ft) or UID.",
    ),
]
OnlyPod = Annotated[str | None, typer.Option("--pod", metavar="NAME", help="Only this pod.")]
OnlyZone = Annotated[str | None, typer.Option("--zone", metavar="ZONE", help="Only this zone.")]
OnlyOutcome = Annotated[Outcome | None, typer.Option("--outcome", help="Only this outcome.")]
OnlyReason = Annotated[
    str | None, typer.Option("--reason", metavar="REASON", help="Only this reason.")
]
OnlyUser = Annotated[
    str | None,
    typer.Option("--user", metavar="NAME", help="Only requests by this user (or service account)."),
]
Since = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="WHEN",
        help="Only records at or after WHEN: a duration back from now (90s, 15m, 2h, 1d) "
        "or a timestamp (2026-11-29T12:00:00Z; local time without a zone).",
    ),
]
Until = Annotated[
    str | None,
    typer.Option("--until", metavar="WHEN", help="Only records at or before WHEN (as --since)."),
]
Follow = Annotated[
    bool,
    typer.Option(
        "--follow", "-f", help="Keep reading: print records as they are appended (Ctrl-C ends)."
    ),
]
ShowOwnReleases = Annotated[
    bool,
    typer.Option(
        "--show-own-releases",
        help="Also podium's own UPDATEs of the pods its releaser released (skipped "
        "own-release, one per pod; the releaser's released entry lists them).",
    ),
]
Utc = Annotated[bool, typer.Option("--utc", help="Times in UTC (default: local time).")]


def audit_command(
    files: AuditFiles = None,
    namespace: OnlyNamespace = None,
    job: OnlyJob = None,
    pod: OnlyPod = None,
    zone: OnlyZone = None,
    outcome: OnlyOutcome = None,
    reason: OnlyReason = None,
    user: OnlyUser = None,
    since: Since = None,
    until: Until = None,
    follow: Follow = False,
    output_format: output.FormatOption = output.Format.TABLE,
    utc: Utc = False,
    show_own_releases: ShowOwnReleases = False,
) -> None:
    """Review the audit trail: podium's records from its logs, filtered, with a per-job summary.

    Reads files or stdin, e.g. `kubectl -n podium-system logs -l app.kubernetes.io/name=podium
    --tail=-1 --prefix --timestamps | podium audit` (with -l, kubectl sends only the last 10
    lines of each pod unless --tail=-1). Jobs are grouped by gang (job UID, plus the group for
    group-wise jobs). Exits 1 when a job was split across zones, 0 otherwise (also when the
    filters leave no record), 2 when it cannot read its input or the input holds no audit record
    at all (the wrong file or log source). podium's own release UPDATEs (skipped own-release) are
    left out unless --show-own-releases.
    """
    query = _audit_filter(
        namespace=namespace,
        job=job,
        pod=pod,
        zone=zone,
        outcome=outcome,
        reason=reason,
        user=user,
        since=since,
        until=until,
        show_own_releases=show_own_releases,
    )
    tally = auditview.Tally()
    shown = TableShape(wide=output_format is output.Format.WIDE, namespace=namespace is None)
    try:
        specs = auditview.expand(files or [auditview.STDIN])
        hint_stdin(specs, "podium audit")
        if follow:
            found = _follow_audit(specs, query, tally, output_format, utc=utc, shape=shown)
        else:
            found = _read_audit(specs, query, tally, output_format, utc=utc, shape=shown)
    except auditview.InputError as err:
        raise output.fail(str(err)) from err
    if tally.skipped:
        output.note(f"({tally.skipped} line(s) skipped: not podium audit records)")
    if found.split:
        raise typer.Exit(output.FINDINGS)


@dataclasses.dataclass(frozen=True, slots=True)
class TableShape:
    """Which columns a table shows: ``-o wide``'s, and NAMESPACE unless -n chose one."""

    wide: bool = False
    namespace: bool = True


def _audit_filter(
    *,
    namespace: str | None,
    job: str | None,
    pod: str | None,
    zone: str | None,
    outcome: Outcome | None,
    reason: str | None,
    user: str | None,
    since: str | None,
    until: str | None,
    show_own_releases: bool,
) -> auditview.Filter:
    """``podium audit``'s filter options as one query, each parsed (``--since``/``--until``
    against this moment) or refused in a line that names it."""
    now = datetime.datetime.now(datetime.UTC)

    def moment(text: str) -> datetime.datetime:
        return auditview.parse_moment(text, now=now)

    query = auditview.Filter(
        namespace=namespace,
        job=_parsed("--job", job, auditview.JobQuery.parse),
        pod=pod,
        zone=zone,
        outcome=outcome,
        reason=reason,
        user=user,
        since=_parsed("--since", since, moment),
        until=_parsed("--until", until, moment),
        hide_own_releases=not show_own_releases,
    )
    _check_window(since, until, query.since, query.until)
    return query


def _read_audit(
    specs: list[str],
    query: auditview.Filter,
    tally: auditview.Tally,
    output_format: output.Format,
    *,
    utc: bool,
    shape: TableShape,
) -> auditview.Summary:
    """``podium audit`` without --follow: the whole input read, the records the filters keep
    shown, and how many of podium's own release UPDATEs they left out."""
    loaded = list(auditview.load(specs, tally))
    if not loaded:
        raise output.fail(_no_records(specs, tally))
    entries = [r for r in loaded if query.matches(r)]
    found = _show_audit(entries, tally, output_format, utc=utc, shape=shape)
    hidden = sum(
        1
        for r in loaded
        if auditview.own_release(r)
        and dataclasses.replace(query, hide_own_releases=False).matches(r)
    )
    if hidden and query.hide_own_releases and output_format.tabular:
        output.note(
            f"({hidden} of podium's own release UPDATEs hidden: --show-own-releases shows them)"
        )
    return found


def _check_window(
    since_text: str | None,
    until_text: str | None,
    since: datetime.datetime | None,
    until: datetime.datetime | None,
) -> None:
    """--since after --until leaves no moment to show: refuse it rather than print nothing."""
    if since is not None and until is not None and since > until:
        raise output.fail(
            f"--since {since_text} is later than --until {until_text}: no record can be in "
            f"both (--since is the older end of the window; did you mean --since {until_text} "
            f"--until {since_text}?)"
        )


def _no_records(specs: list[str], tally: auditview.Tally) -> str:
    """Why an input without a single audit record is an error, not an all-clear: it is most
    likely the wrong file or the wrong log source (another container, the wrong label), and
    ``podium audit … || alert`` must not pass on it. Filters that leave nothing of records that
    were there are fine (exit 0)."""
    read = ", ".join("stdin" if spec == auditview.STDIN else spec for spec in specs)
    if not tally.skipped:
        return f"no podium audit records in {read}: the input is empty"
    return (
        f"no podium audit records in {read}: {tally.skipped} line(s), none of them a podium "
        "audit record (is it podium's log? kubectl -n podium-system logs "
        "-l app.kubernetes.io/name=podium --tail=-1)"
    )


def _show_audit(
    entries: list[AuditEntry],
    tally: auditview.Tally,
    output_format: output.Format,
    *,
    utc: bool,
    shape: TableShape,
) -> auditview.Summary:
    grouped = auditview.summarize(entries)
    if not output_format.tabular:
        doc = auditview.document(entries, grouped, skipped=tally.skipped)
        sys.stdout.write(dump(doc, output_format))
        return grouped
    if not entries:
        typer.echo("No audit records match.")  # the input had some: the filters left none
        return grouped
    plain = not output.is_terminal()
    wide, namespace = shape.wide, shape.namespace
    legend = auditview.legend(entries, grouped, wide=wide)
    output.render(
        [
            auditview.table(entries, wide=wide, utc=utc, plain=plain, namespace=namespace),
            "",
            auditview.summary(grouped, wide=wide, plain=plain, namespace=namespace),
            *(["", legend] if legend else []),
        ],
        plain=plain,
        wide=wide,
    )
    return grouped


def _follow_audit(
    specs: list[str],
    query: auditview.Filter,
    tally: auditview.Tally,
    output_format: output.Format,
    *,
    utc: bool,
    shape: TableShape,
) -> auditview.Summary:
    grouped = auditview.Summary()
    wide, namespace = shape.wide, shape.namespace
    tabular = output_format.tabular
    if tabular:
        typer.echo(auditview.stream_header(wide=wide, namespace=namespace))
    try:
        for entry in auditview.read(auditview.follow_lines(specs), tally):
            if not query.matches(entry):
                continue
            grouped.add(entry)
            if tabular:
                typer.echo(auditview.stream_line(entry, wide=wide, utc=utc, namespace=namespace))
            elif output_format is output.Format.JSON:
                typer.echo(orjson.dumps(entry).decode())
            else:
                sys.stdout.write("---\n" + dump(entry, output_format))
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    if tabular and grouped.gangs:
        plain = not output.is_terminal()
        output.render(
            ["", auditview.summary(grouped, wide=wide, plain=plain, namespace=namespace)],
            plain=plain,
            wide=wide,
        )
    return grouped


def _parsed(flag: str, text: str | None, parse: Callable[[str], T]) -> T | None:
    """An option's value parsed, or an error naming the option."""
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as err:
        raise output.fail(f"{flag}: {err}") from err
