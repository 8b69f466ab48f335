"""A held gang the autoscaler can see: which zone to grow, and the CapacityBuffer that asks for
it. Pure.

Autoscalers (Cluster Autoscaler, Karpenter) make nodes only for pods the scheduler marked
``Unschedulable``; a pod behind podium's gate never is, so a gang that fits no zone would wait
for room nobody makes. With ``capacity-buffers: on`` the release plan (``release.plan``) asks
`Grower.ask` for every ready gang that fits nowhere, and the releaser writes what it answers: a
PodTemplate — the gang's pod as the scheduler sees it (its requests, node selection and
tolerations) pinned to one zone — and a CapacityBuffer (``autoscaling.x-k8s.io/v1beta1``, SIG
Autoscaling's API that both implement) with ``replicas`` of it, both owned by the job. The
autoscaler places the buffer's pods on the zone's free room first and makes nodes for the rest;
once the zone has room for the whole gang the plan releases it there as usual, and the releaser
deletes the buffer before it ungates a pod (a buffer refills: left in place it would make nodes
again for the room the gang's pods take).

The rules:

* **Which zones may grow**: ``buffer-zones`` (empty: every zone some node is in), narrowed by the
  zone requirements of the pods' own ``nodeSelector`` and required node affinity.
* **Which zone**: the one where the fewest new nodes make the gang fit — its pods packed first
  onto the zone's free room (less the pods already heading there, as the release plan counts
  it), the rest onto new nodes shaped like the zone's largest node (else the cluster's);
  ties: the zone's name. A zone is kept once asked, until its deadline.
* **How many**: ``replicas`` is every pod of the gang that asks for the primary resource (with
  one pod shape: the widest pod's, the gang's need divided by its request, rounded up). Not
  only those that do not fit: the autoscaler puts buffer pods on existing free room before it
  makes nodes (Karpenter's provisioner schedules them with the pending pods), so a buffer of only
  the missing pods would leave the zone short by exactly the free room it found.
* **Caps**: a buffer asks at most ``buffer-max-per-gang`` of the primary resource, podium's
  buffers together at most ``buffer-max-total`` (0: no cap). A gang over a cap gets no buffer
  and waits as without buffers, saying why.
* **Deadline**: a zone asked for ``buffer-deadline-seconds`` without the gang fitting is given
  up: with ``buffer-on-deadline: next-zone`` the next zone not asked yet is asked; when none is
  left, or with ``hold-timeout``, the buffer is *stopped* — ``replicas: 0``, kept as the gang's
  memory of the zones it tried — and the gang waits as without buffers (``hold-timeout-seconds``
  then applies, counted from its first hold).

The buffer's annotations are that memory: ``podium.dev/zone`` (the zone asked, empty when
stopped), ``podium.dev/buffer-tried`` (zones given up, in order) and ``podium.dev/buffer-since``
(when this zone was first asked).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from webhook.core import labels, resources, selectors, zones
from webhook.core.adapters.base import Gang, PodGroup
from webhook.core.objects import Obj, metadata_of, parse_time
from webhook.core.policies import Manifest
from webhook.core.settings import BufferDeadline, CapacityBuffers, Settings
from webhook.core.view import ClusterView, PodSummary

API_VERSION = "autoscaling.x-k8s.io/v1beta1"
KIND = "CapacityBuffer"
TEMPLATE_API_VERSION = "v1"
TEMPLATE_KIND = "PodTemplate"
#: ``podium.dev/component`` of a buffer and its template.
COMPONENT = "capacity-buffer"
TRIED = labels.PREFIX + "buffer-tried"
SINCE = labels.PREFIX + "buffer-since"
#: The buffer pod's one container: never run (an autoscaler only simulates the pod).
IMAGE = "registry.k8s.io/pause:3.10"


@dataclasses.dataclass(frozen=True, slots=True)
class Existing:
    """A buffer of podium's as the view holds it."""

    namespace: str
    name: str
    gang_key: str
    #: The zone asked; "" once stopped.
    zone: str
    tried: tuple[str, ...]
    since: datetime | None
    replicas: int
    #: What it asks of the primary resource in all (replicas × the pod's request).
    asked: int
    #: The autoscaler's ``Provisioning`` condition: (status, reason, message), or None.
    provisioning: tuple[str, str, str] | None
    uid: str = ""
    #: The job that owns it: (apiVersion, kind, name, uid), or None.
    owner: tuple[str, str, str, str] | None = None

    @classmethod
    def from_object(cls, obj: Obj, primary: str) -> Existing:
        meta = metadata_of(obj)
        notes = meta.get("annotations") or {}
        spec = obj.get("spec") or {}
        replicas = int(spec.get("replicas") or 0)
        per = resources.to_units(primary, notes.get(_PER_POD) or 0)
        condition = next(
            (
                c
                for c in (obj.get("status") or {}).get("conditions") or []
                if isinstance(c, Mapping) and c.get("type") == "Provisioning"
            ),
            None,
        )
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            gang_key=str((meta.get("labels") or {}).get(labels.JOB) or ""),
            zone=str(notes.get(labels.ZONE) or ""),
            tried=tuple(z for z in str(notes.get(TRIED) or "").split(",") if z),
            since=parse_time(str(notes.get(SINCE) or "")),
            replicas=replicas,
            asked=replicas * per,
            provisioning=(
                (
                    str(condition.get("status") or ""),
                    str(condition.get("reason") or ""),
                    str(condition.get("message") or ""),
                )
                if condition is not None
                else None
            ),
            uid=str(meta.get("uid") or ""),
            owner=next(
                (
                    (
                        str(r.get("apiVersion")),
                        str(r.get("kind")),
                        str(r.get("name")),
                        str(r.get("uid")),
                    )
                    for r in meta.get("ownerReferences") or []
                    if isinstance(r, Mapping) and r.get("kind") and r.get("name")
                ),
                None,
            ),
        )

    def target(self) -> Manifest:
        """The buffer as the writer deletes it (guarded by its UID)."""
        meta: dict[str, object] = {"name": self.name, "namespace": self.namespace}
        if self.uid:
            meta["uid"] = self.uid
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}

    def template_target(self) -> Manifest:
        meta = {"name": self.name, "namespace": self.namespace}
        return {"apiVersion": TEMPLATE_API_VERSION, "kind": TEMPLATE_KIND, "metadata": meta}


#: The buffer pod's request of the primary resource, on the buffer (for ``Existing.asked``).
_PER_POD = labels.PREFIX + "buffer-per-pod"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Want:
    """The buffer one held gang should have now: asking ``zone``, or stopped (``zone`` None)."""

    namespace: str
    name: str
    gang: Gang
    zone: str | None
    replicas: int
    #: The buffer pod's requests (the gang's widest pod).
    pod: resources.Resources
    primary: str
    tried: tuple[str, ...]
    since: datetime
    #: New nodes podium counted for ``zone`` (what the autoscaler makes may differ).
    new_nodes: int
    #: What the buffer there says: its Provisioning condition, when there is one.
    existing: Existing | None
    #: Why the buffer is what it is (for the held reason and the audit entry).
    detail: str
    #: The pod spec the template carries (the gang's constraint pinned to ``zone``).
    spec: Obj = dataclasses.field(default_factory=dict, compare=False)

    @property
    def live(self) -> bool:
        return self.zone is not None

    @property
    def asked(self) -> int:
        return self.replicas * self.pod.get(self.primary, 0) if self.live else 0

    @property
    def changed(self) -> bool:
        """What the view holds differs from this: the releaser writes it."""
        old = self.existing
        return (
            old is None
            or old.zone != (self.zone or "")
            or old.replicas != (self.replicas if self.live else 0)
            or old.tried != self.tried
        )

    def manifests(self) -> tuple[Manifest, Manifest]:
        """The PodTemplate and the CapacityBuffer, owned by the job and labelled as podium's."""
        owner = self.gang.owner.as_owner_reference()
        meta_labels = {
            labels.MANAGED_BY: labels.MANAGER,
            labels.COMPONENT: COMPONENT,
            labels.JOB: self.gang.key,
        }
        template: Manifest = {
            "apiVersion": TEMPLATE_API_VERSION,
            "kind": TEMPLATE_KIND,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": dict(meta_labels),
                "ownerReferences": [owner],
            },
            "template": {
                "metadata": {"labels": {labels.COMPONENT: COMPONENT}},
                "spec": dict(self.spec),
            },
        }
        notes = {
            labels.ZONE: self.zone or "",
            TRIED: ",".join(self.tried),
            SINCE: self.since.astimezone(UTC).isoformat(timespec="seconds"),
            _PER_POD: str(self.pod.get(self.primary, 0)),
        }
        buffer: Manifest = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": dict(meta_labels),
                "annotations": notes,
                "ownerReferences": [owner],
            },
            "spec": {
                "podTemplateRef": {"name": self.name},
                "replicas": self.replicas if self.live else 0,
            },
        }
        return template, buffer


@dataclasses.dataclass(frozen=True, slots=True)
class Refused:
    """No buffer for this gang, and why (a cap; no zone may grow)."""

    why: str


def existing_buffers(view: ClusterView, primary: str) -> dict[tuple[str, str], Existing]:
    """podium's buffers in the view, by (namespace, name)."""
    out = {}
    for obj in view.objects_of(API_VERSION, KIND):
        meta = metadata_of(obj)
        if (meta.get("labels") or {}).get(labels.MANAGED_BY) != labels.MANAGER:
            continue
        found = Existing.from_object(obj, primary)
        out[found.namespace, found.name] = found
    return out


class Grower:
    """One release pass's buffers: what each held gang that fits nowhere should have
    (`ask`), and podium's buffers no gang wants any more (`unwanted`)."""

    def __init__(self, view: ClusterView, settings: Settings, now: datetime) -> None:
        self.view = view
        self.settings = settings
        self.now = now
        self.on = settings.capacity_buffers is CapacityBuffers.ON
        #: Read whether on or off: switched off, podium still deletes the buffers it made.
        self.existing = existing_buffers(view, settings.primary_resource)
        #: What podium's live buffers ask in all, less those a gang of this pass re-asks.
        self._asked = sum(e.asked for e in self.existing.values() if e.zone)
        self.wants: list[Want] = []

    def unwanted(self) -> list[Existing]:
        """podium's buffers this pass wants for no gang (released, fitting, gone, or
        ``capacity-buffers`` switched off): the releaser deletes them."""
        wanted = {(w.namespace, w.name) for w in self.wants}
        return [e for key, e in sorted(self.existing.items()) if key not in wanted]

    def ask(
        self,
        *,
        namespace: str,
        name: str,
        gang: Gang,
        held: Sequence[PodSummary],
        primary: str,
        rooms: Mapping[str, Sequence[resources.Resources]],
    ) -> Want | Refused | None:
        """The buffer this gang (ready, fitting no zone) should have: a live `Want` (it waits
        for the autoscaler), a stopped one (it waits as without buffers, having tried), a
        `Refused` (a cap, or no zone may grow) or None (``capacity-buffers: off``). ``rooms``:
        free room per node of each zone its pods may use now, heading pods counted (read
        only)."""
        if not self.on or not held:
            return None
        widest = max(held, key=lambda p: (p.requests.get(primary, 0), sum(p.requests.values())))
        pod = dict(widest.requests)
        per = pod.get(primary, 0)
        need = gang.total.get(primary, 0)
        replicas = math.ceil(need / per) if per else sum(g.count for g in gang.demand)
        constraint = widest.constraint or {}
        old = self.existing.get((namespace, name))
        if old is not None and old.zone:
            self._asked -= old.asked
        tried = old.tried if old is not None else ()
        since = old.since if old is not None and old.since is not None else self.now
        if old is not None and old.zone:
            expired = (self.now - since).total_seconds() >= self.settings.buffer_deadline_seconds
            if not expired:
                return self._want(
                    namespace, name, gang, old.zone, replicas, pod, primary, tried, since,
                    rooms, constraint, old,
                )  # fmt: skip
            tried = (*tried, old.zone)
            since = self.now
            if self.settings.buffer_on_deadline is BufferDeadline.HOLD_TIMEOUT:
                return self._stopped(namespace, name, gang, pod, primary, tried, old, "deadline")
        elif old is not None:
            return self._stopped(namespace, name, gang, pod, primary, tried, old, "")
        allowed = [z for z in self.allowed_zones(constraint) if z not in tried]
        scored = []
        for zone in allowed:
            count = new_nodes(
                replicas, pod, primary, rooms.get(zone, ()), self.shape(zone, constraint, primary)
            )
            if count is not None:
                scored.append((count, zone))
        if not scored:
            if tried:
                return self._stopped(namespace, name, gang, pod, primary, tried, old, "no-zone")
            return Refused(
                "no zone may grow for it (buffer-zones, and its pods' own node selection)"
            )
        _count, zone = min(scored)
        return self._want(
            namespace, name, gang, zone, replicas, pod, primary, tried, since, rooms,
            constraint, old,
        )  # fmt: skip

    def _want(
        self,
        namespace: str,
        name: str,
        gang: Gang,
        zone: str,
        replicas: int,
        pod: resources.Resources,
        primary: str,
        tried: tuple[str, ...],
        since: datetime,
        rooms: Mapping[str, Sequence[resources.Resources]],
        constraint: Obj,
        old: Existing | None,
    ) -> Want | Refused:
        asked = replicas * pod.get(primary, 0)
        cap, total = self.settings.buffer_max_per_gang, self.settings.buffer_max_total
        if cap and asked > cap:
            return Refused(
                f"a buffer for it would ask {resources.amount(primary, asked)}, over "
                f"buffer-max-per-gang {cap}"
            )
        if total and self._asked + asked > total:
            return Refused(
                f"a buffer for it would ask {resources.amount(primary, asked)} beside "
                f"{resources.amount(primary, self._asked)} podium's buffers ask already, over "
                f"buffer-max-total {total}"
            )
        self._asked += asked
        count = new_nodes(
            replicas, pod, primary, rooms.get(zone, ()), self.shape(zone, constraint, primary)
        )
        want = Want(
            namespace=namespace,
            name=name,
            gang=gang,
            zone=zone,
            replicas=replicas,
            pod=pod,
            primary=primary,
            tried=tried,
            since=since,
            new_nodes=count or 0,
            existing=old,
            detail=(
                f"CapacityBuffer {name} asks {zone} for {replicas} × "
                f"{resources.amount(primary, pod.get(primary, 0))}"
                + (f" ({count} new node(s) by podium's count)" if count else "")
                + (f"; given up before: {', '.join(tried)}" if tried else "")
            ),
            spec=template_spec(constraint, pod, self.settings.zone_label, zone),
        )
        self.wants.append(want)
        return want

    def _stopped(
        self,
        namespace: str,
        name: str,
        gang: Gang,
        pod: resources.Resources,
        primary: str,
        tried: tuple[str, ...],
        old: Existing | None,
        why: str,
    ) -> Want:
        since = old.since if old is not None and old.since is not None else self.now
        if why:
            since = self.now
        want = Want(
            namespace=namespace,
            name=name,
            gang=gang,
            zone=None,
            replicas=0,
            pod=pod,
            primary=primary,
            tried=tried,
            since=since,
            new_nodes=0,
            existing=old,
            detail=(
                f"the autoscaler brought no room within buffer-deadline-seconds "
                f"{self.settings.buffer_deadline_seconds:g} in {', '.join(tried) or 'any zone'}"
                "; it waits as without buffers"
            ),
        )
        self.wants.append(want)
        return want

    def allowed_zones(self, constraint: Obj) -> list[str]:
        """``buffer-zones`` (else every zone some node is in) that the pods' own zone
        requirements admit, sorted."""
        label = self.settings.zone_label
        known = self.settings.buffer_zones or {n.zone for n in self.view.nodes() if n.zone}
        return sorted(z for z in known if admits_zone(constraint, label, z))

    def shape(self, zone: str, constraint: Obj, primary: str) -> resources.Resources | None:
        """The allocatable of a new node in ``zone``, as podium guesses it: the largest (by the
        primary resource) of the zone's nodes the pods may use, else of the cluster's."""
        nodes = self.view.candidate_zones(constraint).get(zone)
        pool: Iterable[resources.Resources] = (
            [n.allocatable for n in nodes.nodes.values()]
            if nodes is not None and nodes.nodes
            else [n.allocatable for n in self.view.nodes()]
        )
        return max(pool, key=lambda a: (a.get(primary, 0), sorted(a.items())), default=None)


def admits_zone(constraint: Obj, zone_label: str, zone: str) -> bool:
    """The pod's ``nodeSelector`` and required node affinity admit a node in ``zone``, judged
    by their requirements on the zone label alone (a new node gets the rest)."""
    selector = constraint.get("nodeSelector") or {}
    if zone_label in selector and str(selector[zone_label]) != zone:
        return False
    terms = selectors.required_terms(constraint)
    if not terms:
        return True
    for term in terms:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") == zone_label]
        if all(
            selectors.matches_requirement(
                e.get("operator"), zone, [str(v) for v in e.get("values") or []]
            )
            for e in exprs
        ):
            return True
    return False


def new_nodes(
    replicas: int,
    pod: resources.Resources,
    primary: str,
    room: Sequence[resources.Resources],
    shape: resources.Resources | None,
) -> int | None:
    """How many new nodes of ``shape`` make ``replicas`` pods of ``pod`` fit, once as many as
    fit are packed onto ``room`` (not changed); None when a new node could not take one pod."""
    free = [dict(r) for r in room]
    left = 0
    for _ in range(replicas):
        if not zones.pack_into([PodGroup(1, pod)], free, primary):
            left += 1
    if not left:
        return 0
    if shape is None or not resources.fits(pod, shape):
        return None
    fresh: list[resources.Resources] = []
    while left:
        if not fresh or not zones.pack_into([PodGroup(1, pod)], fresh, primary):
            fresh.append(dict(shape))
            zones.pack_into([PodGroup(1, pod)], fresh, primary)
        left -= 1
    return len(fresh)


def template_spec(
    constraint: Obj, pod: resources.Resources, zone_label: str, zone: str
) -> dict[str, object]:
    """The buffer pod's spec: the gang's pod as a scheduler sees it — its requests (limits too
    for extended resources, which must equal them), node selection and tolerations — with the
    zone added to its ``nodeSelector``."""
    quantities = {
        k: f"{v}m" if k == resources.CPU else str(v)
        for k, v in sorted(pod.items())
        if v and k != resources.PODS
    }
    extended = {k: v for k, v in quantities.items() if "/" in k}
    container: dict[str, object] = {
        "name": "gang-pod",
        "image": IMAGE,
        "resources": {"requests": quantities, **({"limits": extended} if extended else {})},
    }
    spec: dict[str, object] = {
        "containers": [container],
        "nodeSelector": {**(constraint.get("nodeSelector") or {}), zone_label: zone},
    }
    terms = selectors.required_terms(constraint)
    if terms:
        required = {"nodeSelectorTerms": terms}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    if tolerations := constraint.get("tolerations"):
        spec["tolerations"] = list(tolerations)
    return spec


def provisioning_note(existing: Existing | None) -> str:
    """The autoscaler's word on a buffer, for the held reason: ``Provisioning: False
    (RequiresNewCapacity: 3/4 virtual pods required new capacity, 0 failed)``."""
    if existing is None or existing.provisioning is None:
        return "the autoscaler has not answered yet"
    status, reason, message = existing.provisioning
    said = ": ".join(p for p in (reason, message) if p)
    return f"Provisioning {status}" + (f" ({said})" if said else "")
