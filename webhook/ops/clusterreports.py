"""``podium report --from-cluster``: podium's Reports (``openreports.io``, one per opted-in
namespace, written by the leader: ``webhook.core.reports``) read back from the cluster, for when
podium's logs are gone. One row per job: the namespace, its mode, the job, the result (``fail``:
its pods run in more than one zone), the zones its pods run in and how long ago it was decided;
``-o wide`` adds the rule and the sentence."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table

from webhook.core import reports
from webhook.core.objects import Obj
from webhook.ops import output

if TYPE_CHECKING:
    from webhook.kube import protocols


async def collect(api: protocols.Objects, namespace: str | None) -> list[Obj]:
    """podium's Reports in ``namespace`` (None: every namespace). ``NotFound``: the apiserver
    serves no Report (the CRD is not installed)."""
    found = await api.list(
        reports.API_VERSION, reports.KIND, namespace=namespace, label_selector=reports.selector()
    )
    return sorted(found, key=lambda o: str((o.get("metadata") or {}).get("namespace") or ""))


def as_dict(rows: Sequence[reports.Row]) -> dict[str, Any]:
    summary = collections.Counter(r.result for r in rows)
    return {
        "results": [
            {
                "namespace": r.namespace,
                "mode": r.mode,
                "job": r.job,
                "result": r.result,
                "rule": r.rule,
                "zones": r.zones,
                "message": r.message,
                "decidedAt": r.decided.isoformat() if r.decided else None,
            }
            for r in rows
        ],
        "summary": {result: summary.get(result, 0) for result in reports.RESULTS},
    }


def table(rows: Sequence[reports.Row], *, plain: bool, wide: bool, now: datetime) -> Table:
    """One row per job; ``wide`` adds the rule and the message."""
    out = output.table(f"podium's Reports ({len(rows)} jobs)", plain=plain)
    columns = ["namespace", "mode", "job", "result", "zones", "age"]
    if wide:
        columns += ["rule", "message"]
    for column in columns:
        out.add_column(column.upper() if plain else column, overflow="fold")
    for row in rows:
        result = row.result
        if result == "fail" and not plain:
            result = f"[red]{result}[/]"
        cells = [
            row.namespace,
            row.mode,
            row.job,
            result,
            row.zones.replace("=", ":").replace(",", ", ") or "-",  # wraps between zones
            output.age(row.decided, now),
        ]
        if wide:
            cells += [row.rule, row.message]
        out.add_row(*cells)
    return out
