"""podium's decisions as Open Reports (``openreports.io/v1alpha1`` ``Report``, the successor of
the Policy WG's ``wgpolicyk8s.io`` PolicyReport, which Policy Reporter shows as it shows those):
one Report named ``podium`` per opted-in namespace that has a job, one result per job, built
from the cluster view alone. Pure: ``build`` is ``(view, settings) → {namespace: Report}``; the
elected replica writes them (``webhook.serve.reports``), only when a body changed.

Why from the view and not from the admissions: a shadow decision is made by whichever replica
the apiserver called and lives only in that replica's audit log; the leader sees every pod, its
node's zone, and podium's records and policies. So each result says what the cluster shows now:

* ``enforce`` namespaces, per job (the gangs whose pods carry ``podium.dev/job``, and those
  recognised by the framework adapters that podium did not admit): ``fail`` when its pods run in
  more than one zone (``split``) but for a gang spread on purpose (``warn``, ``spread``);
  ``warn`` when some of its pods were admitted without podium (failed open, podium down, or
  created before the namespace opted in: ``not-admitted``) or it was released into no zone
  (``unpinned``); ``skip`` while it is held behind podium's gate (``held``) or none of its pods is
  on a node (``not-bound``) or is annotated ``podium.dev/skip=true`` (``skipped``, in shadow
  namespaces too); else ``pass`` (``one-zone``) with the zone, the record's reason and the
  policies podium wrote;
* ``shadow`` namespaces, per job the adapters recognise: ``fail`` when its pods run in more than
  one zone where podium would have kept the gang in one (``would-keep-together``), ``pass`` when
  they run in one zone anyway, ``skip`` when none is on a node yet.

Bounded: at most ``report-max-results`` results, the most recent decisions kept (a record's
``decidedAt``, else the job's creation); ``summary`` counts exactly the results kept. No field
changes unless the cluster did (no "now" anywhere), so an unchanged cluster writes nothing.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from webhook.core import adapters, labels, podgroups, policies, records, spread
from webhook.core.adapters.base import Gang
from webhook.core.objects import (
    Obj,
    group_of,
    labels_of,
    metadata_of,
    namespace_of,
    parse_time,
)
from webhook.core.policies import Manifest
from webhook.core.settings import Mode, Settings
from webhook.core.view import PodSummary, View

API_VERSION = "openreports.io/v1alpha1"
KIND = "Report"
PLURAL = "reports"
#: The one Report podium writes per namespace.
NAME = "podium"
SOURCE = "podium"
#: The check every result is about: a job's pods in one zone.
POLICY = "podium-one-zone"
CATEGORY = "zone placement"
#: ``app.kubernetes.io/component``-like label podium's objects carry (``labels.COMPONENT``).
COMPONENT = "report"
#: The namespace's mode, as a label of its Report (``kubectl get reports -l podium.dev/mode=…``).
MODE_LABEL = labels.PREFIX + "mode"

Result = Literal["pass", "fail", "warn", "error", "skip"]
RESULTS: tuple[Result, ...] = ("pass", "fail", "warn", "error", "skip")
_SEVERITY: Mapping[str, str] = {"fail": "high", "error": "high", "warn": "medium"}
_EPOCH = datetime.min.replace(tzinfo=UTC)


#: The controllers an adapter starts from (each recognises a pod by its controller
#: ownerReference): a pod controlled by anything else (a ReplicaSet, a DaemonSet) or by nothing
#: is no job's, and costs no adapter call.
_ENTRY = frozenset((group_of(k.api_version), k.kind) for k in adapters.KINDS)

#: How a pod's gang is found: ``adapters.recognise`` on the pod as the view holds it. The server
#: hands a memo of it (``webhook.serve.reports``), so that a pass recognises only the pods that
#: changed since the last.
Recognise = Callable[[PodSummary, str, View], Gang | None]


def recognise(pod: PodSummary, namespace: str, view: View) -> Gang | None:
    """The pod's gang, as admission would find it; None for a pod no adapter's controller owns."""
    controller = pod.controller
    if controller is None or (group_of(controller[0]), controller[1]) not in _ENTRY:
        return None
    return adapters.recognise(pod.as_object(), namespace, view)


class ReportView(View, Protocol):
    """What the builder reads: the decisions' ``View`` and the objects of one kind (the
    namespaces, podium's records and policies), as ``ClusterView`` answers."""

    def objects_of(self, api_version: str, kind: str) -> Iterator[Obj]: ...


@dataclasses.dataclass(slots=True)
class _Job:
    """What the view shows of one gang in one namespace."""

    gang: str
    pods: list[PodSummary] = dataclasses.field(default_factory=list)
    #: Pods carrying podium's trusted label: podium admitted them.
    admitted: int = 0
    #: Recognised by an adapter: the job's identity and kind.
    owner: Mapping[str, str] | None = None
    record: records.Record | None = None
    record_job: str = ""
    record_uid: str = ""
    policies: list[str] = dataclasses.field(default_factory=list)
    #: The job, or one of its pods, is annotated ``podium.dev/skip=true``: podium leaves it be.
    skipped: bool = False

    @property
    def held(self) -> int:
        return sum(1 for p in self.pods if p.gated)


def selector() -> str:
    """The label selector of podium's Reports."""
    return f"{labels.MANAGED_BY}={labels.MANAGER},{labels.COMPONENT}={COMPONENT}"


def namespaces(view: ReportView, settings: Settings) -> dict[str, Mode]:
    """The namespaces podium reports on: opted in (enforce or shadow) and writable."""
    out: dict[str, Mode] = {}
    for namespace in view.objects_of("v1", "Namespace"):
        name = str(metadata_of(namespace).get("name") or "")
        mode = settings.namespace_mode(name, labels_of(namespace))
        if name and mode is not None and settings.may_write(name):
            out[name] = mode
    return dict(sorted(out.items()))


def build(
    view: ReportView, settings: Settings, *, recognised: Recognise = recognise
) -> dict[str, Manifest]:
    """Per namespace podium reports on that has a job, its Report (``report-max-results`` 0:
    none)."""
    if settings.report_max_results <= 0:
        return {}
    wanted = namespaces(view, settings)
    found_records = _records(view, set(wanted))
    found_policies = _policies(view, settings, set(wanted))
    out: dict[str, Manifest] = {}
    for namespace, mode in wanted.items():
        jobs = _jobs(view, namespace, found_records, found_policies, recognised)
        if jobs:  # a namespace without a job has nothing to report, and no Report
            out[namespace] = report(
                namespace, mode, jobs, view, max_results=settings.report_max_results
            )
    return out


def report(
    namespace: str,
    mode: Mode,
    jobs: Sequence[_Job],
    view: View,
    *,
    max_results: int,
) -> Manifest:
    """The Report of one namespace: the newest ``max_results`` results, their summary."""
    dated = [(_decided(job, view), job) for job in jobs]
    dated.sort(key=lambda d: (d[0] or _EPOCH, _display(d[1]), d[1].gang), reverse=True)
    results = [_result(job, namespace, mode, when, view) for when, job in dated[:max_results]]
    summary = collections.Counter(str(r["result"]) for r in results)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {
                labels.MANAGED_BY: labels.MANAGER,
                labels.COMPONENT: COMPONENT,
                MODE_LABEL: mode.value,
            },
        },
        "source": SOURCE,
        "scope": {"apiVersion": "v1", "kind": "Namespace", "name": namespace},
        "configuration": {"limits": {"maxResults": max_results}},
        "summary": {result: summary.get(result, 0) for result in RESULTS},
        "results": results,
    }


#: The fields of a Report that podium writes and compares (the rest is the apiserver's).
CONTENT = ("source", "scope", "configuration", "summary", "results")


def same(existing: Obj | None, body: Manifest) -> bool:
    """``existing`` already says what ``body`` says: no write needed."""
    if existing is None:
        return False
    mine = {k: v for k, v in labels_of(existing).items() if k in body["metadata"]["labels"]}
    return mine == body["metadata"]["labels"] and all(
        existing.get(k) == body.get(k) for k in CONTENT
    )


# -- what the view shows -----------------------------------------------------------------------


def _records(
    view: ReportView, wanted: set[str]
) -> dict[tuple[str, str], tuple[Obj, records.Record]]:
    out: dict[tuple[str, str], tuple[Obj, records.Record]] = {}
    for obj in view.objects_of(policies.RECORD_API_VERSION, policies.RECORD_KIND):
        namespace = namespace_of(obj)
        if namespace not in wanted:
            continue
        record = view.derived(obj, records.parse_record)
        if record is not None:
            out[(namespace, record.gang)] = (obj, record)
    return out


def _policies(
    view: ReportView, settings: Settings, wanted: set[str]
) -> dict[tuple[str, str], list[str]]:
    kind = policies.policy_kind(settings.policy_mode)
    out: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    if kind is None:
        return out
    for obj in view.objects_of(*kind):
        namespace, gang = namespace_of(obj), labels_of(obj).get(labels.JOB)
        if namespace in wanted and gang:
            out[(namespace, str(gang))].append(str(metadata_of(obj).get("name") or ""))
    return out


def _jobs(
    view: View,
    namespace: str,
    found_records: Mapping[tuple[str, str], tuple[Obj, records.Record]],
    found_policies: Mapping[tuple[str, str], list[str]],
    recognised: Recognise,
) -> list[_Job]:
    """The namespace's jobs that have a pod: by podium's label, else as an adapter sees it."""
    jobs: dict[str, _Job] = {}
    for pod in view.pod_summaries(namespace):
        gang_key = pod.labels.get(labels.JOB)
        seen = None
        if not gang_key or gang_key not in jobs or jobs[gang_key].owner is None:
            seen = recognised(pod, namespace, view)
            gang_key = gang_key or (seen.key if seen is not None else None)
        if not gang_key:
            continue
        job = jobs.setdefault(gang_key, _Job(gang_key))
        job.pods.append(pod)
        job.admitted += labels.JOB in pod.labels
        job.skipped = job.skipped or pod.annotations.get(labels.SKIP) == "true"
        if seen is not None and seen.job_annotations.get(labels.SKIP) == "true":
            job.skipped = True
        if seen is not None and seen.key == gang_key and job.owner is None:
            owner = seen.shown or seen.owner
            job.owner = {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
            }
    for gang_key, job in jobs.items():
        if (found := found_records.get((namespace, gang_key))) is not None:
            obj, job.record = found
            data = obj.get("data") or {}
            job.record_job, job.record_uid = (
                str(data.get("job") or ""),
                str(data.get("jobUID") or ""),
            )
        job.policies = sorted(found_policies.get((namespace, gang_key), ()))
    return list(jobs.values())


def _reference(job: _Job, namespace: str) -> dict[str, str]:
    """The job as an ObjectReference: the adapter's owner, else the record's ``job``."""
    if job.owner is not None:
        return {**job.owner, "namespace": namespace}
    api_version, _, rest = job.record_job.rpartition("/")
    api_version, _, kind = api_version.rpartition("/")
    ref = {"apiVersion": api_version, "kind": kind, "name": rest, "namespace": namespace}
    if job.record_uid:
        ref["uid"] = job.record_uid
    return {k: v for k, v in ref.items() if v}


def _display(job: _Job) -> str:
    if job.owner is not None:
        return f"{job.owner['kind']}/{job.owner['name']}"
    return job.record_job.split("/", 1)[-1] if job.record_job else job.gang


def _decided(job: _Job, view: View) -> datetime | None:
    """When the job's most recent decision was made: its record's, else the job's creation."""
    if job.record is not None and (when := parse_time(job.record.decided_at)) is not None:
        return when
    uid = (job.owner or {}).get("uid") or job.record_uid
    found = view.by_uid(uid) if uid else None
    return parse_time(metadata_of(found).get("creationTimestamp")) if found else None


def _zones(job: _Job, view: View) -> dict[str, int]:
    """Pods per zone of the node they are (or were, until they finished) bound to."""
    counted: collections.Counter[str] = collections.Counter()
    for pod in job.pods:
        node = view.node(pod.node) if pod.node else None
        if node is not None and node.zone:
            counted[node.zone] += 1
    return dict(sorted(counted.items()))


def _spelled(zones: Mapping[str, int]) -> str:
    return ", ".join(f"{zone} ({count})" for zone, count in zones.items())


# -- one result per job ------------------------------------------------------------------------


def _finding(job: _Job, mode: Mode, zones: Mapping[str, int]) -> tuple[Result, str, str]:
    """(result, rule, message) for one job."""
    pods = len(job.pods)
    if job.skipped:
        return "skip", "skipped", f"annotated {labels.SKIP}=true: podium leaves it be"
    if mode is Mode.SHADOW:
        if len(zones) > 1:
            return (
                "fail",
                "would-keep-together",
                f"pods run in {len(zones)} zones, {_spelled(zones)}: podium would have kept "
                "the gang in one zone",
            )
        if zones:
            return "pass", "one-zone", f"pods run in one zone, {_spelled(zones)}"
        return "skip", "not-bound", f"none of its {pods} pod(s) is on a node yet"
    record = job.record
    if len(zones) > 1:
        why = spread.deliberate(p.as_object() for p in job.pods)
        if why is not None:
            return "warn", "spread", f"pods run in zones {_spelled(zones)}: {why}"
        pinned = f"; podium recorded zone {record.zone}" if record and record.zone else ""
        return "fail", "split", f"pods run in {len(zones)} zones, {_spelled(zones)}{pinned}"
    if job.admitted < pods:
        return (
            "warn",
            "not-admitted",
            f"{pods - job.admitted} of {pods} pod(s) were admitted without podium (it failed "
            "open, was down, or the namespace opted in later)",
        )
    if job.held:
        return (
            "skip",
            "held",
            f"{job.held} of {pods} pod(s) held until one zone has room for the whole gang",
        )
    if record is not None and not record.zone and record.chooser != records.SCHEDULER:
        return "warn", "unpinned", f"released into no zone ({record.reason or 'no reason'})"
    if not zones:
        where = f"pinned to {record.zone}; " if record and record.zone else ""
        return "skip", "not-bound", f"{where}none of its {pods} pod(s) is on a node yet"
    (zone,) = zones
    if record is not None and record.chooser == records.SCHEDULER:
        how = f"kube-scheduler placed it ({podgroups.REASON})"
    elif record is not None:
        how = f"pinned to {record.zone} ({record.reason})"
    else:
        how = "no decision record"
    written = f"; policy {', '.join(job.policies)}" if job.policies else ""
    return "pass", "one-zone", f"{pods} pod(s) in zone {zone}: {how}{written}"


def _result(
    job: _Job, namespace: str, mode: Mode, when: datetime | None, view: View
) -> dict[str, Any]:
    zones = _zones(job, view)
    result, rule, message = _finding(job, mode, zones)
    properties = {
        "mode": mode.value,
        "gang": job.gang,
        "pods": str(len(job.pods)),
        "zones": ",".join(f"{z}={n}" for z, n in zones.items()),
        "held": str(job.held) if job.held else "",
        "zone": (job.record.zone or "") if job.record else "",
        "reason": job.record.reason if job.record else "",
        "policies": ",".join(job.policies),
    }
    out: dict[str, Any] = {
        "source": SOURCE,
        "policy": POLICY,
        "rule": rule,
        "category": CATEGORY,
        "result": result,
        "scored": True,
        "message": message,
        "properties": {k: v for k, v in properties.items() if v},
        "resources": [_reference(job, namespace)],
    }
    if result in _SEVERITY:
        out["severity"] = _SEVERITY[result]
    if when is not None:
        out["timestamp"] = {"seconds": int(when.timestamp()), "nanos": 0}
    return out


# -- reading a Report back (``podium report --from-cluster``) ----------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One result of a Report as ``podium report`` lists it."""

    namespace: str
    mode: str
    job: str
    result: str
    rule: str
    zones: str
    message: str
    decided: datetime | None


def rows(report_objects: Sequence[Obj]) -> list[Row]:
    """Every result of podium's Reports, by namespace, newest first; what is not shaped like a
    result is left out."""
    out: list[Row] = []
    for obj in report_objects:
        namespace = namespace_of(obj)
        mode = str(labels_of(obj).get(MODE_LABEL) or "")
        results = obj.get("results")
        for item in results if isinstance(results, list) else ():
            if not isinstance(item, Mapping):
                continue
            resources = item.get("resources")
            ref = resources[0] if isinstance(resources, list) and resources else {}
            ref = ref if isinstance(ref, Mapping) else {}
            props = item.get("properties")
            props = props if isinstance(props, Mapping) else {}
            stamp = item.get("timestamp")
            seconds = stamp.get("seconds") if isinstance(stamp, Mapping) else None
            decided = (
                datetime.fromtimestamp(seconds, UTC)
                if isinstance(seconds, int)
                and not isinstance(seconds, bool)
                and 0 <= seconds < 253_402_300_800
                else None
            )
            out.append(
                Row(
                    namespace=namespace,
                    mode=str(props.get("mode") or mode),
                    job=f"{ref.get('kind') or '?'}/{ref.get('name') or '?'}",
                    result=str(item.get("result") or ""),
                    rule=str(item.get("rule") or ""),
                    zones=str(props.get("zones") or ""),
                    message=str(item.get("message") or ""),
                    decided=decided,
                )
            )
    out.sort(key=lambda r: (r.namespace, -r.decided.timestamp() if r.decided else float("inf")))
    return out
