"""``podium doctor``: what is wrong with the training jobs of a live cluster, and how to fix it.

``diagnose`` is pure — the cluster's objects in, a verdict per job and the findings out — so every
check is a table test. The checks, per job (pods grouped into jobs by the framework adapters):

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
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rich.table import Table

from webhook.core import (
    adapters,
    labels,
    policies,
    policyjudge,
    reconcile,
    release,
    spread,
    topology,
)
from webhook.core.adapters import base
from webhook.core.adapters.base import Gang
from webhook.core.objects import (
    Obj,
    annotations_of,
    group_of,
    labels_of,
    metadata_of,
    name_of,
    parse_time,
)
from webhook.core.settings import Mode, OldCilium, PolicyMode, PolicyScope, Settings
from webhook.core.view import TERMINAL_PHASES, ClusterView, PodSummary, View, has_gate
from webhook.kube import cache, errors, leader

if TYPE_CHECKING:
    from webhook.kube import protocols

Check = Literal[
    "split-zones",
    "split-domains",
    "no-policy",
    "deny-rule",
    "default-deny",
    "host-network",
    "not-pinned",
    "copied-label",
    "unschedulable",
    "long-hold",
    "too-big",
    "no-leader",
    "old-cilium",
    "identity-labels",
]

CILIUM = "cilium.io"
CNP, CCNP = "CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy"
#: Cilium's agent configuration: its ``labels`` key is the identity label filter.
CILIUM_CONFIG = ("kube-system", "cilium-config")
#: What to add to a whitelist ``labels`` so that podium's keys are identity-relevant.
PODIUM_LABELS = "k8s:" + labels.PREFIX

FIXES: Mapping[Check, str] = {
    "split-domains": "the pods outside were bound before podium released the job into its domain "
    "or placed by someone else; delete them so their controller re-creates them into the domain "
    "(podium.dev/topology), or leave them if the slower links are acceptable",
    "split-zones": "delete the job's pods (or re-create the job) without podium.dev/skip so podium "
    "pins every pod to one zone",
    "no-policy": "the reconciler re-creates it within a minute; if not, check podium's logs, RBAC "
    "and that the policy CRD is installed",
    "deny-rule": "exempt the job's pods from the rule (e.g. a podium.dev/job DoesNotExist "
    "requirement) or make sure it cannot match traffic between them; keep the job in one zone",
    "default-deny": "allow the job's own pods on all ports (podium's allow policy does this for "
    "the pods of one zone) or set enableDefaultDeny to false; keep the job in one zone",
    "old-cilium": "upgrade Cilium to 1.16 or later; until then use policy-mode: kubernetes (which "
    "isolates the job) or none",
    "identity-labels": "set cilium-config labels as the finding says and restart the Cilium agents",
    "host-network": "run training pods without hostNetwork, or secure their traffic another way: "
    "pod policies do not apply to them",
    "copied-label": "podium's reconciler removes the label within one pass "
    "(reconcile-interval-seconds); if it stays, check that podium runs and may patch pods",
    "not-pinned": "delete the pod so its controller re-creates it through podium; see `podium "
    "audit --outcome fail-open` for why",
    "long-hold": "held pods wait for podium's releaser (the elected replica): while podium is "
    "down they stay held until it is back; else free room for the whole job in one zone, or "
    "shrink the job; after hold-timeout-seconds it is released into the roomiest zone",
    "no-leader": "start podium (or see why no replica renews the lease: its logs, `kubectl -n "
    "<podium's namespace> get lease podium-reconciler`); held pods wait until a replica leads, "
    "then its releaser releases them once a zone has room",
    "too-big": "no zone can hold the whole job even with every node free: run it across zones "
    "(podium release KIND/NAME -n NS --unpinned for this job, or too-big: spread for every such "
    "job, with one job-wide policy), shrink it (the finding says to how many pods), or delete it",
    "unschedulable": "free capacity in the job's zone, or wait for it to free up; podium keeps "
    "every pod of the job in that zone, so to place it anew delete the job and submit it again",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    check: Check
    namespace: str
    job: str
    detail: str
    pods: tuple[str, ...] = ()
    #: A fix for this finding in particular (e.g. the exact value to set), else the check's.
    remedy: str | None = None

    @property
    def fix(self) -> str:
        return self.remedy or FIXES[self.check]

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "namespace": self.namespace,
            "job": self.job,
            "detail": self.detail,
            "pods": list(self.pods),
            "fix": self.fix,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class JobVerdict:
    namespace: str
    job: str
    gang: str
    pods: int
    zones: tuple[str, ...]
    findings: tuple[Finding, ...]
    #: Why the job's pods wait behind podium's gate (``zone-chooser: hold``); None if they don't.
    held: str | None = None
    #: Something to know that is no problem (a job spread across zones on purpose).
    note: str | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "job": self.job,
            "gang": self.gang,
            "pods": self.pods,
            "zones": list(self.zones),
            "verdict": ("held" if self.held else "ok") if self.ok else "broken",
            "held": self.held,
            "findings": [f.as_dict() for f in self.findings],
        } | ({"note": self.note} if self.note else {})


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


@dataclasses.dataclass
class _Job:
    gang: Gang
    namespace: str
    pods: list[Obj] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.gang.owner.kind}/{self.gang.owner.name}"


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
    holds = _holds(release.plan(view, settings, now=now))
    verdicts = [
        _judge(
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
) -> dict[tuple[str, str], _Job]:
    """The running pods of every gang an adapter recognises, by (namespace, gang key)."""
    pods = [
        o
        for o in everything
        if o.get("kind") == "Pod" and not group_of(str(o.get("apiVersion", "")))
    ]
    jobs: dict[tuple[str, str], _Job] = {}
    for i, pod in enumerate(pods, 1):
        meta = metadata_of(pod)
        ns = str(meta.get("namespace") or "")
        if (namespace is None or ns == namespace) and (pod.get("status") or {}).get(
            "phase"
        ) not in TERMINAL_PHASES:
            gang = adapters.recognise(pod, ns, view)
            if gang is not None:
                jobs.setdefault((ns, gang.key), _Job(gang, ns)).pods.append(pod)
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


def _judge(
    job: _Job,
    view: View,
    settings: Settings,
    network: policyjudge.Policies,
    keep: policyjudge.LabelFilter,
    managed_policies: set[tuple[str, str, str | None]],
    copied: Sequence[tuple[Obj, str]] = (),
    *,
    withheld: bool = False,
    hold: _Held | None = None,
    now: datetime | None = None,
    no_leader: str | None = None,
) -> JobVerdict:
    ns, gang = job.namespace, job.gang
    findings: list[Finding] = []

    def find(
        check: Check, detail: str, pods: Iterable[Obj] = (), remedy: str | None = None
    ) -> None:
        names = tuple(sorted(name_of(p) for p in pods))
        findings.append(Finding(check, ns, job.name, detail, names, remedy))

    by_zone = _pods_by_zone(job, view)
    on_purpose = spread.deliberate(job.pods)
    if len(by_zone) > 1 and on_purpose is None:
        where = ", ".join(f"{z}: {len(p)}" for z, p in sorted(by_zone.items()))
        find("split-zones", f"pods run in {len(by_zone)} zones ({where})", job.pods)
    # Held pods have no zone and no policy yet: the releaser writes both when it releases them.
    opted_in = settings.enforces(ns, labels_of(view.namespace(ns))) and not _all_held(job)
    if opted_in and gang.job_annotations.get(labels.SKIP) != "true":
        _check_pinned(job, find, view)
    admitted = [p for p in job.pods if labels_of(p).get(labels.JOB) == gang.key]
    if opted_in and admitted and settings.policy_mode is not PolicyMode.NONE and not withheld:
        _check_coverage(job, view, settings, admitted, managed_policies, find)
    findings.extend(_unschedulable(job))
    if copied:
        _check_copied(copied, find)
    hosts = [p for p in job.pods if (p.get("spec") or {}).get("hostNetwork")]
    if hosts:
        find("host-network", f"{len(hosts)} pod(s) use hostNetwork", hosts)
    _check_cuts(job, view.namespace(ns), network, keep, find)
    if hold is not None:
        _check_held(hold, settings, now, no_leader, find)
    zones = tuple(sorted(by_zone))
    held = hold.why if hold is not None else None
    note = on_purpose if len(by_zone) > 1 else _check_domain(job, view, find)
    return JobVerdict(ns, job.name, gang.key, len(job.pods), zones, tuple(findings), held, note)


def _check_copied(copied: Sequence[tuple[Obj, str]], find: Find) -> None:
    """Pods that carry the job's podium.dev/job label although their controller chain does not
    lead to the job (``_copied_labels``), and why each is not its own."""
    why = "; ".join(f"{name_of(p)}: {reason}" for p, reason in copied)
    find(
        "copied-label",
        f"{len(copied)} pod(s) carry its {labels.JOB} label without being its own ({why})",
        [p for p, _ in copied],
    )


def _check_held(
    hold: _Held, settings: Settings, now: datetime | None, no_leader: str | None, find: Find
) -> None:
    """A held job: too big or held too long (``_check_hold``) while the releaser keeps it
    waiting, and ``no-leader`` when no podium replica leads to release it."""
    if hold.wait is not None:
        _check_hold(hold.wait, settings, now, find)
    if no_leader:
        gated = hold.pods
        find(
            "no-leader",
            f"{len(gated)} pod(s) held behind podium's gate wait for podium's releaser, and no "
            f"podium replica leads ({no_leader}): they stay held until podium runs again",
            [p.as_object() for p in gated],
        )


@dataclasses.dataclass(frozen=True, slots=True)
class _Held:
    """A gang with pods behind podium's gate, as the releaser's plan sees it now."""

    why: str
    pods: tuple[PodSummary, ...]
    #: Why it waits; None when the releaser would release it now.
    wait: release.Wait | None


def _holds(planned: release.Plan) -> dict[str, _Held]:
    """Per gang key, the held gangs of the releaser's plan: those that wait, with its why, and
    those it would release now — still held, since podium is down or has not passed since."""
    out = {w.held.key: _Held(w.why, w.held.held, w) for w in planned.waits}
    for r in planned.releases:
        where = f"into {r.zone}" if r.zone else "into no zone"
        why = (
            f"podium's releaser releases it {where} at its next pass ({r.reason}: {r.detail}); "
            "it runs every release-interval-seconds while a podium replica leads"
        )
        out[r.held.key] = _Held(why, r.held.held, None)
    return out


def _all_held(job: _Job) -> bool:
    alive = [p for p in job.pods if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]
    return bool(alive) and all(has_gate(p.get("spec") or {}) for p in alive)


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


#: Without ``hold-timeout-seconds``, a hold longer than this is a finding.
LONG_HOLD_SECONDS = 1800.0


def _check_hold(wait: release.Wait, settings: Settings, now: datetime | None, find: Find) -> None:
    """A job too big for any zone, or held for more than half of hold-timeout-seconds (without
    one, for more than ``LONG_HOLD_SECONDS``)."""
    pods = [p.as_object() for p in wait.held.held]
    if wait.too_big:
        find("too-big", wait.why, pods)
        return
    waited = wait.held.waited(now or datetime.now(UTC))
    timeout = settings.hold_timeout_seconds
    if waited > (timeout / 2 if timeout else LONG_HOLD_SECONDS):
        limit = f"hold-timeout-seconds {timeout:g}" if timeout else "no hold-timeout-seconds"
        find("long-hold", f"held {waited:.0f}s ({limit}): {wait.why}", pods)


class Find(Protocol):
    """Records one finding about the job being judged: the check, the detail, the pods
    concerned, and a fix for this finding in particular (else the check's)."""

    def __call__(
        self, check: Check, detail: str, pods: Iterable[Obj] = (), remedy: str | None = None
    ) -> None: ...


def _check_domain(job: _Job, view: View, find: Find) -> str | None:
    """``topology-levels``: the domain below the zone the job's pods were released into (their
    ``podium.dev/topology``) against the nodes its bound pods run on: ``split-domains`` for the
    pods outside it, else a note saying which domain holds them all. None when no pod says."""
    said = {str(annotations_of(p).get(labels.TOPOLOGY) or "") for p in job.pods} - {""}
    if not said:
        return None
    domain = topology.parse(sorted(said)[0])
    bound: dict[str, list[Obj]] = collections.defaultdict(list)
    for pod in job.pods:
        node = view.node(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is not None:
            bound[node.name].append(pod)
    nodes = {n: view.node(n) for n in bound}
    outside = topology.outside(domain, {n: i.labels for n, i in nodes.items() if i is not None})
    last = domain[-1][0] if domain else ""
    if outside:
        pods = [p for n in outside for p in bound[n]]
        spans = {str(i.labels.get(last) or "(none)") for n in bound if (i := nodes[n]) is not None}
        find(
            "split-domains",
            f"released into {topology.describe(domain)}, but {len(pods)} bound pod(s) run on "
            f"{len(outside)} node(s) outside it ({', '.join(outside)}): its pods span "
            f"{len(spans)} {last} domains ({', '.join(sorted(spans))})",
            pods,
        )
        return None
    running = [p for on_node in bound.values() for p in on_node]
    gang = job.gang
    name = labels.object_name(gang.owner.kind, gang.owner.name, gang.key)
    record = view.get(policies.RECORD_API_VERSION, policies.RECORD_KIND, job.namespace, name)
    detail = str(((record or {}).get("data") or {}).get("detail") or "")
    # The record's detail ends with "into <domain>: <why>" (release._release): say the why.
    why = detail.partition(f"into {topology.describe(domain)}: ")[2] or detail
    return (
        f"released into {topology.describe(domain)}: all {len(running)} bound pod(s) run there, "
        f"on {len(bound)} node(s)" + (f" ({why})" if why else "")
    )


def _pods_by_zone(job: _Job, view: View) -> dict[str, list[Obj]]:
    """The job's pods on a node with a zone, by zone."""
    by_zone: dict[str, list[Obj]] = collections.defaultdict(list)
    for pod in job.pods:
        node = view.node(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is not None and node.zone:
            by_zone[node.zone].append(pod)
    return by_zone


def _check_pinned(job: _Job, find: Find, view: View | None = None) -> None:
    """In an opted-in namespace, every pod not skipped carries the zone podium pinned it to —
    but those behind podium's gate: podium admitted them and holds them, its releaser pins them
    (their gang's why is the verdict's ``held``). Pods that run without it
    (``_running_unpinned``) are said as what they are, apart from those that wait unpinned."""
    unpinned = [
        p
        for p in job.pods
        if labels.ZONE not in annotations_of(p)
        and annotations_of(p).get(labels.SKIP) != "true"
        and not has_gate(p.get("spec") or {})
    ]
    running = _running_unpinned(unpinned, view) if view is not None else {}
    waiting = [p for p in unpinned if name_of(p) not in running]
    if waiting:
        find(
            "not-pinned",
            f"{len(waiting)} pod(s) have no {labels.ZONE}: podium did not admit them",
            waiting,
        )
    if running and view is not None:
        _say_running(job, running, sorted(_pods_by_zone(job, view)), find)


def _running_unpinned(pods: Iterable[Obj], view: View) -> dict[str, str]:
    """Name → zone of the pods bound to a node with a zone: they run (or are starting)."""
    out = {}
    for pod in pods:
        node = view.node(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is not None and node.zone:
            out[name_of(pod)] = node.zone
    return out


def _say_running(
    job: _Job, running: Mapping[str, str], job_zones: Sequence[str], find: Find
) -> None:
    """Pods that run without podium's admission — created before the namespace opted in, while
    podium was down, or placed by another system — are not a fault to fix by deleting them: a
    running master deleted restarts the whole job. podium keeps the job's new pods in their
    zone (``core.running``), and its reconciler labels them as the job's (``reconcile``); the
    finding says so, and whether podium's policy selects them yet."""
    zones = collections.Counter(running.values())
    where = ", ".join(f"{z}: {n}" for z, n in sorted(zones.items()))
    follow = (
        f"podium keeps the job's new pods in {job_zones[0]}"
        if len(job_zones) == 1
        else "the job is split across zones (split-zones); podium adds no zone to it"
    )
    pods = [p for p in job.pods if name_of(p) in running]
    if all(labels_of(p).get(labels.JOB) == job.gang.key for p in pods):
        covered = "podium has labelled them as the job's, so its policy selects them"
    else:
        covered = (
            f"until podium labels them as the job's they carry no {labels.JOB} label and no "
            "podium policy selects them (its reconciler does, in policy-mode cilium)"
        )
    detail = (
        f"{len(running)} pod(s) run without podium's admission ({where}): created before the "
        f"namespace opted in, while podium was down, or placed by another system; {covered}; "
        f"{follow}"
    )
    remedy = (
        "nothing to do while the job runs: podium's new pods of the job follow the zone its "
        "running pods are in. Do not delete a running pod to get it pinned: its controller "
        "restarts it (a PyTorchJob's master restarts the whole job). To have podium choose the "
        "job's zone, re-create the job when it may restart; "
        "`podium audit --outcome fail-open` lists the pods podium was down for"
    )
    find("not-pinned", detail, pods, remedy)


def _check_cuts(
    job: _Job,
    ns_obj: Obj | None,
    network: policyjudge.Policies,
    keep: policyjudge.LabelFilter,
    find: Find,
) -> None:
    """A finding per network policy that denies, or leaves default-denied, the traffic between
    the job's pods."""
    members = [(name_of(p), policyjudge.identity(p, ns_obj, keep)) for p in job.pods]
    by_name = {name_of(p): p for p in job.pods}
    for cut in policyjudge.job_cuts(network, members):
        where = policyjudge.describe(cut.ports)
        if cut.by == "deny-rule":
            detail = (
                f"{', '.join(cut.sources)} deny(s) {cut.direction} traffic between the job's "
                f"pods ({where}); a deny wins over any allow"
            )
        else:
            detail = (
                f"{', '.join(cut.sources)} put(s) the job's pods into {cut.direction} default "
                f"deny and no policy allows the traffic between them ({where})"
            )
        find(cut.by, detail, [by_name[n] for n in cut.pods])  # type: ignore[arg-type]


def _unschedulable(job: _Job) -> list[Finding]:
    """The job's pods that podium pinned to a zone and that the scheduler reports it cannot
    place (``PodScheduled=False``, reason ``Unschedulable``), one finding per zone and message."""
    stuck: dict[tuple[str, str], list[Obj]] = collections.defaultdict(list)
    for pod in job.pods:
        zone = annotations_of(pod).get(labels.ZONE)
        message = _unschedulable_message(pod)
        if zone and message is not None and not (pod.get("spec") or {}).get("nodeName"):
            stuck[(str(zone), message)].append(pod)
    bound = sum(1 for p in job.pods if (p.get("spec") or {}).get("nodeName"))
    out = []
    for (zone, message), pods in sorted(stuck.items()):
        holding = f"; {bound} of its {len(job.pods)} pod(s) are bound and hold their resources"
        detail = (
            f"{len(pods)} pod(s) pinned to {zone} cannot be scheduled there, the scheduler says: "
            f'"{message}"{holding if bound else ""}'
        )
        remedy = (
            f"{zone} has no room for them: free capacity there, or wait for it to free up; "
            f"podium keeps every pod of the job in {zone} (deleting the pods brings them back "
            "there), so to place it anew delete the job and submit it again"
        )
        names = tuple(sorted(name_of(p) for p in pods))
        out.append(Finding("unschedulable", job.namespace, job.name, detail, names, remedy))
    return out


def _unschedulable_message(pod: Obj) -> str | None:
    """The scheduler's message if it reports the pod unschedulable, else None."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "no message")
    return None


def _check_coverage(
    job: _Job,
    view: View,
    settings: Settings,
    admitted: Sequence[Obj],
    managed_policies: set[tuple[str, str, str | None]],
    find: Callable[[Check, str, Iterable[Obj]], None],
) -> None:
    """Every admitted pod is selected by one of podium's policies: the job-wide one, or the one
    of the zone the pod carries (a bound pod without its zone label waits for the reconciler)."""
    ns, key = job.namespace, job.gang.key
    if (ns, key, None) in managed_policies:
        return
    kind = policies.policy_kind(settings.policy_mode)
    what = kind[1] if kind else "policy"
    uncovered: dict[str, list[Obj]] = collections.defaultdict(list)
    for pod in admitted:
        zone = labels_of(pod).get(labels.ZONE)
        bound = (pod.get("spec") or {}).get("nodeName")
        if zone and (ns, key, zone) not in managed_policies:
            uncovered[f"no {what} of podium covers its pods in {zone}"].append(pod)
        elif not zone and bound and settings.policy_scope is PolicyScope.ZONE:
            uncovered[
                f"bound pod(s) without {labels.ZONE}: no zone-scoped {what} selects them until "
                "the reconciler labels them"
            ].append(pod)
    for detail, pods in sorted(uncovered.items()):
        find("no-policy", detail, pods)


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
