"""``podium audit``: podium's audit records read back from log lines, filtered, and shown as a
table and a per-job summary."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson
from rich.table import Table

from webhook.serve.audit import MARKER, AuditRecord


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
            yield doc  # type: ignore[misc]


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
