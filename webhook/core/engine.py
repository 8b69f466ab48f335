"""The decision: ``(admission request, cluster view, settings) → Decision``. Pure.

A pod's CREATE: the reasons to leave it alone (``_why_skip``), then which gang (an adapter),
whether it waits behind podium's gate, which zone (``zones``) or kube-scheduler's PodGroup
(``podgroups``), the pod after mutation and its patch (``mutation``), and the objects the gang
needs (its record, and its policy as ``policies`` chooses it). A pod's UPDATE is judged by
``updates`` (only podium changes its trusted labels). Nothing here talks to the network;
``admission`` wraps it with the I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from webhook.core import (
    adapters,
    labels,
    mutation,
    podgroups,
    policies,
    records,
    resources,
    running,
    topology,
    updates,
    zones,
)
from webhook.core.adapters.base import Gang
from webhook.core.objects import Obj, annotations_of, labels_of, metadata_of
from webhook.core.policies import Manifest
from webhook.core.records import Record
from webhook.core.reviews import Request
from webhook.core.settings import Mode, Settings, ZoneChooser
from webhook.core.view import View

#: ``grouped``: the pod joined its gang's PodGroup; kube-scheduler chooses the zone.
#: ``held``: the pod carries podium's gate until the releaser ungates its whole gang into one
#: zone (``zone-chooser: hold``); ``released`` is the releaser's, never an admission's.
Outcome = Literal["pinned", "unpinned", "grouped", "held", "released", "skipped", "denied"]

#: Kueue's labels that mean Kueue holds and places the pod (its queue, its plain-pod group).
KUEUE_LABELS = ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/pod-group-name")
DEFAULT_SCHEDULER = "default-scheduler"

HOST_NETWORK_WARNING = (
    "podium: this training pod uses hostNetwork, which bypasses pod network policy; "
    "the job's allow policy does not cover it"
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """Everything podium decided about one admission, and nothing it did."""

    outcome: Outcome
    reason: str
    detail: str
    namespace: str
    pod: Obj | None = None
    patched: Obj | None = None
    patch: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    gang: Gang | None = None
    zone: str | None = None
    #: The objects the gang needs that are not in the view yet (``to_create`` orders them):
    #: its decision record (None when it has one), its PodGroup (only when kube-scheduler
    #: chooses the zone) and its allow policy (None when it has one, or gets none).
    record: Manifest | None = None
    podgroup: Manifest | None = None
    policy: Manifest | None = None
    warnings: tuple[str, ...] = ()
    capacity: tuple[zones.ZoneCapacity, ...] = ()
    policy_name: str | None = None
    #: Set when the admission is refused (only for attempts to change podium's trusted label).
    denial: str | None = None
    #: Shadow mode: the decision enforce mode would have made (its patch, objects and warnings),
    #: which this one records but does not apply (``shadowed``).
    shadow_of: Decision | None = None

    @property
    def shadow(self) -> bool:
        return self.shadow_of is not None

    @property
    def to_create(self) -> tuple[Manifest, ...]:
        """Every object to create, in the order to create them: the record first, so that of two
        replicas racing for a gang the loser learns the winner's zone (``serve.effects``) before
        it writes anything else; then the PodGroup, which the pod names; then the policy."""
        if self.record is None and self.podgroup is None and self.policy is None:
            return ()  # a later pod's decision: asked at every admission
        return tuple(m for m in (self.record, self.podgroup, self.policy) if m is not None)

    def audit_annotations(self) -> dict[str, str]:
        """Short facts the apiserver's own audit log keeps under ``<webhook>/<key>``."""
        out = {"outcome": self.outcome, "reason": self.reason}
        if self.zone:
            out["zone"] = self.zone
        if self.gang:
            out["job"] = f"{self.gang.owner.kind}/{self.gang.owner.name}"
        if self.policy_name:
            out["policy"] = self.policy_name
        if self.shadow:
            out["shadow"] = "true"
        return out


#: The outcomes shadow mode records without applying: those that place a pod or hold it. The
#: refusals that protect podium's trusted labels (``denied``, and ``skipped`` with the label
#: stripped) stay in force: they only touch pods that carry podium's labels, and protect the
#: policies an earlier enforce period left in the namespace.
SHADOWED: frozenset[Outcome] = frozenset({"pinned", "unpinned", "grouped", "held"})


def decide(
    request: Request,
    view: View,
    settings: Settings,
    *,
    now: datetime,
    recorded: Record | None = None,
    scheduler: bool = False,
) -> Decision:
    """Decide one admission. ``recorded`` overrides the view's record for the gang (used when
    creating the record lost a race and the winner's record has been read back). In a namespace
    in shadow mode (``Settings.namespace_mode``) the decision is made as in enforce mode, then
    ``shadowed``."""
    namespace = request.namespace
    pod = request.object
    if request.is_pod and request.operation == "UPDATE" and not request.sub_resource:
        return _judged_update(request, view, settings)
    if not request.is_pod or request.operation != "CREATE" or request.sub_resource or pod is None:
        what = f"{request.operation} {request.kind.get('kind', '?')}"
        if request.sub_resource:
            what += f"/{request.sub_resource}"
        return Decision(
            outcome="skipped", reason="not-a-pod-creation", detail=what, namespace=namespace
        )
    meta: Mapping[str, Any] = metadata_of(pod)
    namespace = namespace or str(meta.get("namespace") or "")
    # The namespace's mode, read once: it says whether podium acts here and whether in shadow.
    mode = settings.namespace_mode(namespace, labels_of(view.namespace(namespace)))
    decision = _decide(
        pod, meta, namespace, mode, view, settings, now=now, recorded=recorded, scheduler=scheduler
    )
    if (
        mode is not Mode.SHADOW
        or decision.outcome not in SHADOWED
        or decision.pod is None
        or decision.gang is None
    ):
        return decision
    return shadowed(decision, view, settings, now=now, scheduler=scheduler)


def shadowed(
    decision: Decision, view: View, settings: Settings, *, now: datetime, scheduler: bool
) -> Decision:
    """The decision as shadow mode answers it: the pod unchanged, nothing to create, no warning
    for the pod's creator; ``shadow_of`` keeps what enforce mode would have done, for the audit.

    A held gang (``zone-chooser: hold``) gets the zone podium would pin it to now, the zone the
    releaser would release it into once all of it is there, if there is room then as now:
    shadow mode never releases, so admission is the only moment podium decides for it."""
    assert decision.pod is not None and decision.gang is not None
    zone, capacity, detail = decision.zone, decision.capacity, decision.detail
    if decision.outcome == "held":
        pod, namespace, gang = decision.pod, decision.namespace, decision.gang
        name = labels.object_name(gang.owner.kind, gang.owner.name, gang.key)
        record = _recorded(view, namespace, name, gang.key)
        unfit = _scheduler_chooses(pod, namespace, gang, view, settings, record, scheduler)
        pinned = _place(
            pod, namespace, gang, view, settings, name=name, record=record, unfit=unfit, now=now
        )
        zone, capacity = pinned.zone, pinned.capacity
        detail += f"; with room as now, into zone {zone or '(none)'}: {pinned.detail}"
    return dataclasses.replace(
        decision,
        patched=decision.pod,
        patch=[],
        record=None,
        podgroup=None,
        policy=None,
        warnings=(),
        zone=zone,
        capacity=capacity,
        detail=detail,
        shadow_of=decision,
    )


def _decide(
    pod: Obj,
    meta: Mapping[str, Any],
    namespace: str,
    mode: Mode | None,
    view: View,
    settings: Settings,
    *,
    now: datetime,
    recorded: Record | None,
    scheduler: bool,
) -> Decision:
    """A pod's CREATE in ``namespace``, whose mode (``Settings.namespace_mode``) is ``mode``."""
    skip = _why_skip(meta, namespace, mode, settings)
    if skip is not None:
        return _skipped(pod, namespace, *skip, strip=skip[0] != "excluded-namespace")
    gang = adapters.recognise(pod, namespace, view)
    if gang is None:
        return _skipped(
            pod, namespace, "not-a-training-pod", "no framework adapter recognises the pod"
        )
    if gang.job_annotations.get(labels.SKIP) == "true":
        return _skipped(
            pod, namespace, "job-skip-annotation", f"{gang.display} is annotated {labels.SKIP}=true"
        )
    name = labels.object_name(gang.owner.kind, gang.owner.name, gang.key)
    record = recorded or _recorded(view, namespace, name, gang.key)
    # The record first: a later pod of a decided gang is answered by it alone.
    unfit = _scheduler_chooses(pod, namespace, gang, view, settings, record, scheduler)
    if (
        unfit is not None
        and settings.zone_chooser.may_hold
        and settings.may_write(namespace)
        and _uncommitted(record, view, namespace, gang.key)
        and _not_placed_elsewhere(pod) is None
    ):
        followed = _following(
            pod, namespace, gang, view, settings, record=record, unfit=unfit, now=now
        )
        return followed or _held_decision(pod, namespace, gang)
    return _place(
        pod, namespace, gang, view, settings, name=name, record=record, unfit=unfit, now=now
    )


def _judged_update(request: Request, view: View, settings: Settings) -> Decision:
    """A pod's UPDATE as ``updates.judge`` answers it: let through, or refused (``denial``)."""
    verdict = updates.judge(request, view, settings)
    if not verdict.refused:
        return Decision(
            outcome="skipped",
            reason=verdict.reason,
            detail=verdict.detail,
            namespace=request.namespace,
        )
    return Decision(
        outcome="denied",
        reason=verdict.reason,
        detail=verdict.detail,
        namespace=request.namespace,
        pod=request.object,
        denial=verdict.detail,
    )


def _uncommitted(record: Record | None, view: View, namespace: str, gang_key: str) -> bool:
    """The gang podium chooses a zone for is not committed to one yet, so where ``hold`` (or
    ``auto`` without kube-scheduler's PodGroups) applies its pod waits behind podium's gate:
    it has no record, or no zone recorded, or no pod released into it. A gang with a released pod
    follows its recorded zone."""
    return record is None or record.zone is None or not any_released(view, namespace, gang_key)


def _not_placed_elsewhere(pod: Obj) -> str | None:
    """Why another system holds or places the pod, so podium must not hold it too (``hold``
    mode then pins it at admission, as ``podium`` mode does); None when nothing else does.

    Another scheduling gate or Kueue's queue or pod-group label: Kueue (or whoever set the gate)
    releases it, and two holders would each wait for the other. ``spec.schedulingGroup``: a
    PodGroup places the gang. A ``schedulerName`` other than the default: another scheduler
    (Volcano, say) places it and does its own gang admission. ``spec.nodeName``: the pod is
    placed already, and the apiserver refuses a gate on it."""
    spec: Mapping[str, Any] = pod.get("spec") or {}
    meta_labels: Mapping[str, Any] = labels_of(pod)
    gates = spec.get("schedulingGates") or []
    others = [
        g.get("name") for g in gates if isinstance(g, Mapping) and g.get("name") != labels.HOLD_GATE
    ]
    if others:
        return f"the pod carries another scheduling gate ({others[0]})"
    if kueue := next((k for k in KUEUE_LABELS if k in meta_labels), None):
        return f"Kueue holds the pod ({kueue})"
    if spec.get("schedulingGroup"):
        return "a PodGroup places the pod (spec.schedulingGroup)"
    if spec.get("schedulerName", DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER:
        return f"scheduler {spec['schedulerName']} places the pod"
    if spec.get("nodeName"):
        return "the pod is already on a node"
    return None


def any_released(view: View, namespace: str, gang_key: str) -> bool:
    """Some pod of the gang was released (carries its label, not podium's gate) and is not
    finished: the gang is committed to its recorded zone, and later pods follow it."""
    return view.released(namespace, gang_key) > 0


def _following(
    pod: Obj,
    namespace: str,
    gang: Gang,
    view: View,
    settings: Settings,
    *,
    record: Record | None,
    unfit: str,
    now: datetime,
) -> Decision | None:
    """A pod that would be held, of a gang with members already running that podium never held
    (``running``): pinned at once, ungated, to the zone they run in, with the record and policy
    a pinned pod gets; None when no member runs (hold it). A gang recorded as released across
    zones has no zone to follow; one recorded into another zone than its members run in is
    held, and the releaser follows them and replaces the record (``release.releases.follow``)."""
    if record is not None and not record.zone:
        return None
    choice = running.follow(running.placed_members(gang, namespace, view), view, settings)
    if choice is None or (record is not None and record.zone != choice.zone):
        return None
    return _pinned_decision(
        pod, namespace, gang, view, settings, choice=choice, record=record, unfit=unfit, now=now
    )


def _held_decision(pod: Obj, namespace: str, gang: Gang) -> Decision:
    """The pod behind podium's gate, labelled as its gang's, with no zone and nothing to create:
    the releaser writes the record and policy when the whole gang fits somewhere."""
    after, patch = mutation.hold(pod, gang_key=gang.key)
    return Decision(
        outcome="held",
        reason=labels.HELD,
        detail=(
            f"held until one zone has room for all of {gang.display} "
            f"({_summary(gang)}); podium's releaser ungates the whole gang at once"
        ),
        namespace=namespace,
        pod=pod,
        patched=after,
        patch=patch,
        gang=gang,
        warnings=_host_network(pod),
    )


def _summary(gang: Gang) -> str:
    pods = sum(g.count for g in gang.demand)
    total = resources.describe({k: v for k, v in gang.total.items() if v and k != resources.PODS})
    return f"{pods} pod(s), {total or 'no requests'}"


def _why_skip(
    meta: Mapping[str, Any], namespace: str, mode: Mode | None, settings: Settings
) -> tuple[str, str] | None:
    if mode is None and settings.skips_namespace(namespace):
        return "excluded-namespace", f"namespace {namespace!r} is never mutated"
    if mode is None:
        wanted = f"{settings.namespace_label}={settings.namespace_label_value}"
        return (
            "namespace-not-enabled",
            f"namespace {namespace!r} lacks {wanted} (or ={settings.namespace_shadow_value})",
        )
    annotations: Mapping[str, Any] = meta.get("annotations") or {}
    if labels.MIRROR_POD in annotations:
        return "mirror-pod", "static (mirror) pods are never mutated"
    if annotations.get(labels.SKIP) == "true":
        return "skip-annotation", f"the pod is annotated {labels.SKIP}=true"
    return None


def _skipped(pod: Obj, namespace: str, reason: str, detail: str, *, strip: bool = True) -> Decision:
    """Leave the pod alone, except that it may not carry podium's trusted label into a policy."""
    after, patch = (
        mutation.without_trusted_label(pod) if strip else mutation.Mutation(dict(pod), [])
    )
    warnings = (
        (f"podium removed the {labels.JOB} label, which only podium may set",) if patch else ()
    )
    return Decision(
        outcome="skipped",
        reason=reason,
        detail=detail,
        namespace=namespace,
        pod=pod,
        patched=after,
        patch=patch,
        warnings=warnings,
    )


def _place(
    pod: Obj,
    namespace: str,
    gang: Gang,
    view: View,
    settings: Settings,
    *,
    name: str,
    record: Record | None,
    unfit: str | None,
    now: datetime,
) -> Decision:
    """The pod placed at admission: in its gang's PodGroup ``name`` when kube-scheduler chooses
    the zone (``unfit`` None, ``_scheduler_chooses``), else pinned to the zone podium chooses."""
    if unfit is None:
        return _group(pod, namespace, gang, view, settings, name=name, now=now, record=record)
    spec: Obj = pod.get("spec") or {}
    recorded_zone = record.zone if record else None
    choice = zones.choose_zone(
        pod_spec=spec,
        demand=gang.demand,
        recorded_zone=recorded_zone,
        # A recorded zone wins before placed members are looked at: do not look for them.
        placed=() if recorded_zone else _placed_members(gang, namespace, view),
        view=view,
        settings=settings,
        reserved=lambda: view.reserved(
            since=now - timedelta(seconds=settings.reservation_seconds), exclude=gang.key
        ),
    )
    return _pinned_decision(
        pod, namespace, gang, view, settings, choice=choice, record=record, unfit=unfit, now=now
    )


def _pinned_decision(
    pod: Obj,
    namespace: str,
    gang: Gang,
    view: View,
    settings: Settings,
    *,
    choice: zones.ZoneChoice,
    record: Record | None,
    unfit: str,
    now: datetime,
) -> Decision:
    """The pod pinned to the zone podium chose (or left unpinned), with the gang's record and
    policy to create."""
    recorded_zone = record.zone if record else None
    policy_name, policy, withheld = policies.covering_policy(
        gang, namespace, view, settings, zone=choice.zone, record_zone=recorded_zone or choice.zone
    )
    # A later pod of a gang the releaser put into a domain below the zone follows that domain.
    domain = record.domain if record and choice.zone and choice.zone == record.zone else ""
    after, patch = mutation.pin(
        pod,
        zone=choice.zone,
        gang_key=gang.key,
        zone_label=settings.zone_label,
        annotations=_pin_annotations(pod, choice, policy_name, domain),
        below=topology.requirements(topology.parse(domain)) if domain else (),
    )
    new_record = _new_record(
        record,
        gang=gang,
        namespace=namespace,
        zone=choice.zone,
        reason=str(choice.reason),
        detail=choice.detail,
        now=now,
    )
    warnings = [*choice.warnings, *_host_network(pod)]
    if withheld:
        warnings.append(withheld)
    return Decision(
        outcome="pinned" if choice.zone else "unpinned",
        reason=str(choice.reason),
        detail=choice.detail
        + (f"; inside {domain}, as its release" if domain else "")
        + (f"; podium chose the zone, not kube-scheduler: {unfit}" if unfit else ""),
        namespace=namespace,
        pod=pod,
        patched=after,
        patch=patch,
        gang=gang,
        zone=choice.zone,
        record=new_record,
        policy=next(iter(policy), None),
        warnings=tuple(warnings),
        capacity=choice.capacity,
        policy_name=policy_name,
    )


def _pin_annotations(
    pod: Obj, choice: zones.ZoneChoice, policy_name: str | None, domain: str
) -> dict[str, str]:
    """podium's annotations on a pinned pod: its zone, why, the policy that covers it, and the
    domain below the zone its gang was released into."""
    annotations = {labels.ZONE: choice.zone or "", labels.REASON: str(choice.reason)}
    earlier: Mapping[str, Any] = annotations_of(pod)
    if earlier.get(labels.ZONE) == annotations[labels.ZONE] and earlier.get(labels.REASON):
        # Reinvoked on a pod podium already pinned: same zone, so keep the first reason and
        # answer with an empty patch.
        annotations[labels.REASON] = str(earlier[labels.REASON])
    if policy_name is not None:
        annotations[labels.POLICY] = policy_name
    if domain:
        annotations[labels.TOPOLOGY] = domain
    return annotations


def _new_record(
    existing: Record | None,
    *,
    gang: Gang,
    namespace: str,
    zone: str | None,
    reason: str,
    detail: str,
    now: datetime,
    chooser: str = records.PODIUM,
) -> Manifest | None:
    """The gang's decision record to create, or None when the gang has one already."""
    if existing is not None:
        return None
    return policies.build_record(
        gang=gang,
        namespace=namespace,
        zone=zone,
        reason=reason,
        detail=detail,
        decided_at=now.astimezone(UTC).isoformat(timespec="seconds"),
        chooser=chooser,
    )


def _scheduler_chooses(
    pod: Obj,
    namespace: str,
    gang: Gang,
    view: View,
    settings: Settings,
    record: Record | None,
    scheduler: bool,
) -> str | None:
    """Does kube-scheduler choose the gang's zone? None when it does; else why podium does (""
    when that is simply what the settings or the gang's record say: ``pin`` and ``hold``, or
    ``auto`` where the apiserver serves no PodGroups; else why a PodGroup cannot express the
    gang, ``podgroups.unfit``).

    The gang's record decides for a gang already seen: every pod of a gang goes the same way,
    whatever the setting or the cluster's support says by the time it comes."""
    if record is not None:
        return None if record.chooser == records.SCHEDULER else ""
    chooser = settings.zone_chooser
    if chooser.pins_at_admission or (chooser is ZoneChooser.AUTO and not scheduler):
        return ""
    job = view.get(gang.owner.api_version, gang.owner.kind, namespace, gang.owner.name)
    return podgroups.unfit(gang, pod, job)


def _group(
    pod: Obj,
    namespace: str,
    gang: Gang,
    view: View,
    settings: Settings,
    *,
    name: str,
    now: datetime,
    record: Record | None,
) -> Decision:
    """kube-scheduler chooses the zone: the pod joins the gang's PodGroup (created with the
    record, before it; creating it again is harmless) and gets no node affinity.

    The policy is job-wide whatever ``policy-scope`` says: the zone is not known when the pods
    are created, the scheduler's topology constraint keeps the gang in one zone, and scoping the
    policy later would mean relabelling running pods, which changes their Cilium identity under
    NCCL's open connections (docs/design.md, "zone chooser")."""
    policy_name, policy = policies.job_wide_policy(gang, namespace, view, settings)
    after, patch = _join_podgroup(pod, gang, settings, name=name, policy_name=policy_name)
    size = podgroups.size_of(gang)
    detail = (
        f"kube-scheduler places all {size} pods of {gang.display} in one {settings.zone_label} "
        f"domain (PodGroup {name})"
    )
    new_record = _new_record(
        record,
        gang=gang,
        namespace=namespace,
        zone=None,
        reason=podgroups.REASON,
        detail=detail,
        now=now,
        chooser=records.SCHEDULER,
    )
    return Decision(
        outcome="grouped",
        reason=podgroups.REASON,
        detail=detail,
        namespace=namespace,
        pod=pod,
        patched=after,
        patch=patch,
        gang=gang,
        zone=record.zone if record is not None else None,
        record=new_record,
        # Every pod asks for the PodGroup (AlreadyExists is fine): the view does not hold
        # PodGroups, and a pod naming a PodGroup that never comes would wait for it for ever.
        podgroup=podgroups.build_podgroup(
            gang=gang, namespace=namespace, zone_label=settings.zone_label
        ),
        policy=next(iter(policy), None),
        warnings=_host_network(pod),
        policy_name=policy_name,
    )


def _join_podgroup(
    pod: Obj, gang: Gang, settings: Settings, *, name: str, policy_name: str | None
) -> tuple[Obj, list[Manifest]]:
    """The pod labelled as the gang's, annotated with no zone, and in PodGroup ``name``; the
    patch that does it."""
    annotations = {labels.ZONE: "", labels.REASON: podgroups.REASON}
    if policy_name is not None:
        annotations[labels.POLICY] = policy_name
    labelled, patch = mutation.pin(
        pod, zone=None, gang_key=gang.key, zone_label=settings.zone_label, annotations=annotations
    )
    after, join = podgroups.join(labelled, name)
    return after, patch + join


def _host_network(pod: Obj) -> tuple[str, ...]:
    """The warning for a pod on the host's network (a policy does not cover it), if it is."""
    return (HOST_NETWORK_WARNING,) if (pod.get("spec") or {}).get("hostNetwork") else ()


def _recorded(view: View, namespace: str, name: str, gang_key: str) -> Record | None:
    """The gang's decision record in the view, parsed once per version of the record."""
    obj = view.get(policies.RECORD_API_VERSION, policies.RECORD_KIND, namespace, name)
    return records.read_record(
        obj, gang_key, parse=lambda held: view.derived(held, records.parse_record)
    )


def _placed_members(gang: Gang, namespace: str, view: View) -> list[zones.Placed]:
    """Members of the gang that are already bound to a node with a zone."""
    return running.placed_members(gang, namespace, view)
