"""``podium report``: what enforcing podium would have saved, from a shadow audit trail and the
live cluster.

In shadow mode podium decides every training pod as it would enforce it and audits the decision
(``shadow: true``) but admits the pod unchanged, so kube-scheduler places it by free room alone.
This report puts the two side by side, per job:

* the zone podium would have chosen — the job's *first* shadow decision, as the decision record
  written by that admission would have made every later pod follow it (later shadow decisions
  see no record, and follow the pods already placed instead);
* the zones the job's pods actually run (or ran) in, from their nodes' zone labels;
* the verdict: ``split`` when they run in more than one zone where podium would have kept them
  in one (pinned, held for a zone, or grouped for kube-scheduler); ``split-anyway`` when podium
  would not have either (no zone fits and ``no-fit: unpinned``); ``one-zone``; ``not-bound``
  (no pod on a node yet); ``gone`` (no pod of the job left to look at);
* the GPU-hours its pods held: each bound pod's request of ``primary-resource`` times the time
  from its binding (else its start) to its end (deleted, finished) or now;

and per namespace the jobs, the split ones and the GPU-hours split jobs held, namespaces that
would gain most first. Pods are matched to jobs by the same framework adapters admission uses,
so a job's pods are found whatever their names.

``build`` is pure — entries and objects in, a ``Report`` out; ``collect`` lists the cluster.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table

from webhook.core import adapters, resources
from webhook.core.objects import Obj, labels_of, metadata_of, name_of, namespace_of, parse_time
from webhook.core.settings import Settings
from webhook.core.view import TERMINAL_PHASES, ClusterView
from webhook.kube import errors
from webhook.ops import auditview, output

if TYPE_CHECKING:
    from webhook.kube import protocols

#: The outcomes of a decision about where a gang goes (the others skip or refuse the pod).
DECIDING = frozenset({"pinned", "unpinned", "grouped", "held"})
#: Those that keep the gang in one zone: pinned to it, held until one zone has room for all of
#: it, or grouped for kube-scheduler's topology constraint.
KEEPS_TOGETHER = frozenset({"pinned", "grouped", "held"})

SPLIT, SPLIT_ANYWAY, ONE_ZONE, NOT_BOUND, GONE = (
    "split",
    "split-anyway",
    "one-zone",
    "not-bound",
    "gone",
)
VERDICTS: Mapping[str, str] = {
    SPLIT: "SPLIT: podium would have kept it in one zone",
    SPLIT_ANYWAY: "split, as podium would have left it (no zone fits)",
    ONE_ZONE: "ran in one zone",
    NOT_BOUND: "no pod on a node yet",
    GONE: "no pod left to look at",
}
_EPOCH = datetime.min.replace(tzinfo=UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class Intent:
    """What podium decided in shadow for one job (its first deciding entry)."""

    namespace: str
    gang: str
    kind: str
    name: str
    uid: str
    outcome: str
    reason: str
    zone: str | None
    decided: datetime | None

    @property
    def job(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def keeps_together(self) -> bool:
        return self.outcome in KEEPS_TOGETHER


def intents(entries: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Intent]:
    """Per (namespace, gang): the job's first shadow decision. Entries that are not shadow
    decisions (enforce mode, dry runs, skips, the reconciler's) are left out."""
    deciding = [
        e
        for e in entries
        if e.get("shadow") and e.get("outcome") in DECIDING and not e.get("dryRun")
    ]
    out: dict[tuple[str, str], Intent] = {}
    for entry in sorted(deciding, key=lambda e: auditview.time_of(e) or _EPOCH):
        job = entry.get("job") or {}
        gang, namespace = str(job.get("gang") or ""), str(entry.get("namespace") or "")
        if not gang or (namespace, gang) in out:
            continue
        out[(namespace, gang)] = Intent(
            namespace=namespace,
            gang=gang,
            kind=str(job.get("kind") or ""),
            name=str(job.get("name") or ""),
            uid=str(job.get("uid") or ""),
            outcome=str(entry["outcome"]),
            reason=str(entry.get("reason") or ""),
            zone=str(entry.get("zone") or "") or None,
            decided=auditview.time_of(entry),
        )
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class PodRun:
    """One pod of a job: where it ran, what it held, and from when to when."""

    name: str
    #: None: not bound to a node, or its node is gone or has no zone label.
    zone: str | None
    gpus: int
    start: datetime | None
    #: None: still running.
    end: datetime | None

    def gpu_hours(self, now: datetime) -> float:
        if self.start is None or self.zone is None:
            return 0.0
        seconds = ((self.end or now) - self.start).total_seconds()
        return self.gpus * max(seconds, 0.0) / 3600


def pod_run(pod: Obj, zones: Mapping[str, str], primary: str) -> PodRun:
    """A pod as the report counts it: its node's zone, its request of ``primary``, bound (the
    PodScheduled condition, else the pod's start) until deleted, finished or now."""
    meta: Mapping[str, Any] = metadata_of(pod)
    spec: Mapping[str, Any] = pod.get("spec") or {}
    status: Mapping[str, Any] = pod.get("status") or {}
    node = str(spec.get("nodeName") or "")
    conditions = {str(c.get("type")): c for c in status.get("conditions") or [] if c}
    scheduled = conditions.get("PodScheduled") or {}
    start = None
    if node:
        bound = scheduled.get("status") == "True" and scheduled.get("lastTransitionTime")
        start = parse_time(bound or status.get("startTime"))
    end = parse_time(meta.get("deletionTimestamp"))
    if end is None and status.get("phase") in TERMINAL_PHASES:
        finished = [
            t
            for cs in status.get("containerStatuses") or []
            if (
                t := parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            )
        ]
        end = max(finished, default=None) or parse_time(
            (conditions.get("Ready") or {}).get("lastTransitionTime")
        )
    return PodRun(
        name=str(meta.get("name") or ""),
        zone=zones.get(node) if node else None,
        gpus=resources.pod_requests(spec).get(primary, 0),
        start=start,
        end=end,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class JobReport:
    intent: Intent
    pods: tuple[PodRun, ...]
    gpu_hours: float

    @property
    def zones(self) -> dict[str, int]:
        """Pods per zone they are bound in."""
        return dict(sorted(collections.Counter(p.zone for p in self.pods if p.zone).items()))

    @property
    def verdict(self) -> str:
        if not self.pods:
            return GONE
        zones = self.zones
        if not zones:
            return NOT_BOUND
        if len(zones) > 1:
            return SPLIT if self.intent.keeps_together else SPLIT_ANYWAY
        return ONE_ZONE

    def as_dict(self) -> dict[str, Any]:
        i = self.intent
        return {
            "namespace": i.namespace,
            "job": {"kind": i.kind, "name": i.name, "uid": i.uid},
            "gang": i.gang,
            "podium": {"outcome": i.outcome, "zone": i.zone, "reason": i.reason},
            "decidedAt": i.decided.isoformat() if i.decided else None,
            "pods": len(self.pods),
            "zones": self.zones,
            "split": self.verdict == SPLIT,
            "verdict": self.verdict,
            "gpuHours": round(self.gpu_hours, 4),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class NamespaceTotal:
    namespace: str
    jobs: int
    split: int
    #: GPU-hours held by the namespace's split jobs: what enforcing podium would keep together.
    split_gpu_hours: float
    gpu_hours: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "jobs": self.jobs,
            "split": self.split,
            "splitGpuHours": round(self.split_gpu_hours, 4),
            "gpuHours": round(self.gpu_hours, 4),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    jobs: tuple[JobReport, ...]
    namespaces: tuple[NamespaceTotal, ...]
    resource: str
    now: datetime

    @property
    def split(self) -> list[JobReport]:
        return [j for j in self.jobs if j.verdict == SPLIT]

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.now.isoformat(timespec="seconds"),
            "resource": self.resource,
            "jobs": [j.as_dict() for j in self.jobs],
            "namespaces": [n.as_dict() for n in self.namespaces],
            "split": len(self.split),
            "splitGpuHours": round(sum(n.split_gpu_hours for n in self.namespaces), 4),
        }


def build(
    entries: Iterable[Mapping[str, Any]],
    objects: Iterable[Obj],
    settings: Settings,
    *,
    now: datetime,
) -> Report:
    """The report from the audit entries and the cluster's Nodes, Pods and job objects."""
    wanted = intents(entries)
    everything = list(objects)
    view = ClusterView.from_objects(everything, zone_label=settings.zone_label, kept=adapters.KEPT)
    zones = {
        name_of(o): str(zone)
        for o in everything
        if o.get("kind") == "Node" and (zone := labels_of(o).get(settings.zone_label))
    }
    runs: dict[tuple[str, str], list[PodRun]] = collections.defaultdict(list)
    namespaces = {ns for ns, _ in wanted}
    for pod in everything:
        namespace = namespace_of(pod)
        if pod.get("kind") != "Pod" or namespace not in namespaces:
            continue
        gang = adapters.recognise(pod, namespace, view)
        if gang is not None and (namespace, gang.key) in wanted:
            runs[(namespace, gang.key)].append(pod_run(pod, zones, settings.primary_resource))
    jobs = [
        JobReport(
            intent,
            tuple(sorted(runs[key], key=lambda p: p.name)),
            sum(p.gpu_hours(now) for p in runs[key]),
        )
        for key, intent in wanted.items()
    ]
    jobs.sort(key=lambda j: (j.intent.namespace, j.intent.job, j.intent.gang))
    return Report(tuple(jobs), _totals(jobs), settings.primary_resource, now)


def _totals(jobs: Sequence[JobReport]) -> tuple[NamespaceTotal, ...]:
    """Per namespace, those whose split jobs held the most GPU-hours first."""
    by_namespace: dict[str, list[JobReport]] = collections.defaultdict(list)
    for job in jobs:
        by_namespace[job.intent.namespace].append(job)
    totals = [
        NamespaceTotal(
            namespace=namespace,
            jobs=len(found),
            split=sum(1 for j in found if j.verdict == SPLIT),
            split_gpu_hours=sum(j.gpu_hours for j in found if j.verdict == SPLIT),
            gpu_hours=sum(j.gpu_hours for j in found),
        )
        for namespace, found in by_namespace.items()
    ]
    totals.sort(key=lambda t: (-t.split_gpu_hours, -t.split, t.namespace))
    return tuple(totals)


# -- presentation ------------------------------------------------------------------------------


def jobs_table(report: Report, *, plain: bool, wide: bool = True) -> Table:
    """Per job; with ``wide`` the outcome beside podium's zone, the pods per zone they ran in and
    the verdict in a sentence; else a word each (``zone-b``, ``zone-a,zone-b``, ``SPLIT``), which
    fits 80 columns."""
    out = output.table(f"per job ({len(report.jobs)})", plain=plain)
    for column in ("namespace", "job", "podium", "ran in", "GPU-h", "verdict"):
        out.add_column(column.upper() if plain else column, overflow="fold")
    for job in report.jobs:
        i = job.intent
        if wide:  # the outcome beside the zone, the pods per zone
            podium = f"{i.zone} ({i.outcome})" if i.zone else i.outcome
            ran = ", ".join(f"{z} ({n})" for z, n in job.zones.items()) or "-"
        else:  # one word each, as kubectl lists, so that a row stays on one line
            podium = i.zone or i.outcome
            ran = ",".join(job.zones) or "-"
        verdict = (
            VERDICTS[job.verdict] if wide else ("SPLIT" if job.verdict == SPLIT else job.verdict)
        )
        if job.verdict == SPLIT and not plain:
            verdict = f"[red]{verdict}[/]"
        out.add_row(i.namespace, i.job, podium, ran, f"{job.gpu_hours:.2f}", verdict)
    return out


def namespaces_table(report: Report, *, plain: bool) -> Table:
    out = output.table("per namespace, most to gain first", plain=plain)
    for column in ("namespace", "jobs", "split", "GPU-h split", "GPU-h all"):
        out.add_column(column.upper() if plain else column, overflow="fold")
    for total in report.namespaces:
        out.add_row(
            total.namespace,
            str(total.jobs),
            str(total.split),
            f"{total.split_gpu_hours:.2f}",
            f"{total.gpu_hours:.2f}",
        )
    return out


# -- reading the cluster -------------------------------------------------------------------------


async def collect(api: protocols.Objects, namespaces: Sequence[str]) -> list[Obj]:
    """The Nodes, and in ``namespaces`` the Pods and the job objects the adapters read (kinds
    whose CRD is not installed are skipped), whole: the report reads the pods' status."""
    out: list[Obj] = [
        {**n, "apiVersion": "v1", "kind": "Node"} for n in await api.list("v1", "Node")
    ]
    kinds = [("v1", "Pod"), *((k.api_version, k.kind) for k in adapters.KINDS if k.namespaced)]
    for api_version, kind in kinds:
        for namespace in namespaces:
            try:
                found = await api.list(api_version, kind, namespace=namespace)
            except errors.NotFound:
                break  # the CRD is not installed
            out += [{**o, "apiVersion": api_version, "kind": kind} for o in found]
    return out
