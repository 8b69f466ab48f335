"""What every framework adapter answers about a pod: which gang, which role, what the gang needs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from webhook import resources
from webhook.snapshot import Obj, Snapshot, controller_of

DemandSource = Literal["job", "env", "labels", "pod"]


@dataclasses.dataclass(frozen=True, slots=True)
class OwnerRef:
    """The object that owns podium's record and policy, so the garbage collector removes them."""

    api_version: str
    kind: str
    name: str
    uid: str

    def as_owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }

    @classmethod
    def from_reference(cls, ref: Mapping[str, Any]) -> OwnerRef:
        return cls(str(ref["apiVersion"]), str(ref["kind"]), str(ref["name"]), str(ref["uid"]))

    @classmethod
    def from_object(cls, obj: Obj) -> OwnerRef:
        meta = obj.get("metadata") or {}
        return cls(
            str(obj.get("apiVersion", "")),
            str(obj.get("kind", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PodGroup:
    """``count`` pods that each request ``requests``."""

    count: int
    requests: resources.Resources


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Gang:
    """One unit that must sit in one zone: a job, or one group of a group-wise job (LWS)."""

    framework: str
    owner: OwnerRef
    #: Unique per gang instance and a valid label value (≤ 63 chars): the job UID, plus a group
    #: suffix for group-wise jobs. It is the value of podium's trusted label on every member.
    key: str
    role: str
    coordinator: bool
    demand: tuple[PodGroup, ...]
    demand_source: DemandSource
    #: Controller-set labels every member carries: narrows the pods worth checking for membership.
    member_labels: Mapping[str, str]
    #: The job object's annotations, when the job is in the view (``podium.dev/skip`` lives here).
    job_annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def total(self) -> resources.Resources:
        return resources.sum_resources(resources.scale(g.requests, g.count) for g in self.demand)

    @property
    def display(self) -> str:
        return f"{self.owner.kind}/{self.owner.name}"


class Adapter(Protocol):
    """Recognise a pod of one framework; return None for pods of any other framework."""

    name: str

    def recognise(self, pod: Obj, namespace: str, view: Snapshot) -> Gang | None: ...


# -- helpers shared by adapters ---------------------------------------------------------------


def labels_of(obj: Obj) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations_of(obj: Obj | None) -> Mapping[str, str]:
    if obj is None:
        return {}
    return (obj.get("metadata") or {}).get("annotations") or {}


def controller(obj: Obj, api_group: str, kinds: Sequence[str]) -> Mapping[str, Any] | None:
    """The controller ownerReference if it is one of ``kinds`` in ``api_group``."""
    ref = controller_of(obj)
    if ref is None or ref.get("kind") not in kinds or not ref.get("uid") or not ref.get("name"):
        return None
    api_version = str(ref.get("apiVersion", ""))
    return ref if api_version.split("/", 1)[0] == api_group else None


def pod_only(pod: Obj) -> tuple[PodGroup, ...]:
    return (PodGroup(1, resources.pod_requests(pod.get("spec") or {})),)


def template_group(template: Obj | None, count: Any) -> PodGroup | None:
    """A PodGroup from a pod template and a replica count; None when either is unusable."""
    try:
        n = 1 if count is None else int(count)
    except (TypeError, ValueError):
        return None
    if n < 0 or not isinstance(template, Mapping):
        return None
    return PodGroup(n, resources.pod_requests(template.get("spec") or {}))


def env_world(pod: Obj, names: Sequence[str] = ("PET_NNODES", "WORLD_SIZE")) -> int | None:
    """The gang's pod count from launcher env (``PET_NNODES``, ``WORLD_SIZE``), if set literally."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        env = {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}
        for name in names:
            try:
                n = int(str(env[name]).split(":")[-1])  # PET_NNODES may be "min:max"
            except (KeyError, ValueError):
                continue
            if n > 0:
                return n
    return None


def fallback_demand(pod: Obj) -> tuple[tuple[PodGroup, ...], DemandSource]:
    """Without the job object: the env's world size times this pod, else this pod alone."""
    n = env_world(pod)
    one = resources.pod_requests(pod.get("spec") or {})
    if n:
        return (PodGroup(n, one),), "env"
    return (PodGroup(1, one),), "pod"
