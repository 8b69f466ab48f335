"""``podium doctor``: what is wrong with the training jobs of a live cluster, and how to fix it.

``diagnose`` is pure — the cluster's objects in, a verdict per job and the findings out — so every
check is a table test. The checks, per job (pods grouped into jobs by the framework adapters;
``doctor_jobs`` judges one job):

    split-zones     the job's bound pods run in more than one zone (not when it was released
                    across zones on purpose: too-big: spread, podium release --unpinned)
    split-domains   (topology-levels) the job was released into a domain below its zone
                    (podium.dev/topology) and some of its bound pods run on nodes outside it;
                    a job bound inside its domain gets a note saying which domain and why
    no-policy       podium admitted the job's pods but its allow policy does not exist
    deny-rule       a Cilium deny rule (CNP or CCNP ingressDeny/egressDeny) denies traffic
                    between two of the job's pods, on some port; deny wins over any allow
    default-deny    a CNP, CCNP or NetworkPolicy puts the job's pods into default deny in a
                    direction and no policy allows the traffic between two of them on every port
    host-network    a training pod uses hostNetwork: pod network policy does not cover it
    not-pinned      a training pod in an opted-in namespace has no podium.dev/zone: podium was
                    down or failed open when it was created, or the pod ran before its
                    namespace opted in; one that runs is said as such (podium follows its zone,
                    and deleting it would restart the job), never "delete it"
    copied-label    a pod carries the job's podium.dev/job label although its controller chain
                    does not lead to the job (created with a copied label while podium was
                    down): the job's allow policy selects it
    long-hold       (zone-chooser: hold) the job's pods have waited behind podium's gate for
                    more than half of hold-timeout-seconds; the finding quotes the releaser's
                    why (what it needs, the roomiest zone, its place in line)
    too-big         (zone-chooser: hold) the job needs more than any zone holds even with
                    every node free: it never fits one zone, the finding names the ways out
    no-leader       (zone-chooser: hold) the job's pods are held and no podium replica leads
                    (the lease ``podium-reconciler`` is missing, released or not renewed within
                    its duration): nothing else removes podium's gate, they wait for podium
    unschedulable   a pod podium pinned to a zone is reported unschedulable by the scheduler
                    (PodScheduled=False, reason Unschedulable): the zone has no room for it, the
                    job waits half-started — the failure podium exists to prevent; the finding
                    quotes the scheduler's message

Held gangs are judged as the releaser judges them, against the whole cluster's room and line:
with ``-n`` the pods, jobs and records of every namespace are still read (``collect``), only the
verdicts are the namespace's. A held job's verdict keeps the releaser's why beside any finding
(``held``); one the releaser would release now (podium down, or between its passes) says so.

The deny-rule and default-deny checks judge every pair of the job's pods as Cilium's policy
engine does (``policyjudge``; ``tests/cilium/test_doctor_agrees.py`` holds them to Cilium's own
engine). And for the cluster as a whole:

    old-cilium      the installed ciliumnetworkpolicies CRD has no enableDefaultDeny (Cilium <
                    1.16): podium writes no CiliumNetworkPolicy there (old-cilium: skip-policy),
                    or writes one that puts the job's pods into default deny (create-policy)
    identity-labels cilium-config ``labels`` leaves podium.dev/job (or, in zone scope,
                    podium.dev/zone) out of pod identities: podium's policies select no pod; the
                    finding gives the exact ``labels`` value to set
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich.table import Table

from webhook.core import (
    adapters,
    labels,
    policies,
    policyjudge,
    reconcile,
    release,
)
from webhook.core.adapters import base
from webhook.core.objects import (
    Obj,
    group_of,
    labels_of,
    metadata_of,
    name_of,
    parse_time,
)
from webhook.core.settings import Mode, OldCilium, PolicyMode, PolicyScope, Settings
from webhook.core.view import TERMINAL_PHASES, ClusterView, View
from webhook.kube import cache, errors, leader
from webhook.ops.doctor_jobs import FIXES, Check, Finding, Job, JobVerdict, held_gangs, judge

if TYPE_CHECKING:
    from webhook.kube import protocols

#: doctor's surface; the vocabulary of a verdict (Check, FIXES, Finding, JobVerdict) is
#: doctor_jobs', which judges one job.
__all__ = [
    "CCNP",
    "CILIUM",
    "CILIUM_CONFIG",
    "CLUSTERWIDE",
    "CNP",
    "FIXES",
    "HELD_FIX",
    "PODIUM_LABELS",
    "RECORDS",
    "ROOM_KINDS",
    "SINGLE_OBJECTS",
    "Check",
    "Diagnosis",
    "Finding",
    "JobVerdict",
    "NamespaceNotFound",
    "collect",
    "diagnose",
    "finding_lines",
    "kinds_to_read",
    "namespace_note",
    "short_table",
    "table",
]

CILIUM = "cilium.io"
CNP, CCNP = "CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy"
#: Cilium's agent configuration: its ``labels`` key is the identity label filter.
CILIUM_CONFIG = ("kube-system", "cilium-config")
#: What to add to a whitelist ``labels`` so that podium's keys are identity-relevant.
PODIUM_LABELS = "k8s:" + labels.PREFIX


@dataclasses.dataclass(frozen=True, slots=True)
class Diagnosis:
    jobs: tuple[JobVerdict, ...]
    #: Findings about the cluster as a whole (``old-cilium``, ``identity-labels``).
    cluster: tuple[Finding, ...] = ()

    @property
    def findings(self) -> list[Finding]:
        return [*self.cluster, *(f for j in self.jobs for f in j.findings)]

    @property
    def ok(self) -> bool:
        return not self.cluster and all(j.ok for j in self.jobs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "cluster": [f.as_dict() for f in self.cluster],
            "jobs": [j.as_dict() for j in self.jobs],
            "findings": [f.as_dict() for f in self.findings],
        }


# -- the diagnosis ---------------------------------------------------------------------------


class NamespaceNotFound(LookupError):
    """``-n`` names a namespace the cluster does not have."""


def namespace_note(objects: Iterable[Obj], settings: Settings, namespace: str) -> str | None:
    """What to say up front about the namespace ``-n`` names: nothing when podium acts in it,
    a sentence (with the label that opts it in) when it does not; ``NamespaceNotFound`` when it
    does not exist — otherwise a typo would read as "no problems found"."""
    found = [o for o in objects if o.get("kind") == "Namespace" and name_of(o) == namespace]
    if not found:
        raise NamespaceNotFound(f"namespace {namespace} not found")
    if settings.skips_namespace(namespace):
        return f"namespace {namespace} is excluded from podium (its own, or excluded-namespaces)"
    ns_labels = labels_of(found[0])
    label = f"{settings.namespace_label}={settings.namespace_label_value}"
    mode = settings.namespace_mode(namespace, ns_labels)
    if mode is Mode.ENFORCE:
        return None
    if mode is Mode.SHADOW:
        return (
            f"namespace {namespace} is in shadow mode: podium decides and audits its pods but "
            "changes nothing (`podium report` says what it would have saved); enforce with: "
            f"kubectl label namespace {namespace} --overwrite {label}"
        )
    return (
        f"namespace {namespace} has not opted in to podium, which leaves its pods alone; "
        f"opt it in with: kubectl label namespace {namespace} {label}"
    )


def diagnose(
    objects: Iterable[Obj],
    settings: Settings,
    *,
    namespace: str | None = None,
    progress: Callable[[int], None] | None = None,
    now: datetime | None = None,
    lease_read: bool = False,
) -> Diagnosis:
    """Verdicts for every training job (in ``namespace``, or everywhere) from a list of the
    cluster's objects: Namespaces, Nodes, Pods, job objects, podium's objects and the Cilium and
    Kubernetes network policies. ``progress(n)`` is told every pod it has looked at.
    ``lease_read``: the objects hold podium's leader Lease if it exists (``collect`` reads it),
    so held jobs are flagged when no replica leads."""
    everything = list(objects)
    now = now or datetime.now(UTC)
    no_leader = _no_leader(everything, settings, now) if lease_read else None
    view = ClusterView.from_objects(everything, zone_label=settings.zone_label, kept=adapters.KEPT)
    crd = view.get(policies.CRD_API_VERSION, policies.CRD_KIND, "", policies.CILIUM_CRD)
    config = view.get("v1", "ConfigMap", *CILIUM_CONFIG)
    keep = policyjudge.LabelFilter(
        str((config.get("data") or {}).get("labels") or "") or None if config else None
    )
    namespaces = {name_of(o): o for o in everything if o.get("kind") == "Namespace"}
    network = policyjudge.Policies.parse(
        everything, namespaces, default_deny_known=crd is None or policies.knows_default_deny(crd)
    )
    cluster = _cluster_findings(settings, crd, config, keep)
    managed_policies = _managed(everything, settings)
    jobs = _jobs(everything, view, namespace=namespace, progress=progress)
    copied = _copied_labels(view, settings, namespace)
    holds = held_gangs(release.plan(view, settings, now=now))
    verdicts = [
        judge(
            job,
            view,
            settings,
            network,
            keep,
            managed_policies,
            copied.pop(key, []),
            withheld=policies.withheld(settings, crd) is not None,
            hold=holds.get(job.gang.key),
            now=now,
            no_leader=no_leader,
        )
        for key, job in sorted(jobs.items(), key=lambda kv: (kv[0][0], kv[1].name, kv[0][1]))
    ]
    verdicts += _copied_only(copied, view)
    return Diagnosis(tuple(verdicts), cluster)


def _jobs(
    everything: Sequence[Obj],
    view: View,
    *,
    namespace: str | None,
    progress: Callable[[int], None] | None,
) -> dict[tuple[str, str], Job]:
    """The running pods of every gang an adapter recognises, by (namespace, gang key)."""
    pods = [
        o
        for o in everything
        if o.get("kind") == "Pod" and not group_of(str(o.get("apiVersion", "")))
    ]
    jobs: dict[tuple[str, str], Job] = {}
    for i, pod in enumerate(pods, 1):
        meta = metadata_of(pod)
        ns = str(meta.get("namespace") or "")
        if (namespace is None or ns == namespace) and (pod.get("status") or {}).get(
            "phase"
        ) not in TERMINAL_PHASES:
            gang = adapters.recognise(pod, ns, view)
            if gang is not None:
                jobs.setdefault((ns, gang.key), Job(gang, ns)).pods.append(pod)
        if progress is not None:
            progress(i)
    return jobs


def _copied_only(
    copied: Mapping[tuple[str, str], Sequence[tuple[Obj, str]]], view: View
) -> list[JobVerdict]:
    """A verdict for each gang whose label only copies carry: none of its own pods are left."""
    verdicts = []
    for (ns, key), found in sorted(copied.items()):
        owner = base.job_of_gang(key, view)
        name = f"{owner['kind']}/{owner['name']}" if owner else f"gang {key}"
        names = tuple(sorted(name_of(p) for p, _ in found))
        detail = "; ".join(f"{name_of(p)}: {why}" for p, why in found)
        finding = Finding("copied-label", ns, name, detail, names)
        verdicts.append(JobVerdict(ns, name, key, 0, (), (finding,)))
    return verdicts


def _managed(everything: Sequence[Obj], settings: Settings) -> set[tuple[str, str, str | None]]:
    """(namespace, gang, zone — None for a job-wide one) of every policy podium manages in the
    policy mode's kind."""
    kind = policies.policy_kind(settings.policy_mode)
    out: set[tuple[str, str, str | None]] = set()
    for obj in everything:
        meta = metadata_of(obj)
        found = meta.get("labels") or {}
        if (obj.get("apiVersion"), obj.get("kind")) != kind or found.get(
            labels.MANAGED_BY
        ) != labels.MANAGER:
            continue
        zone = found.get(labels.ZONE) or policies.policy_zone(obj)
        out.add((str(meta.get("namespace") or ""), str(found.get(labels.JOB) or ""), zone))
    return out


def _cluster_findings(
    settings: Settings,
    crd: Obj | None,
    config: Obj | None,
    keep: policyjudge.LabelFilter,
) -> tuple[Finding, ...]:
    out = []
    if (
        settings.policy_mode is PolicyMode.CILIUM
        and crd is not None
        and not policies.knows_default_deny(crd)
    ):
        what = (
            "podium writes no CiliumNetworkPolicy (old-cilium: skip-policy): the jobs' own "
            "traffic is allowed only where the cluster's policies allow it"
            if settings.old_cilium is OldCilium.SKIP_POLICY
            else "podium's CiliumNetworkPolicies (old-cilium: create-policy) put every job's pods "
            "into default deny both ways: other pods, DNS and monitoring cannot reach them"
        )
        detail = (
            f"the installed {policies.CILIUM_CRD} CRD has no enableDefaultDeny (Cilium < 1.16): "
            + what
        )
        out.append(Finding("old-cilium", "", "(cluster)", detail))
    needed = [labels.JOB, *([labels.ZONE] if settings.policy_scope is PolicyScope.ZONE else [])]
    if config is not None and settings.policy_mode is not PolicyMode.NONE:
        fixed = keep.fixed(needed, PODIUM_LABELS)
        if fixed is not None:
            dropped = ", ".join(k for k in needed if not keep.keeps(k))
            detail = (
                f"cilium-config labels {keep.value!r} leave {dropped} out of pod identities: "
                "podium's policies select no pod"
            )
            remedy = (
                f'set labels: "{fixed}" in ConfigMap {CILIUM_CONFIG[0]}/{CILIUM_CONFIG[1]} '
                "and restart the Cilium agents"
            )
            out.append(Finding("identity-labels", "", "(cluster)", detail, (), remedy))
    return tuple(out)


def _copied_labels(
    view: View, settings: Settings, namespace: str | None
) -> dict[tuple[str, str], list[tuple[Obj, str]]]:
    """Per (namespace, gang): the pods in opted-in namespaces whose podium.dev/job label names
    the gang although their controller chain disowns it, and why."""
    out: dict[tuple[str, str], list[tuple[Obj, str]]] = collections.defaultdict(list)
    for ns, gang, pod, why in reconcile.disowned_labels(view, settings):
        if namespace is None or ns == namespace:
            out[(ns, gang)].append((pod, why))
    return out


def _no_leader(objects: Sequence[Obj], settings: Settings, now: datetime) -> str | None:
    """Why no podium replica leads — its Lease missing, released (no holder) or not renewed
    within its duration, on this machine's clock — or None while one does."""
    where = f"lease {settings.own_namespace}/{leader.LEASE_NAME}"
    lease = next(
        (
            o
            for o in objects
            if o.get("kind") == leader.KIND
            and name_of(o) == leader.LEASE_NAME
            and metadata_of(o).get("namespace") == settings.own_namespace
        ),
        None,
    )
    if lease is None:
        return f"{where} does not exist"
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return f"{where} has no holder: the last leader gave it up"
    renewed = parse_time(spec.get("renewTime"))
    duration = float(spec.get("leaseDurationSeconds") or leader.Timing().duration)
    age = (now - renewed).total_seconds() if renewed else None
    if age is not None and age <= duration:
        return None
    ago = f"{age:.0f}s ago" if age is not None else "never"
    return f"{where}: {spec['holderIdentity']} last renewed it {ago}, its duration is {duration:g}s"


# -- presentation ------------------------------------------------------------------------------


def table(diagnosis: Diagnosis) -> Table:
    out = Table(title=f"podium doctor: {len(diagnosis.jobs)} training job(s)")
    for column in ("namespace", "job", "pods", "zones", "verdict", "finding", "fix"):
        out.add_column(column, overflow="fold")
    for f in diagnosis.cluster:
        out.add_row("-", f.job, "-", "-", "[red]broken[/]", f"{f.check}: {f.detail}", f.fix)
    for job in diagnosis.jobs:
        zones = ", ".join(job.zones) or "-"
        rows = [(f"{f.check}: {f.detail}", f.fix) for f in job.findings]
        if job.held and not any(job.held in f.detail for f in job.findings):
            rows.append((f"held: {job.held}", HELD_FIX))
        if job.note:
            rows.append((job.note, ""))
        verdict = "[red]broken[/]" if not job.ok else "[yellow]held[/]" if job.held else ""
        for i, (finding, fix) in enumerate(rows or [("", "")]):
            first = i == 0
            out.add_row(
                job.namespace if first else "",
                job.job if first else "",
                str(job.pods) if first else "",
                zones if first else "",
                (verdict or "[green]ok[/]") if first else "",
                finding,
                fix,
            )
    return out


#: The fix column beside a held job's why.
HELD_FIX = "podium's releaser releases it once one zone has room for all of it, while podium runs"


def short_table(diagnosis: Diagnosis) -> Table:
    """``table`` in 80 columns (``podium doctor``'s default; ``-o wide`` is ``table``): a row
    per job, its findings' checks in a word each; ``finding_lines`` says each in full."""
    out = Table(title=f"podium doctor: {len(diagnosis.jobs)} training job(s)")
    for column in ("namespace", "job", "pods", "zones", "verdict", "findings"):
        out.add_column(column, overflow="fold")
    for f in diagnosis.cluster:
        out.add_row("-", f.job, "-", "-", "[red]broken[/]", f.check)
    for job in diagnosis.jobs:
        zones = ",".join(job.zones) or "-"
        checks: list[str] = [*dict.fromkeys(f.check for f in job.findings)]
        checks += ["held"] if job.held and not job.ok else []
        if job.ok:
            verdict = "[yellow]held[/]" if job.held else "[green]ok[/]"
        else:
            verdict = "[red]broken[/]"
        out.add_row(job.namespace, job.job, str(job.pods), zones, verdict, ",".join(checks) or "-")
    return out


def finding_lines(diagnosis: Diagnosis) -> list[str]:
    """Each finding of ``short_table`` (and why a held job waits) in words, with its fix."""
    lines: list[str] = []
    for f in diagnosis.cluster:
        lines += [f"{f.job}: {f.check}: {f.detail}", f"  fix: {f.fix}"]
    for job in diagnosis.jobs:
        where = f"{job.namespace}/{job.job}"
        lines += [
            line
            for f in job.findings
            for line in (f"{where}: {f.check}: {f.detail}", f"  fix: {f.fix}")
        ]
        if job.held and not any(job.held in f.detail for f in job.findings):
            lines += [f"{where}: held: {job.held}", f"  fix: {HELD_FIX}"]
        if job.note:
            lines += [f"{where}: note: {job.note}"]
    return lines


# -- reading the cluster -------------------------------------------------------------------------

#: What ``diagnose`` reads: the kinds podium watches (the cluster's shape, the jobs, podium's
#: policies) and the cluster-wide Cilium policies.
CLUSTERWIDE = ("Namespace", "Node", CCNP)


def kinds_to_read() -> list[tuple[str, str]]:
    kinds = [
        (r.api_version, r.kind)
        for r in cache.WATCHED
        if r.kind != "ConfigMap" and r is not cache.CILIUM_CRD
    ]
    return [*kinds, ("cilium.io/v2", CCNP)]


#: Single objects ``diagnose`` reads: the installed CiliumNetworkPolicy CRD (does it know
#: enableDefaultDeny?) and Cilium's agent configuration (its identity label filter).
SINGLE_OBJECTS = (
    (policies.CRD_API_VERSION, policies.CRD_KIND, "", policies.CILIUM_CRD),
    ("v1", "ConfigMap", *CILIUM_CONFIG),
)


#: What the releaser reads beyond a namespace: the pods (the room they take, the gangs in line),
#: the job kinds (which held pods are gangs) and podium's decision records (``RECORDS``). With
#: ``-n`` these are still listed in every namespace, so that held gangs are judged as the
#: releaser judges them; the network policies, which only the namespace's jobs need, are not.
ROOM_KINDS = frozenset({"Pod", *(k.kind for k in adapters.KINDS if k.namespaced)})
#: podium's decision records (ConfigMaps it manages): which gangs were decided, and where.
RECORDS = (policies.RECORD_API_VERSION, policies.RECORD_KIND, cache.MANAGED)


async def collect(
    api: protocols.Objects,
    *,
    namespace: str | None = None,
    on_kind: Callable[[str], None] | None = None,
    own_namespace: str = "podium-system",
    notes: list[str] | None = None,
) -> list[Obj]:
    """Every object ``diagnose`` needs, listed from the apiserver, and podium's leader Lease (in
    ``own_namespace``) if it exists. With ``namespace``, the namespaced kinds in that namespace
    only — but the releaser's (``ROOM_KINDS``, ``RECORDS``), which are read in every namespace
    when the user may (else in ``namespace``, and ``notes`` says that held gangs are then judged
    against less than the releaser sees). Kinds whose CRD is not installed are skipped."""
    out: list[Obj] = []
    narrowed: list[str] = []

    async def room(api_version: str, kind: str, selector: str | None = None) -> list[Obj]:
        if namespace is None:
            return await api.list(api_version, kind, label_selector=selector)
        try:
            return await api.list(api_version, kind, label_selector=selector)
        except errors.ApiError as err:
            if err.status != 403:
                raise
            narrowed.append(kind)
            return await api.list(api_version, kind, namespace=namespace, label_selector=selector)

    with contextlib.suppress(errors.ApiError):  # none yet, or not readable: no replica leads
        out.append(await api.get(leader.API_VERSION, leader.KIND, own_namespace, leader.LEASE_NAME))
    for api_version, kind in kinds_to_read():
        if on_kind is not None:
            on_kind(kind)
        try:
            if kind in ROOM_KINDS:
                out.extend(await room(api_version, kind))
            else:
                scope = None if kind in CLUSTERWIDE else namespace
                out.extend(await api.list(api_version, kind, namespace=scope))
        except errors.NotFound:
            continue
    with contextlib.suppress(errors.ApiError):  # not readable: judged as if none were decided
        out.extend(await room(*RECORDS[:2], RECORDS[2]))
    for api_version, kind, ns, name in SINGLE_OBJECTS:
        if on_kind is not None:
            on_kind(kind)
        try:  # absent (no Cilium) or not readable: the checks that need it are skipped
            found = await api.get(api_version, kind, ns, name)
        except errors.ApiError:
            continue
        out.append(policies.slim_crd(found) if kind == policies.CRD_KIND else found)
    if narrowed and notes is not None:
        notes.append(
            f"you may not list {', '.join(sorted(set(narrowed)))} in every namespace: held gangs "
            f"are judged against what namespace {namespace} holds, and podium's releaser, which "
            "sees the whole cluster, may judge them otherwise"
        )
    return out
