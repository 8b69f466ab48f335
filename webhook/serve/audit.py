"""The audit trail: one JSON line per admission, where it goes, and how people read it back.

``build`` is pure (a decision plus what happened → a record); sinks write records; ``read``,
``matches``, ``table`` and ``summary`` serve ``podium audit``.
"""

from __future__ import annotations

import collections
import json
import logging
import sys
import threading
import time as clock
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Protocol

import orjson
from rich.table import Table

from webhook.core.engine import Decision
from webhook.core.reviews import Request

log = logging.getLogger("podium.audit")

AuditRecord = dict[str, Any]

#: Marks podium's lines among other log lines (e.g. in ``kubectl logs``).
MARKER = "podium.audit/v1"


def build(
    *,
    request: Request | None,
    decision: Decision | None,
    time: datetime,
    latency_ms: float,
    outcome: str | None = None,
    reason: str | None = None,
    detail: str | None = None,
    effects: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[str] = (),
    error: str | None = None,
) -> AuditRecord:
    """One admission's record. ``outcome``/``reason`` override the decision's (e.g. fail-open)."""
    pod = (request.object if request else None) or {}
    meta: Mapping[str, Any] = pod.get("metadata") or {}
    gang = decision.gang if decision else None
    record: AuditRecord = {
        "audit": MARKER,
        "time": time.isoformat(timespec="milliseconds"),
        "requestUID": request.uid if request else "",
        "operation": request.operation if request else "",
        "namespace": (decision.namespace if decision else "")
        or (request.namespace if request else ""),
        "pod": meta.get("name") or meta.get("generateName") or (request.name if request else ""),
        "user": (request.user.get("username", "") if request else ""),
        "outcome": outcome or (decision.outcome if decision else "error"),
        "reason": reason or (decision.reason if decision else "error"),
        "detail": detail if detail is not None else (decision.detail if decision else ""),
        "job": None,
        "role": None,
        "coordinator": None,
        "zone": decision.zone if decision and not outcome else None,
        "capacity": [c.as_dict() for c in decision.capacity] if decision else [],
        "patch": _patch_summary(decision.patch if decision and not outcome else []),
        "effects": list(effects),
        "warnings": list(warnings),
        "dryRun": bool(request and request.dry_run),
        "latencyMs": round(latency_ms, 3),
    }
    if gang is not None:
        record["job"] = {
            "framework": gang.framework,
            "apiVersion": gang.owner.api_version,
            "kind": gang.owner.kind,
            "name": gang.owner.name,
            "uid": gang.owner.uid,
            "gang": gang.key,
            "demand": gang.total,
            "demandSource": gang.demand_source,
        }
        record["role"] = gang.role
        record["coordinator"] = gang.coordinator
    if error:
        record["error"] = error
    return record


def _patch_summary(patch: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"ops": len(patch), "paths": sorted({str(op.get("path", "")) for op in patch})}


def dumps(record: AuditRecord) -> bytes:
    """orjson, or the stdlib for what orjson refuses (integers past 64 bits in a silly request)."""
    try:
        return orjson.dumps(record)
    except TypeError:
        return json.dumps(record, default=str).encode()


class Sink(Protocol):
    def write(self, record: AuditRecord) -> None: ...

    def write_lines(self, data: bytes) -> None:
        """Write records already serialized: JSON lines (``line``), each ending in a newline."""
        ...


def line(record: AuditRecord) -> bytes:
    return dumps(record) + b"\n"


class LineSink:
    """A sink whose one way of writing is ``write_lines``: a record is written as its line."""

    def write(self, record: AuditRecord) -> None:
        self.write_lines(line(record))

    def write_lines(self, data: bytes) -> None:
        raise NotImplementedError


class StreamSink(LineSink):
    """JSON lines to a stream (stdout by default), one write per call: lines never interleave."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write_lines(self, data: bytes) -> None:
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(data.decode())
            stream.flush()


class FileSink(LineSink):
    """Appends JSON lines to a file (opened per call: survives log rotation by rename)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write_lines(self, data: bytes) -> None:
        with self._lock, self.path.open("ab") as fh:
            fh.write(data)


class MemorySink:
    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    def write(self, record: AuditRecord) -> None:
        self.records.append(record)

    def write_lines(self, data: bytes) -> None:
        self.records.extend(orjson.loads(text) for text in data.splitlines())


class FanOut(LineSink):
    def __init__(self, sinks: Iterable[Sink]) -> None:
        self.sinks = tuple(sinks)

    def write_lines(self, data: bytes) -> None:
        """Every sink gets the lines even when another one fails; the first failure is raised."""
        failure: Exception | None = None
        for sink in self.sinks:
            try:
                sink.write_lines(data)
            except Exception as err:
                failure = failure or err
        if failure is not None:
            raise failure


#: Records waiting for the writer thread; beyond this, new records are dropped and counted.
BACKLOG = 10_000
#: Seconds between the writer thread's rounds. Waking it for every record instead costs an
#: admission more than the write itself (a thread switch per admission; docs/benchmarks).
INTERVAL = 0.05
#: At most one log line per this many seconds says how many records were dropped.
DROP_LOG_SECONDS = 10.0


class BackgroundSink(LineSink):
    """Hands records to a writer thread, so that no admission waits for stdout or a disk.

    ``podium serve`` writes audit lines to stdout, a pipe the container runtime drains; when it
    stops draining, a direct write blocks the event loop and every admission behind it until the
    apiserver gives up (fail open, *without* an audit line). Here ``write`` serializes the record
    and appends the line to a bounded backlog; every ``interval`` seconds the thread writes what
    has gathered in one batch (one ``write`` and one flush for many records under load). A full
    backlog drops the new record, calls ``on_drop`` (``podium_audit_dropped``) and says so on
    stderr at most every ``DROP_LOG_SECONDS``, as the apiserver's own buffered audit backend
    does. ``close`` writes what is left.
    """

    def __init__(
        self,
        inner: Sink,
        *,
        backlog: int = BACKLOG,
        interval: float = INTERVAL,
        on_drop: Callable[[], None] = lambda: None,
    ) -> None:
        self._inner = inner
        self._interval = interval
        self._backlog = backlog
        self._on_drop = on_drop
        self._queue: collections.deque[bytes] = collections.deque()
        self._wake = threading.Condition()
        self._closed = False
        self._dropped = 0
        self._drop_logged = float("-inf")
        self._thread = threading.Thread(target=self._run, name="podium-audit", daemon=True)
        self._thread.start()

    def write_lines(self, data: bytes) -> None:
        # ``write`` serializes here, a little at every admission, rather than a whole batch at
        # once in the thread while it holds the GIL.
        if self._closed:  # nothing left to hand it to: write it here
            self._inner.write_lines(data)
        elif len(self._queue) >= self._backlog:
            self._drop()
        else:  # no wake-up: the thread comes by every ``interval`` seconds
            self._queue.append(data)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (waiting at most ``timeout`` seconds) and stop the thread."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error(
                "audit writer still busy after %.0f s; %d records unwritten",
                timeout,
                len(self._queue),
            )

    def _drop(self) -> None:
        self._dropped += 1
        self._on_drop()
        now = clock.monotonic()
        if now - self._drop_logged >= DROP_LOG_SECONDS:
            log.error(
                "the audit backlog of %d records is full: %d record(s) dropped since the last "
                "report; is stdout (or the audit file) being read?",
                self._backlog,
                self._dropped,
            )
            self._drop_logged = now
            self._dropped = 0

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._closed:
                    self._wake.wait(self._interval)
                if self._closed and not self._queue:
                    return
            if not self._queue:
                continue
            batch = [self._queue.popleft() for _ in range(len(self._queue))]
            try:
                self._inner.write_lines(b"".join(batch))
            except Exception:  # the thread must outlive a failed write
                log.exception("audit sink failed; %d records lost", len(batch))


# -- reading back --------------------------------------------------------------------------------


def read(lines: Iterable[str]) -> Iterator[AuditRecord]:
    """podium's audit records among arbitrary log lines (other lines and broken JSON are skipped).

    Lines may carry a prefix such as ``kubectl logs --prefix`` adds; the record starts at the
    first ``{``.
    """
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        try:
            doc = orjson.loads(line[start:])
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict) and doc.get("audit") == MARKER:
            yield doc


def _job_name(record: Mapping[str, Any]) -> str:
    job = record.get("job") or {}
    return f"{job.get('kind', '')}/{job.get('name', '')}" if job else ""


def matches(
    record: Mapping[str, Any],
    *,
    namespace: str | None = None,
    job: str | None = None,
    zone: str | None = None,
    outcome: str | None = None,
    reason: str | None = None,
) -> bool:
    """Filters for ``podium audit``; ``job`` matches the name or ``Kind/name``."""
    if namespace and record.get("namespace") != namespace:
        return False
    if job:
        name = _job_name(record)
        if job not in (name, name.split("/", 1)[-1]):
            return False
    if zone and record.get("zone") != zone:
        return False
    if outcome and record.get("outcome") != outcome:
        return False
    return not (reason and record.get("reason") != reason)


def table(records: Sequence[Mapping[str, Any]]) -> Table:
    out = Table(title=f"podium admissions ({len(records)})", expand=False)
    for column in ("time", "namespace", "pod", "job", "role", "outcome", "zone", "reason", "ms"):
        out.add_column(column, overflow="fold")
    for r in records:
        role = str(r.get("role") or "")
        if r.get("coordinator"):
            role += " *"
        out.add_row(
            str(r.get("time", ""))[11:23],
            str(r.get("namespace", "")),
            str(r.get("pod", "")),
            _job_name(r),
            role,
            str(r.get("outcome", "")) + (" (dry run)" if r.get("dryRun") else ""),
            str(r.get("zone") or "-"),
            str(r.get("reason", "")),
            f"{float(r.get('latencyMs') or 0):.1f}",
        )
    return out


def summary(records: Sequence[Mapping[str, Any]]) -> Table:
    """Per job: pods admitted, the zones they were pinned to (more than one is a red flag)."""
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        if not r.get("job"):
            continue
        key = (str(r.get("namespace", "")), _job_name(r))
        entry = jobs.setdefault(key, {"pods": 0, "zones": set(), "outcomes": set(), "warnings": 0})
        entry["pods"] += 1
        if r.get("zone"):
            entry["zones"].add(r["zone"])
        entry["outcomes"].add(str(r.get("outcome", "")))
        entry["warnings"] += len(r.get("warnings") or [])
    out = Table(title=f"per job ({len(jobs)})")
    for column in ("namespace", "job", "pods", "zones", "outcomes", "warnings", "verdict"):
        out.add_column(column)
    for (ns, name), e in sorted(jobs.items()):
        zones = sorted(e["zones"])
        verdict = "ok"
        if len(zones) > 1:
            verdict = "SPLIT across zones"
        elif e["outcomes"] - {"pinned"}:
            verdict = "check: not every pod pinned"
        out.add_row(
            ns,
            name,
            str(e["pods"]),
            ", ".join(zones) or "-",
            ", ".join(sorted(e["outcomes"])),
            str(e["warnings"]),
            verdict,
        )
    return out
