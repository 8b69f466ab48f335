"""The reconciler's plan (pure): what keeps podium's side effects true — a record and a policy for
every live job podium admitted, none for jobs that are gone or never got a pod, and no policy
edited away from what podium wrote. ``webhook.serve.reconciler`` lists podium's objects and
carries the plan out while its replica leads, as ``webhook.serve.releaser`` does for
``webhook.core.release``.

An admitted pod may never be persisted (a later webhook or validation can reject it), a user can
delete or edit a policy, and the garbage collector only helps once the job is deleted. So
``plan`` — ``(view, settings, owned, now, tuning) → [Action]`` — decides, for every gang that
has a podium object (``Owned``, listed fresh from the apiserver with their resourceVersions), or
has pods carrying podium's label (so that a gang whose record and policy were both deleted is
found from its pods).

Orphans are removed in two passes, so nothing in flight is lost: an object older than the grace
period whose job is gone (or that has no pod of its gang) is first *marked* with the annotation
``podium.dev/orphan-since``; a later pass deletes it only if it is still an orphan a grace period
after the mark, with the mark's resourceVersion as a precondition. A gang that gets its pods in
the meantime is unmarked. A record created seconds ago whose pods are still being created is
younger than the grace period and is left alone.

A pod created while podium was down (``failurePolicy: Ignore``) skipped the admission that strips
a copied ``podium.dev/job`` label, and would be selected by that job's allow policy. So every plan
also looks at the pods carrying the label in opted-in namespaces (``plan_labels``): a label that
the pod's controller chain does not lead to (``updates.disowned_label``) is removed — a merge
patch by podium's own user, which the UPDATE guard lets remove exactly such a label — audited,
and reported as a ``JobLabelRemoved`` Event on the pod.

Zone-scoped policies (``policy-scope: zone``, ``policies``) select the gang's pods by
``podium.dev/zone`` too. A pod podium pinned carries the label from admission; a pod whose zone
was not known then (unpinned, or admitted before podium wrote the label) gets it here, once it
is bound, from its node's zone (``label``: a merge patch by podium's own user, which the UPDATE
guard allows for exactly that value), and the gang gets a policy for every zone its pods are in.
A job-wide policy (written before zone scoping, or under ``policy-scope: job``) is narrowed to
the zone-scoped form only once every bound pod of the gang carries its zone, so that no running
pod is left outside the gang's policy; until then it stays as it is. A repair is the RFC 7386
merge patch (``mergepatch.diff``) from the policy there to the one the gang needs.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from webhook.core import (
    adapters,
    labels,
    mergepatch,
    podgroups,
    policies,
    records,
    release,
    running,
    spread,
    updates,
)
from webhook.core.adapters import base
from webhook.core.adapters.base import Gang
from webhook.core.objects import (
    Obj,
    annotations_of,
    labels_of,
    metadata_of,
    namespace_of,
    owner_references,
    parse_time,
)
from webhook.core.policies import Manifest
from webhook.core.settings import PolicyMode, PolicyScope, Settings
from webhook.core.view import TERMINAL_PHASES, View, has_gate

#: Annotation on an object podium found orphaned: when it first found it so (ISO 8601).
ORPHAN_SINCE = labels.PREFIX + "orphan-since"

Verb = Literal["create", "repair", "mark", "unmark", "delete", "unlabel", "label"]


@dataclasses.dataclass(frozen=True, slots=True)
class Tuning:
    #: How long an object must be an orphan — first unmarked, then marked — before it goes.
    grace_seconds: float = 120.0
    interval_seconds: float = 30.0

    @classmethod
    def from_settings(cls, settings: Settings) -> Tuning:
        """``orphan-grace-seconds`` and ``reconcile-interval-seconds``."""
        return cls(
            grace_seconds=settings.orphan_grace_seconds,
            interval_seconds=settings.reconcile_interval_seconds,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Owned:
    """podium's objects as listed from the apiserver (fresh, with their resourceVersions)."""

    decisions: Sequence[Obj] = ()
    policies: Sequence[Obj] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    verb: Verb
    reason: str
    detail: str
    gang: str
    #: create: the object to create; repair, mark, unmark, delete: the existing object;
    #: unlabel: the pod.
    manifest: Manifest
    #: repair, mark, unmark: the merge patch to send (guarded by the listed resourceVersion);
    #: unlabel: the label's removal (guarded by the pod's uid).
    patch: Manifest | None = None
    #: The job as the object names it (its ownerReference).
    owner: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def target(self) -> tuple[str, str, str]:
        meta = self.manifest["metadata"]
        return str(self.manifest["kind"]), str(meta.get("namespace", "")), str(meta["name"])


def _owner(obj: Obj) -> Mapping[str, Any]:
    """The job, which podium's objects name as their one (non-controller) owner."""
    return next(owner_references(obj), {})


def _job_uid(obj: Obj) -> str:
    data = obj.get("data") or {}
    return str(data.get("jobUID") or _owner(obj).get("uid") or "")


def _majority(values: Iterable[str]) -> str | None:
    counted = collections.Counter(v for v in values if v)
    return counted.most_common(1)[0][0] if counted else None


def plan(
    view: View, settings: Settings, *, owned: Owned, now: datetime, tuning: Tuning
) -> list[Action]:
    """What to do about every gang that has a podium object or a pod carrying its label, decided
    from the objects, the pods carrying the gang's label and the jobs in ``view``."""
    groups: dict[tuple[str, str], list[Obj]] = collections.defaultdict(list)
    for obj in (*owned.decisions, *owned.policies):
        gang = labels_of(obj).get(labels.JOB)
        if gang:
            groups[(namespace_of(obj), str(gang))].append(obj)
    for namespace, gang in view.gangs():  # pods of a gang whose record and policy are both gone
        groups.setdefault((namespace, gang), [])
    actions: list[Action] = []
    for (namespace, gang), objects in sorted(groups.items()):
        actions.extend(_plan_gang(view, settings, namespace, gang, objects, now, tuning))
    return actions + plan_labels(view, settings)


def split_gangs(view: View) -> list[tuple[str, str]]:
    """The gangs podium admitted (pods carrying ``podium.dev/job``) whose running pods are bound
    to nodes in more than one zone: what podium exists to prevent (a pod admitted while podium
    was down or failing open, or skipped) — but for a gang spread on purpose (``spread``)."""
    split: list[tuple[str, str]] = []
    for namespace, gang in sorted(set(view.gangs())):
        zones: set[str] = set()
        pods = list(view.pods_in(namespace, {labels.JOB: gang}))
        if spread.deliberate(pods) is not None:
            continue
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
                continue
            node = view.node(str((pod.get("spec") or {}).get("nodeName") or ""))
            if node is not None and node.zone:
                zones.add(node.zone)
        if len(zones) > 1:
            split.append((namespace, gang))
    return split


def plan_labels(view: View, settings: Settings) -> list[Action]:
    """Remove every ``podium.dev/job`` label, in namespaces that opted in, that the pod's
    controller chain disowns (``updates.disowned_label``)."""
    actions: list[Action] = []
    for _, gang, pod, why in disowned_labels(view, settings):
        meta = metadata_of(pod)
        actions.append(
            Action(
                verb="unlabel",
                reason="label-disowned",
                detail=f"removed {labels.JOB}={gang} from pod {meta.get('name')}: {why}",
                gang=gang,
                manifest={**pod, "apiVersion": "v1", "kind": "Pod"},
                patch={"metadata": {"uid": meta.get("uid"), "labels": {labels.JOB: None}}},
                owner=base.job_of_gang(gang, view),
            )
        )
    return actions


def disowned_labels(view: View, settings: Settings) -> Iterator[tuple[str, str, Obj, str]]:
    """(namespace, gang, pod, why) for every ``podium.dev/job`` label that the pod's controller
    chain disowns (``updates.disowned_label``), in namespaces podium enforces in (in shadow mode
    it labels no pod, so none to check); by namespace and gang."""
    for namespace, gang in sorted(set(view.gangs())):
        if not settings.enforces(namespace, labels_of(view.namespace(namespace))):
            continue
        for pod in view.pods_in(namespace, {labels.JOB: gang}):
            why = updates.disowned_label(pod, namespace, view)
            if why is not None:
                yield namespace, gang, pod, why


def _plan_gang(
    view: View,
    settings: Settings,
    namespace: str,
    gang: str,
    objects: Sequence[Obj],
    now: datetime,
    tuning: Tuning,
) -> list[Action]:
    members = list(view.pods_in(namespace, {labels.JOB: gang}))
    found: Gang | None = None
    if objects:
        uid = next((u for u in map(_job_uid, objects) if u), "")
        owner = _owner(objects[0])
    else:  # only pods carry the gang's label: their job is the one to rebuild for
        found = _gang_of(members, namespace, gang, view)
        if found is None:
            return []
        uid, owner = found.owner.uid, found.owner.as_owner_reference()
    job = view.by_uid(uid) if uid else None
    if job is not None and metadata_of(job).get("namespace") != namespace:
        job = None

    def act(
        verb: Verb, reason: str, detail: str, manifest: Manifest, patch: Manifest | None = None
    ) -> Action:
        return Action(
            verb=verb,
            reason=reason,
            detail=detail,
            gang=gang,
            manifest=manifest,
            patch=patch,
            owner=owner,
        )

    if job is None or not members:
        reason = "job-gone" if job is None else "no-pods"
        detail = (
            f"the job with UID {uid or '?'} does not exist"
            if job is None
            else f"no pod carries {labels.JOB}={gang}"
        )
        return [a for obj in objects if (a := _orphan(obj, reason, detail, now, tuning, act))]
    actions = _adopted(objects, members, act)
    if _all_held(members):  # nothing released yet: the releaser writes record and policy
        return actions
    found = found or _gang_of(members, namespace, gang, view)
    if found is None:
        return actions  # no adapter recognises the pods any more: nothing to rebuild from
    record_zone, chooser, rebuilt = _decision_of(view, found, namespace, objects, members, now)
    if rebuilt is not None:
        actions.append(act("create", "missing-record", "the decision record was gone", rebuilt))
    actions += _adoptions(view, settings, namespace, found, record_zone, chooser, act)
    scope, label_zones = _scope(settings, chooser, objects, members)
    return actions + _plan_policies(
        view, settings, namespace, found, members, objects, record_zone, scope, act, label_zones
    )


def _adoptions(
    view: View,
    settings: Settings,
    namespace: str,
    gang: Gang,
    record_zone: str | None,
    chooser: str,
    act: Callable[..., Action],
) -> list[Action]:
    """The gang's running members podium never admitted (``running.unadmitted``: started before
    the namespace opted in, while podium was down, or placed by someone else), labelled as the
    gang's and with their node's zone, so that the gang's policy selects the whole job and not
    only the pods podium admitted (the UPDATE guard lets podium's own user do exactly this,
    ``updates.adopted``). Only for a gang podium decided into a zone (a followed gang's record
    names the zone its running pods are in), in a namespace it enforces, and where podium's
    policy only adds an allow (Cilium, ``enableDefaultDeny`` off): the new label gives the pod a
    new Cilium identity that the allow then covers, whereas a Kubernetes NetworkPolicy would
    isolate a running pod mid-run. The next pass writes the policy of every zone they run in."""
    if (
        chooser != records.PODIUM
        or not record_zone
        or settings.policy_mode is not PolicyMode.CILIUM
        or not settings.enforces(namespace, labels_of(view.namespace(namespace)))
    ):
        return []
    return [
        act(
            "label",
            "adopted-running",
            f"labelled pod {pod.name} {labels.JOB}={gang.key} and {labels.ZONE}={zone}: it runs "
            f"on node {pod.node} without podium's admission, and podium follows {gang.display}",
            {**pod.as_object(), "apiVersion": "v1", "kind": "Pod"},
            {"metadata": {"uid": pod.uid, "labels": {labels.JOB: gang.key, labels.ZONE: zone}}},
        )
        for pod, zone in running.unadmitted(gang, namespace, view)
    ]


def _scope(
    settings: Settings, chooser: str, objects: Sequence[Obj], members: Sequence[Obj]
) -> tuple[PolicyScope, bool]:
    """The scope of the gang's policies, and whether its bound pods get their zone label.

    The scheduler's gangs keep a job-wide policy (engine._group). So does a gang released across
    zones by ``too-big: spread`` — narrowing it to zones would take back what the admin opted
    into — but its pods still get their node's zone label, so that an admin's zone isolation
    keyed on it covers them as it covers every other pod (docs/cilium.md)."""
    if chooser == records.SCHEDULER:
        return PolicyScope.JOB, False
    record = next((o for o in objects if o.get("kind") == policies.RECORD_KIND), None)
    recorded = records.parse_record(record) if record is not None else None
    reasons = (str(annotations_of(p).get(labels.REASON) or "") for p in members)
    if (recorded.reason if recorded else _majority(reasons)) == release.TOO_BIG_SPREAD:
        return PolicyScope.JOB, True
    return settings.policy_scope, settings.policy_scope is PolicyScope.ZONE


def _all_held(members: Sequence[Obj]) -> bool:
    """Every pod of the gang that is not finished still carries podium's gate
    (``zone-chooser: hold``): it has no decision to rebuild and no policy to keep yet."""
    alive = [p for p in members if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]
    return bool(alive) and all(has_gate(p.get("spec") or {}) for p in alive)


def _adopted(
    objects: Sequence[Obj], members: Sequence[Obj], act: Callable[..., Action]
) -> list[Action]:
    """Unmark the objects marked as orphans: the gang has pods again."""
    return [
        act(
            "unmark",
            "adopted",
            f"{len(members)} pod(s) of the gang exist",
            dict(obj),
            _annotate(obj, None),
        )
        for obj in objects
        if ORPHAN_SINCE in annotations_of(obj)
    ]


def _decision_of(
    view: View,
    found: Gang,
    namespace: str,
    objects: Sequence[Obj],
    members: Sequence[Obj],
    now: datetime,
) -> tuple[str | None, str, Manifest | None]:
    """The gang's zone and zone chooser, from its decision record; without one, from what its
    pods were admitted with, and the record to re-create from that.

    Pods admitted held (reason ``held``, no zone) whose gate went without podium (removed by
    hand where the gate guard, ``charts/podium/templates/gate-guard.yaml``, is not installed)
    had no zone decided: their record names the zone they were bound in, once they are, never
    an empty one that would read as "released unpinned"; until one is bound, no record."""
    record = next((o for o in objects if o.get("kind") == policies.RECORD_KIND), None)
    recorded = records.parse_record(record) if record is not None else None
    if recorded is not None:
        return recorded.zone, recorded.chooser, None
    record_zone = _majority(str(annotations_of(p).get(labels.ZONE) or "") for p in members)
    first_reason = _majority(str(annotations_of(p).get(labels.REASON) or "") for p in members)
    detail = "re-created by the reconciler from the zone its pods were pinned to"
    if record_zone is None and first_reason == labels.HELD:
        record_zone = _majority(_bound_zone(view, p) or "" for p in members)
        if record_zone is None:
            return None, records.PODIUM, None
        detail = (
            f"re-created by the reconciler: podium's gate was removed by someone else and its "
            f"pods were bound in {record_zone}; no zone was decided"
        )
    # Pods admitted for kube-scheduler to place (engine._group) say so in their reason: the
    # record they had said zoneChooser scheduler and no zone, and so must the new one.
    scheduled = first_reason == podgroups.REASON
    chooser = records.SCHEDULER if scheduled else records.PODIUM
    # The domain below the zone the releaser put the gang into (docs/topology.md): its released
    # pods carry it, so pods released after the record came back still follow it.
    domain = _majority(str(annotations_of(p).get(labels.TOPOLOGY) or "") for p in members)
    manifest = policies.build_record(
        gang=found,
        namespace=namespace,
        zone=None if scheduled else record_zone,
        reason=first_reason or "reconciled",
        detail=detail,
        decided_at=now.astimezone(UTC).isoformat(timespec="seconds"),
        chooser=chooser,
        domain="" if scheduled or record_zone is None else domain or "",
    )
    return record_zone, chooser, manifest


def _bound_zone(view: View, pod: Obj) -> str | None:
    """The zone of the node a live pod is bound to."""
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    node = view.node(str((pod.get("spec") or {}).get("nodeName") or ""))
    return node.zone if node is not None else None


def _zone_of(pod: Obj) -> str | None:
    return labels_of(pod).get(labels.ZONE) or None


def _plan_policies(
    view: View,
    settings: Settings,
    namespace: str,
    gang: Gang,
    members: Sequence[Obj],
    objects: Sequence[Obj],
    record_zone: str | None,
    scope: PolicyScope,
    act: Callable[..., Action],
    label_zones: bool,
) -> list[Action]:
    """The gang's allow policies: with ``label_zones`` (zone scope; a spread gang), first the
    zone label of every bound pod that lacks it; then every policy the gang needs created or
    repaired, and the ones it no longer needs deleted — except that a job-wide policy is not
    narrowed while a pod it covers has no zone label yet (``waiting``)."""
    kind = policies.policy_kind(settings.policy_mode)
    crd = view.get(policies.CRD_API_VERSION, policies.CRD_KIND, "", policies.CILIUM_CRD)
    if kind is None or policies.withheld(settings, crd) is not None:
        return []  # no policy mode, or an old Cilium: podium writes no policy (doctor says so)
    actions, zones, waiting = _zone_labels(view, namespace, members, record_zone, label_zones, act)
    expected = policies.build_policies(
        gang=gang,
        namespace=namespace,
        mode=settings.policy_mode,
        scope=scope,
        zones=zones,
        record_zone=record_zone,
    )
    existing = {
        str(metadata_of(o).get("name")): o
        for o in objects
        if (o.get("apiVersion"), o.get("kind")) == kind
    }
    for want in expected:
        have_policy = existing.pop(want["metadata"]["name"], None)
        if have_policy is None:
            actions.append(act("create", "missing-policy", "the allow policy was missing", want))
        elif (repair := _repair(have_policy, want, waiting=waiting, act=act)) is not None:
            actions.append(repair)
    for name, stale in sorted(existing.items()):
        if _zone_of(stale) is None and scope is PolicyScope.ZONE and waiting:
            continue  # a job-wide policy still covers pods that have no zone label yet
        detail = f"{stale.get('kind')} {name} is not one the gang needs ({scope} scope)"
        actions.append(act("delete", "policy-not-needed", detail, dict(stale)))
    return actions


def _zone_labels(
    view: View,
    namespace: str,
    members: Sequence[Obj],
    record_zone: str | None,
    label_zones: bool,
    act: Callable[..., Action],
) -> tuple[list[Action], set[str], int]:
    """With ``label_zones``, a label for every running pod whose zone label is not its node's zone;
    the zones the gang's pods are in; and how many pods wait for their zone label."""
    actions: list[Action] = []
    zones = {record_zone} if record_zone else set()
    waiting = 0
    for pod in members:
        meta, spec = metadata_of(pod), pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        have = _zone_of(pod)
        node = view.node(str(spec.get("nodeName") or ""))
        truth = node.zone if node is not None else None
        if label_zones and truth and have != truth:
            if updates.disowned_label(pod, namespace, view) is not None:
                continue  # a copied job label: plan_labels removes it
            actions.append(
                act(
                    "label",
                    "zone-known",
                    f"labelled pod {meta.get('name')} {labels.ZONE}={truth}, the zone of its "
                    f"node {node.name if node else '?'}" + (f" (was {have})" if have else ""),
                    {**pod, "apiVersion": "v1", "kind": "Pod"},
                    {"metadata": {"uid": meta.get("uid"), "labels": {labels.ZONE: truth}}},
                )
            )
            waiting += 1
        elif not have and (meta.get("annotations") or {}).get(labels.ZONE):
            waiting += 1  # pinned before podium labelled zones: labelled once it is bound
        if truth or have:
            zones.add(str(truth or have))
    return actions, zones, waiting


def _repair(
    have: Obj, want: Manifest, *, waiting: int, act: Callable[..., Action]
) -> Action | None:
    """The patch that brings an existing policy back to what the gang needs, if it differs."""
    # podium's own word on what an object covers is its zone label (the selector may have
    # been edited): a job-wide one is narrowed only once no pod waits for its zone label.
    was, scoped = _zone_of(have), policies.policy_zone(want)
    if have.get("spec") == want["spec"] or (was is None and scoped and waiting):
        return None
    diff = mergepatch.diff(have.get("spec") or {}, want["spec"])
    head: dict[str, Any] = {"resourceVersion": metadata_of(have).get("resourceVersion")}
    if (metadata_of(have).get("labels") or {}) != want["metadata"]["labels"]:
        head["labels"] = mergepatch.diff(
            metadata_of(have).get("labels") or {}, want["metadata"]["labels"]
        )
    reason, detail = (
        ("policy-scope", f"scoped to the gang's pods in {scoped}" if scoped else "job-wide")
        if was != scoped
        else ("policy-drifted", f"spec fields edited: {', '.join(sorted(diff))}")
    )
    return act("repair", reason, detail, dict(have), {"metadata": head, "spec": diff})


def _gang_of(members: Sequence[Obj], namespace: str, gang: str, view: View) -> Gang | None:
    for pod in members:
        found = adapters.recognise(pod, namespace, view)
        if found is not None and found.key == gang:
            return found
    return None


def _annotate(obj: Obj, value: str | None) -> Manifest:
    """Set (or with None remove) the orphan mark, unless the object changed since it was read."""
    return {
        "metadata": {
            "resourceVersion": metadata_of(obj).get("resourceVersion"),
            "annotations": {ORPHAN_SINCE: value},
        }
    }


def _orphan(
    obj: Obj,
    reason: str,
    detail: str,
    now: datetime,
    tuning: Tuning,
    act: Callable[[Verb, str, str, Manifest, Manifest | None], Action],
) -> Action | None:
    meta = metadata_of(obj)
    since = parse_time((meta.get("annotations") or {}).get(ORPHAN_SINCE))
    if since is not None:
        if (now - since).total_seconds() >= tuning.grace_seconds:
            detail = f"{detail} (orphaned since {since.isoformat()})"
            return act("delete", reason, detail, dict(obj), None)
        return None
    created = parse_time(meta.get("creationTimestamp"))
    if created is not None and (now - created).total_seconds() < tuning.grace_seconds:
        return None  # in flight: its pods may still be on their way
    mark = _annotate(obj, now.astimezone(UTC).isoformat(timespec="seconds"))
    return act("mark", reason, detail, dict(obj), mark)
