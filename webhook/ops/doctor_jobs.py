"""What is wrong with one training job, for ``podium doctor``: ``doctor.diagnose`` gathers the
jobs and the cluster-wide facts and hands each job to ``judge``, which runs the per-job checks
``doctor``'s docstring lists (each records its findings through ``Find``). Here too is the
vocabulary of a verdict: ``Check``, ``FIXES``, ``Finding``, ``JobVerdict``."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from webhook.core import labels, policies, policyjudge, release, spread, topology
from webhook.core.adapters.base import Gang
from webhook.core.objects import Obj, annotations_of, labels_of, name_of
from webhook.core.settings import PolicyMode, PolicyScope, Settings
from webhook.core.view import TERMINAL_PHASES, PodSummary, View, has_gate

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


@dataclasses.dataclass
class Job:
    gang: Gang
    namespace: str
    pods: list[Obj] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.gang.owner.kind}/{self.gang.owner.name}"


def judge(
    job: Job,
    view: View,
    settings: Settings,
    network: policyjudge.Policies,
    keep: policyjudge.LabelFilter,
    managed_policies: set[tuple[str, str, str | None]],
    copied: Sequence[tuple[Obj, str]] = (),
    *,
    withheld: bool = False,
    hold: Held | None = None,
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
    hold: Held, settings: Settings, now: datetime | None, no_leader: str | None, find: Find
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
class Held:
    """A gang with pods behind podium's gate, as the releaser's plan sees it now."""

    why: str
    pods: tuple[PodSummary, ...]
    #: Why it waits; None when the releaser would release it now.
    wait: release.Wait | None


def held_gangs(planned: release.Plan) -> dict[str, Held]:
    """Per gang key, the held gangs of the releaser's plan: those that wait, with its why, and
    those it would release now — still held, since podium is down or has not passed since."""
    out = {w.held.key: Held(w.why, w.held.held, w) for w in planned.waits}
    for r in planned.releases:
        where = f"into {r.zone}" if r.zone else "into no zone"
        why = (
            f"podium's releaser releases it {where} at its next pass ({r.reason}: {r.detail}); "
            "it runs every release-interval-seconds while a podium replica leads"
        )
        out[r.held.key] = Held(why, r.held.held, None)
    return out


def _all_held(job: Job) -> bool:
    alive = [p for p in job.pods if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]
    return bool(alive) and all(has_gate(p.get("spec") or {}) for p in alive)


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


def _check_domain(job: Job, view: View, find: Find) -> str | None:
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
    # The record's detail ends with "into <domain>: <why>" (release.releases.release): say the why.
    why = detail.partition(f"into {topology.describe(domain)}: ")[2] or detail
    return (
        f"released into {topology.describe(domain)}: all {len(running)} bound pod(s) run there, "
        f"on {len(bound)} node(s)" + (f" ({why})" if why else "")
    )


def _pods_by_zone(job: Job, view: View) -> dict[str, list[Obj]]:
    """The job's pods on a node with a zone, by zone."""
    by_zone: dict[str, list[Obj]] = collections.defaultdict(list)
    for pod in job.pods:
        node = view.node(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is not None and node.zone:
            by_zone[node.zone].append(pod)
    return by_zone


def _check_pinned(job: Job, find: Find, view: View | None = None) -> None:
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
    job: Job, running: Mapping[str, str], job_zones: Sequence[str], find: Find
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
    job: Job,
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


def _unschedulable(job: Job) -> list[Finding]:
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
    job: Job,
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
