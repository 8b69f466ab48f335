"""``podium audit``: podium's audit entries read back from log lines, filtered, and shown as a
table of admissions and a per-gang summary that flags gangs split across zones.

Reading: files, globs, ``-`` for stdin and gzip (by its magic bytes, so a ``.gz`` on stdin works
too); lines as ``kubectl logs`` prints them with ``--prefix`` and/or ``--timestamps`` (the entry
starts at the first ``{``); other lines are counted, not shown. Entries of several inputs are
merged by time. ``follow_lines`` tails files (surviving truncation and rotation by rename).

Grouping is by *gang* — the job's UID, plus the group for group-wise jobs (a LeaderWorkerSet's
groups are separate gangs and may sit in separate zones) — never by ``Kind/name``: a job deleted
and resubmitted under the same name is a new gang, and two healthy LWS groups in two zones are
two gangs in one zone each.

Everything but the I/O at the top is pure: entries in, values out; ``cli`` prints.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import glob
import gzip
import io
import os
import re
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import orjson
from rich.table import Table

from webhook.core.audit import MARKER, AuditEntry, Outcome
from webhook.ops import output

#: ``-o``: table, wide, json or yaml, as every command spells it.
Format = output.Format


class InputError(ValueError):
    """An input that cannot be read; the message is one line and names the input."""


STDIN = "-"

#: The markers of the table, and what they mean (``legend`` lists those that appear).
MARKERS = {
    "*": "coordinator (the pod its gang's zone follows; -o wide)",
    "!": "answered with warnings (-o wide lists them)",
    "~": "dry run (nothing was created)",
    "^": "shadow mode (decided and recorded; the pod was admitted unchanged)",
}


# -- reading ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    """Non-blank lines that were not podium audit entries (other log lines, broken JSON)."""

    skipped: int = 0


def parse(line: str) -> AuditEntry | None:
    """The audit entry on one log line, or None. A prefix such as ``kubectl logs --prefix`` or
    ``--timestamps`` adds is allowed: the entry starts at the first ``{``."""
    start = line.find("{")
    if start < 0:
        return None
    try:
        doc = orjson.loads(line[start:])
    except orjson.JSONDecodeError:
        return None
    if isinstance(doc, dict) and doc.get("audit") == MARKER:
        return doc  # type: ignore[return-value]
    return None


def read(lines: Iterable[str], tally: Tally | None = None) -> Iterator[AuditEntry]:
    """podium's audit entries among arbitrary log lines; the others are counted in ``tally``."""
    for line in lines:
        entry = parse(line)
        if entry is not None:
            yield entry
        elif tally is not None and line.strip():
            tally.skipped += 1


def expand(specs: Sequence[str]) -> list[str]:
    """The inputs named on the command line: files, ``-`` (stdin) and globs (for a pattern the
    shell did not expand, e.g. quoted), in order; a name matching nothing is an error."""
    found: list[str] = []
    for spec in specs:
        if spec == STDIN or Path(spec).exists():
            found.append(spec)
        elif any(c in spec for c in "*?["):
            matches = sorted(glob.glob(spec))
            if not matches:
                raise InputError(f"{spec}: no file matches")
            found.extend(matches)
        else:
            raise InputError(f"{spec}: no such file")
    return found


@contextlib.contextmanager
def open_text(spec: str) -> Iterator[IO[str]]:
    """An input as text lines; gzip is recognised by its magic bytes, whatever the name.
    Closes what it opened (never stdin)."""
    with contextlib.ExitStack() as opened:
        try:
            raw: Any = (
                sys.stdin.buffer if spec == STDIN else opened.enter_context(Path(spec).open("rb"))
            )
        except OSError as err:
            raise InputError(f"cannot read {spec}: {err.strerror or err}") from err
        if not hasattr(raw, "peek"):
            raw = io.BufferedReader(raw)
        if raw.peek(2)[:2] == b"\x1f\x8b":
            raw = opened.enter_context(gzip.GzipFile(fileobj=raw))
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
        try:
            yield text
        finally:
            text.detach()


def time_of(entry: Mapping[str, Any]) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(entry.get("time") or ""))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


_EPOCH = datetime.min.replace(tzinfo=UTC)


def load(specs: Sequence[str], tally: Tally | None = None) -> list[AuditEntry]:
    """Every entry of every input, merged by time (entries without a time first)."""
    entries: list[AuditEntry] = []
    for spec in specs:
        try:
            with open_text(spec) as text:
                entries.extend(read(text, tally))
        except OSError as err:
            raise InputError(f"cannot read {spec}: {err.strerror or err}") from err
        except (EOFError, zlib.error) as err:
            raise InputError(f"cannot read {spec}: a compressed file cut short or damaged") from err
    entries.sort(key=lambda r: time_of(r) or _EPOCH)
    return entries


class _Tail:
    """One file being followed: new complete lines since the last look."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.handle = Path(path).open("rb")  # noqa: SIM115
        self.inode = os.fstat(self.handle.fileno()).st_ino
        self.partial = b""

    def lines(self) -> list[str]:
        data = self.partial + self.handle.read()
        *complete, self.partial = data.split(b"\n")
        try:
            now = os.stat(self.path)
        except FileNotFoundError:  # rotated away; the new one has not appeared yet
            now = None
        if now is not None and (now.st_ino != self.inode or now.st_size < self.handle.tell()):
            # Rotated (a new file under the name) or truncated: start over from its beginning.
            self.handle.close()
            self.handle = Path(self.path).open("rb")  # noqa: SIM115
            self.inode = os.fstat(self.handle.fileno()).st_ino
            self.partial = b""
        return [line.decode("utf-8", errors="replace") for line in complete]

    def close(self) -> None:
        self.handle.close()


def follow_lines(
    specs: Sequence[str],
    *,
    stop: Callable[[], bool] = lambda: False,
    interval: float = 0.5,
) -> Iterator[str]:
    """Lines of stdin as they come (until it closes), or of files: what they hold, then what is
    appended, looking every ``interval`` seconds until ``stop()``."""
    if list(specs) == [STDIN]:
        with open_text(STDIN) as text:
            yield from text
        return
    if STDIN in specs:
        raise InputError("--follow reads either stdin or files, not both")
    for spec in specs:
        with Path(spec).open("rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                raise InputError(f"{spec}: cannot follow a compressed file")
    tails = [_Tail(spec) for spec in specs]
    try:
        while True:
            quiet = True
            for tail in tails:
                for line in tail.lines():
                    quiet = False
                    yield line
            if stop():
                return
            if quiet:
                time.sleep(interval)
    finally:
        for tail in tails:
            tail.close()


# -- filters ----------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}


def parse_moment(text: str, *, now: datetime) -> datetime:
    """``--since``/``--until``: a duration back from ``now`` (``90s``, ``15m``, ``2h``, ``1d``,
    ``1h30m``, as ``kubectl logs --since``) or a timestamp (ISO 8601; without a zone it is local
    time; a date alone is its midnight)."""
    value = text.strip()
    if value and _DURATION.sub("", value) == "":
        total = sum((float(n) * _UNITS[unit] for n, unit in _DURATION.findall(value)), timedelta(0))
        return now - total
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (90s, 15m, 2h, 1d, 1h30m) nor a timestamp "
            "(2026-11-29, 2026-11-29T12:00:00Z)"
        ) from None
    return moment if moment.tzinfo else moment.astimezone()


@dataclasses.dataclass(frozen=True, slots=True)
class JobQuery:
    """``--job``: ``NAME``, or ``KIND/NAME`` as kubectl takes it — the kind in any case, singular
    or plural, with or without its group (``pytorchjob/ft``, ``PyTorchJobs.kubeflow.org/ft``). A
    bare value also matches a job UID or gang key."""

    kind: str | None
    name: str

    @classmethod
    def parse(cls, text: str) -> JobQuery:
        if "/" not in text:
            if not text:
                raise ValueError("name a job: NAME or KIND/NAME")
            return cls(None, text)
        kind, name = text.split("/", 1)
        if not kind or not name or "/" in name:
            raise ValueError(f"{text!r} is not NAME or KIND/NAME (e.g. pytorchjob/llama-ft)")
        return cls(kind.split(".", 1)[0].lower(), name)

    def matches(self, job: Mapping[str, Any] | None) -> bool:
        if not job:
            return False
        name = str(job.get("name") or "")
        if self.kind is None:
            return self.name in (name, job.get("uid"), job.get("gang"))
        kind = str(job.get("kind") or "").lower()
        return self.name == name and self.kind in (kind, kind + "s", kind + "es")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Filter:
    """Every filter of ``podium audit``; an entry must pass all that are set."""

    namespace: str | None = None
    job: JobQuery | None = None
    pod: str | None = None
    zone: str | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    user: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: Leave out podium's own release UPDATEs (``own_release``).
    hide_own_releases: bool = False

    def matches(self, entry: Mapping[str, Any]) -> bool:
        if self.hide_own_releases and own_release(entry):
            return False
        if self.pod is not None and not pod_matches(self.pod, entry):
            return False
        checks = (
            (self.namespace, entry.get("namespace")),
            (self.zone, entry.get("zone")),
            (self.outcome, entry.get("outcome")),
            (self.reason, entry.get("reason")),
            (self.user, entry.get("user")),
        )
        if any(wanted is not None and wanted != value for wanted, value in checks):
            return False
        if self.job is not None and not self.job.matches(entry.get("job")):
            return False
        if self.since is not None or self.until is not None:
            moment = time_of(entry)
            if moment is None:
                return False
            if self.since is not None and moment < self.since:
                return False
            if self.until is not None and moment > self.until:
                return False
        return True


#: The reason of the entry podium writes when its releaser's own UPDATE of a held pod (taking
#: the gate off) comes back through admission: skipped, one per released pod.
OWN_RELEASE = "own-release"


def own_release(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` is podium's own release UPDATE coming back (``skipped own-release``):
    the releaser's entry already says what it released, so ``podium audit`` hides these unless
    ``--show-own-releases``."""
    return entry.get("outcome") == Outcome.SKIPPED and entry.get("reason") == OWN_RELEASE


def pod_matches(name: str, entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` is about the pod ``name``. A pod created with a generated name (JobSet
    pods, an MPI launcher, anything a Job makes) is admitted before it has its name, so its
    entry keeps the ``generateName`` prefix (``llama-launcher-``): a name that starts with it
    matches. A pod name cannot end in ``-``, so such a prefix is never a whole name. Releaser
    entries also list the pods they released."""
    recorded = str(entry.get("pod") or "")
    if name == recorded or (recorded.endswith("-") and name.startswith(recorded)):
        return True
    return name in (entry.get("pods") or ())


def matches(entry: Mapping[str, Any], **filters: Any) -> bool:
    """``Filter(**filters).matches(entry)``; ``job`` may be given as text."""
    if isinstance(filters.get("job"), str):
        filters["job"] = JobQuery.parse(filters["job"])
    return Filter(**filters).matches(entry)


# -- per gang ---------------------------------------------------------------------------------

#: Verdicts of a gang, worst first.
SPLIT, CHECK, NO_ROOM, OK = "split", "check", "no-room", "ok"
#: Every entry so far is ``held``: the gang waits behind podium's gate for a zone with room.
HELD = "held"
#: Held, and the releaser's latest word is that no zone could hold it even empty: it waits for
#: an admin, not for room (``release.Wait.too_big``, the audit reason ``too-big``).
TOO_BIG = "too-big"
#: The reason of a decision that pinned a gang to a zone without room for all of it.
NO_FIT_PINNED = "no-fit-most-free"


@dataclasses.dataclass
class GangSummary:
    """What the entries say about one gang: how many admissions went to which zones."""

    namespace: str
    gang: str
    kind: str
    name: str
    uid: str
    admissions: int = 0
    dry_runs: int = 0
    #: Shadow-mode decisions: recorded, not applied (``podium report`` judges them).
    shadows: int = 0
    reconciled: int = 0
    warnings: int = 0
    #: Admissions whose decision pinned the gang where it did not fit (``NO_FIT_PINNED``).
    pinned_without_room: int = 0
    #: The releaser's latest held entry said no zone could ever hold it (reason ``too-big``).
    too_big: bool = False
    zones: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    first: datetime | None = None
    last: datetime | None = None

    @property
    def job(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def verdict(self) -> str:
        """``split``: its pods were pinned to more than one zone; ``check``: not every admission
        pinned (unpinned, failed open); ``no-room``: podium pinned it to a zone that had no room
        for all of it (``no-fit-most-free``), so some pods may wait there unschedulable — the
        records cannot say whether they still do, ``podium doctor`` can; ``held``: its pods wait
        behind podium's gate, none released yet (``zone-chooser: hold``) — ``too-big`` when the
        releaser last said no zone could ever hold it; ``ok``."""
        if len(self.zones) > 1:
            return SPLIT
        outcomes = set(self.outcomes) - {Outcome.PINNED}
        if Outcome.RELEASED in outcomes:
            outcomes -= {Outcome.HELD, Outcome.RELEASED}
        if outcomes == {Outcome.HELD}:
            return TOO_BIG if self.too_big else HELD
        if outcomes:
            return CHECK
        if self.pinned_without_room:
            return NO_ROOM
        return OK

    def add(self, entry: Mapping[str, Any]) -> None:
        moment = time_of(entry)
        if moment is not None:
            self.first = min(self.first or moment, moment)
            self.last = max(self.last or moment, moment)
        if entry.get("outcome") == Outcome.RECONCILE:
            self.reconciled += 1
            return
        if entry.get("dryRun"):
            self.dry_runs += 1  # nothing was created: no zone taken
            return
        if entry.get("shadow"):
            self.shadows += 1  # nothing was pinned: no zone taken
            return
        self.admissions += 1
        self.outcomes[str(entry.get("outcome") or "")] += 1
        self.warnings += len(entry.get("warnings") or [])
        if entry.get("zone"):
            self.zones[str(entry["zone"])] += 1
        if entry.get("reason") == NO_FIT_PINNED:
            self.pinned_without_room += 1
        if entry.get("outcome") == Outcome.HELD and entry.get("action") == "wait":
            self.too_big = entry.get("reason") == TOO_BIG

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "gang": self.gang,
            "job": {"kind": self.kind, "name": self.name, "uid": self.uid},
            "admissions": self.admissions,
            "dryRuns": self.dry_runs,
            "shadow": self.shadows,
            "reconciled": self.reconciled,
            "zones": dict(sorted(self.zones.items())),
            "outcomes": dict(sorted(self.outcomes.items())),
            "warnings": self.warnings,
            "first": self.first.isoformat() if self.first else None,
            "last": self.last.isoformat() if self.last else None,
            "verdict": self.verdict,
        }


class Summary:
    """Entries grouped by gang, as they come (so ``--follow`` can keep one)."""

    def __init__(self) -> None:
        self._gangs: dict[tuple[str, str], GangSummary] = {}

    def add(self, entry: Mapping[str, Any]) -> None:
        job = entry.get("job") or {}
        key = str(job.get("gang") or job.get("uid") or "")
        if not key:
            return
        namespace = str(entry.get("namespace") or "")
        summary = self._gangs.get((namespace, key))
        if summary is None:
            summary = self._gangs[(namespace, key)] = GangSummary(
                namespace=namespace,
                gang=key,
                kind=str(job.get("kind") or ""),
                name=str(job.get("name") or ""),
                uid=str(job.get("uid") or ""),
            )
        summary.add(entry)

    @property
    def gangs(self) -> list[GangSummary]:
        return sorted(
            self._gangs.values(),
            key=lambda g: (g.namespace, g.job, g.first or _EPOCH, g.gang),
        )

    @property
    def split(self) -> list[GangSummary]:
        return [g for g in self.gangs if g.verdict == SPLIT]


def summarize(entries: Iterable[Mapping[str, Any]]) -> Summary:
    out = Summary()
    for entry in entries:
        out.add(entry)
    return out


def document(entries: Sequence[AuditEntry], summary: Summary, *, skipped: int) -> dict[str, Any]:
    """``-o json``/``-o yaml``: the entries, the per-gang summary and what was skipped."""
    return {
        "records": list(entries),
        "jobs": [g.as_dict() for g in summary.gangs],
        "split": len(summary.split),
        "skippedLines": skipped,
    }


# -- presentation -----------------------------------------------------------------------------


def format_time(moment: datetime | None, *, utc: bool = True, precise: bool = False) -> str:
    """``2026-11-29 13:00:00 CET`` (local) or ``… UTC``; milliseconds when ``precise``."""
    if moment is None:
        return "-"
    shown = moment.astimezone(UTC if utc else None)
    text = shown.strftime("%Y-%m-%d %H:%M:%S")
    if precise:
        text += f".{shown.microsecond // 1000:03d}"
    return f"{text} {shown.tzname() or shown.strftime('%z')}"


#: The fewest characters of a job UID a table shows (as ``git`` abbreviates commits).
SHORT_UID = 8


def uid_width(uids: Iterable[str]) -> int:
    """How many characters of a UID tell ``uids`` apart: ``SHORT_UID``, or more when two of
    them share their first ``SHORT_UID`` (``job-uid-1`` and ``job-uid-2``: 9)."""
    distinct = {u for u in uids if u}
    width = SHORT_UID
    while len({u[:width] for u in distinct}) < len(distinct):
        width += 1
    return width


def short_gang(gang: str, uid: str, *, width: int = SHORT_UID) -> str:
    """The gang key with its UID cut to ``width`` characters (``1f2d3819``, ``1f2d3819-g1``);
    ``uid_width`` of the UIDs shown keeps two gangs from looking the same."""
    if uid and gang.startswith(uid):
        return uid[:width] + gang[len(uid) :]
    return gang[:width]


def _job_cell(entry: Mapping[str, Any], *, kind: bool) -> str:
    job = entry.get("job") or {}
    if not job:
        return "-"
    return f"{job.get('kind', '')}/{job.get('name', '')}" if kind else str(job.get("name") or "-")


#: The table's columns: short enough for 80 columns (AGE, not the time; the job's name, not its
#: kind; the reason without the releaser's action); ``-o wide`` adds the rest.
COLUMNS = ("age", "namespace", "pod", "job", "outcome", "zone", "reason")
WIDE_COLUMNS = (
    "age",
    "namespace",
    "pod",
    "job",
    "role",
    "outcome",
    "zone",
    "reason",
    "time",
    "gang",
    "user",
    "ms",
    "detail",
)


def columns(*, wide: bool = False, namespace: bool = True) -> tuple[str, ...]:
    """The table's columns; without NAMESPACE when ``-n`` chose one (as kubectl shows it only
    for ``--all-namespaces``)."""
    chosen = WIDE_COLUMNS if wide else COLUMNS
    return chosen if namespace else tuple(c for c in chosen if c != "namespace")


def row(
    entry: Mapping[str, Any],
    *,
    wide: bool = False,
    utc: bool = True,
    gang_width: int = SHORT_UID,
    now: datetime | None = None,
    namespace: bool = True,
) -> list[str]:
    """One entry as the table's cells (``columns(wide=wide, namespace=namespace)``, its gang
    cut to ``gang_width`` characters of the UID, its AGE as of ``now``)."""
    role = str(entry.get("role") or "")
    if entry.get("coordinator"):
        role += " *"
    outcome = str(entry.get("outcome") or "")
    if entry.get("warnings"):
        outcome += " !"
    if entry.get("dryRun"):
        outcome += " ~"
    if entry.get("shadow"):
        outcome += " ^"
    reason = str(entry.get("reason") or "")
    if wide and entry.get("action"):
        reason += f" ({entry['action']}: {entry.get('result', '')})"
    moment = time_of(entry)
    job = entry.get("job") or {}
    detail = [str(entry.get("detail") or "")] + [
        f"warning: {w}" for w in entry.get("warnings") or []
    ]
    cells = {
        "age": output.age(moment, now or datetime.now(UTC)),
        "namespace": str(entry.get("namespace") or ""),
        "pod": str(entry.get("pod") or "-"),
        "job": _job_cell(entry, kind=wide),
        "role": role or "-",
        "outcome": outcome,
        "zone": str(entry.get("zone") or "-"),
        "reason": reason or "-",
        "time": format_time(moment, utc=utc, precise=True),
        "gang": short_gang(str(job.get("gang") or ""), str(job.get("uid") or ""), width=gang_width)
        if job
        else "-",
        "user": str(entry.get("user") or "-"),
        "ms": f"{float(entry.get('latencyMs') or 0):.1f}",
        "detail": "\n".join(d for d in detail if d),
    }
    return [cells[c] for c in columns(wide=wide, namespace=namespace)]


def table(
    entries: Sequence[Mapping[str, Any]],
    *,
    wide: bool = False,
    utc: bool = True,
    plain: bool = False,
    now: datetime | None = None,
    namespace: bool = True,
) -> Table:
    out = output.table(f"podium admissions ({len(entries)})", plain=plain)
    width = uid_width(str((e.get("job") or {}).get("uid") or "") for e in entries)
    for column in columns(wide=wide, namespace=namespace):
        # Short values never wrap; names fold when the terminal is narrow.
        short = column in ("age", "time", "role", "outcome", "zone", "ms")
        out.add_column(column.upper() if plain else column, overflow="fold", no_wrap=short)
    moment = now or datetime.now(UTC)
    for entry in entries:
        out.add_row(
            *row(entry, wide=wide, utc=utc, gang_width=width, now=moment, namespace=namespace)
        )
    return out


#: A gang's verdict in the table (``-o wide``: ``VERDICT_TEXT``'s sentence).
VERDICT_WORD = {
    SPLIT: "SPLIT",
    CHECK: "check",
    NO_ROOM: "no-room",
    HELD: "held",
    TOO_BIG: "too-big",
    OK: "ok",
}
VERDICT_TEXT = {
    SPLIT: "SPLIT across zones",
    CHECK: "check: not every pod pinned",
    NO_ROOM: "check: pinned without room (podium doctor: are its pods Pending?)",
    HELD: "held: waiting for one zone with room (podium doctor says why)",
    TOO_BIG: "held: no zone can ever hold it, an admin must act (podium doctor: the ways out)",
    OK: "ok",
}


def summary(
    entries: Iterable[Mapping[str, Any]] | Summary,
    *,
    wide: bool = False,
    plain: bool = False,
    namespace: bool = True,
) -> Table:
    """Per gang: admissions, the zones they were pinned to (more than one: SPLIT), the verdict;
    ``wide`` adds the outcomes and says each verdict in a sentence."""
    grouped = entries if isinstance(entries, Summary) else summarize(entries)
    gangs = grouped.gangs
    width = uid_width(g.uid for g in gangs)
    out = output.table(f"per job ({len(gangs)})", plain=plain)
    names = ["namespace"] if namespace else []
    names += ["job", "gang", "admitted", "zones", *(["outcomes"] if wide else []), "verdict"]
    for column in names:
        out.add_column(column.upper() if plain else column, overflow="fold")
    for g in gangs:
        if wide:  # how many admissions each zone took
            zones = ", ".join(f"{z} ({n})" for z, n in sorted(g.zones.items())) or "-"
        else:  # one word, as kubectl lists (a split gang's zones stay on one line)
            zones = ",".join(sorted(g.zones)) or "-"
        outcomes = ", ".join(f"{o} ({n})" for o, n in sorted(g.outcomes.items()))
        extra = [f"{g.reconciled} reconciled"] if g.reconciled else []
        extra += [f"{g.dry_runs} dry run"] if g.dry_runs else []
        extra += [f"{g.shadows} shadow"] if g.shadows else []
        verdict = (VERDICT_TEXT if wide else VERDICT_WORD)[g.verdict]
        if g.verdict == SPLIT and not plain:
            verdict = f"[red]{verdict}[/]"
        out.add_row(
            *([g.namespace] if namespace else []),
            g.job,
            g.gang if wide else short_gang(g.gang, g.uid, width=width),
            str(g.admissions),
            zones,
            *([", ".join([outcomes, *extra] if outcomes else extra) or "-"] if wide else []),
            verdict,
        )
    return out


def legend(
    entries: Iterable[Mapping[str, Any]],
    summary: Summary | None = None,
    *,
    wide: bool = True,
) -> str | None:
    """What the markers that appear in the table mean, one a line (the coordinator's only
    ``wide``, where ROLE shows it), and what the verdicts of ``summary`` other than ``ok`` mean
    when the table says them in a word; None when there is nothing to explain."""
    used: set[str] = set()
    for entry in entries:
        used |= {"*"} if entry.get("coordinator") and wide else set()
        used |= {"!"} if entry.get("warnings") else set()
        used |= {"~"} if entry.get("dryRun") else set()
        used |= {"^"} if entry.get("shadow") else set()
    lines = [f"{m} {text}" for m, text in MARKERS.items() if m in used]
    if summary is not None and not wide:
        verdicts = {g.verdict for g in summary.gangs} - {OK}
        lines += [VERDICT_TEXT[v] for v in (CHECK, NO_ROOM, HELD) if v in verdicts]
        lines += ["SPLIT: its pods were pinned to more than one zone"] if SPLIT in verdicts else []
    return "\n".join(lines) or None


def stream_header(*, wide: bool = False, namespace: bool = True) -> str:
    names = columns(wide=wide, namespace=namespace)
    return "  ".join(c.upper().ljust(_WIDTHS[c]) for c in names).rstrip()


def stream_line(
    entry: Mapping[str, Any], *, wide: bool = False, utc: bool = True, namespace: bool = True
) -> str:
    """One entry on one line, in the table's columns, for ``--follow``."""
    cells = [c.replace("\n", "; ") for c in row(entry, wide=wide, utc=utc, namespace=namespace)]
    names = columns(wide=wide, namespace=namespace)
    return "  ".join(c.ljust(_WIDTHS[n]) for c, n in zip(cells, names, strict=True)).rstrip()


#: Column widths of ``--follow``'s lines (wider cells push the rest of their line right): the
#: default columns fit 80 with names of everyday length.
_WIDTHS = {
    "age": 4,
    "namespace": 10,
    "pod": 20,
    "job": 10,
    "role": 10,
    "outcome": 9,
    "zone": 7,
    "reason": 12,
    "time": 27,
    "gang": 11,
    "user": 16,
    "ms": 7,
    "detail": 0,
}
