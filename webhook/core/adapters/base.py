"""What every framework adapter answers about a pod: which gang, which role, what the gang needs."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from webhook.core import resources
from webhook.core.objects import (
    Obj,
    as_list,
    as_mapping,
    controller_ref,
    group_of,
    metadata_of,
    uid_of,
)

if TYPE_CHECKING:
    from webhook.core.view import View

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
        meta = metadata_of(obj)
        return cls(
            str(obj.get("apiVersion", "")),
            str(obj.get("kind", "")),
            str(meta.get("name", "")),
            str(meta.get("uid", "")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Kind:
    """A kind of object an adapter reads from the view: the watch cache lists and watches it."""

    api_version: str
    kind: str
    #: The resource name in the API path (``pytorchjobs``).
    plural: str
    namespaced: bool = True

    @property
    def group(self) -> str:
        return group_of(self.api_version)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reads:
    """What an adapter reads besides the pod under review, declared once: the watch cache
    watches ``kinds``; the view keeps of every *other* pod only the labels and annotations
    under ``pod_prefixes`` or named in ``pod_keys`` and the literal values of the ``pod_env``
    variables, and indexes pods by ``member_labels`` (those that name a gang's members,
    ``Gang.member_labels``). Pods themselves are always in the view."""

    kinds: tuple[Kind, ...]
    pod_prefixes: tuple[str, ...]
    pod_keys: frozenset[str] = frozenset()
    pod_env: frozenset[str] = frozenset()
    member_labels: frozenset[str]


#: The batch Jobs between a pod and its JobSet, or an MPIJob's launcher.
BATCH_JOB = Kind("batch/v1", "Job", "jobs")
#: Env with the gang's pod count, which ``fallback_demand`` reads for every framework.
WORLD_SIZE_ENV = ("PET_NNODES", "WORLD_SIZE")


@dataclasses.dataclass(frozen=True, slots=True)
class PodGroup:
    """``count`` pods that each request ``requests``."""

    count: int
    requests: resources.Resources


def total_of(demand: Sequence[PodGroup]) -> resources.Resources:
    """What all the groups' pods request together."""
    total: resources.Resources = {}
    for group in demand:
        for name, amount in group.requests.items():
            total[name] = total.get(name, 0) + amount * group.count
    return total


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
    #: The object people look at for this job, when it is not ``owner``: the TrainJob that
    #: controls a JobSet. podium's Events about the gang regard it.
    shown: OwnerRef | None = None

    @property
    def total(self) -> resources.Resources:
        return total_of(self.demand)

    @property
    def display(self) -> str:
        return f"{self.owner.kind}/{self.owner.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class Stage:
    """The pods of a gang that its operator creates before any other: the first stage of a staged
    start (MPI ``WaitForWorkersReady``, JobSet ``InOrder``/``dependsOn``, LWS ``LeaderReady``),
    or the minimum an elastic job runs with. The releaser decides the gang's zone once these
    exist (the rest come only after they run), fitting the whole gang's demand all the same."""

    #: How many pods that is.
    pods: int
    #: Why fewer than the gang's size, in words (``elasticPolicy.minReplicas 2``).
    why: str


class Adapter(Protocol):
    """Recognise a pod of one framework; return None for pods of any other framework."""

    name: str
    reads: Reads

    def recognise(self, pod: Obj, namespace: str, view: View) -> Gang | None: ...


# -- helpers shared by adapters ---------------------------------------------------------------
#
# Adapters read pods that anyone may write (and, offline, files anyone may hand to ``podium
# review``), so every helper here tolerates missing and ill-typed fields: a malformed pod is not a
# training pod, never an exception in the admission path.

_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def is_label_value(value: object) -> bool:
    """Whether ``value`` is a non-empty valid label value (podium writes gang keys as labels)."""
    return isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


#: Joins a job's UID and a group in the key of a per-group gang (LWS: ``<lws uid>-g<group>``).
GROUP_SUFFIX = "-g"


def group_gang_key(job_uid: str, group: str) -> str:
    """The gang key of one group of a group-wise job, cut to fit a label value."""
    return f"{job_uid}{GROUP_SUFFIX}{group}"[:63].rstrip("-_.")


def job_of_gang(gang: str, view: View) -> Mapping[str, Any]:
    """The ownerReference of the job a gang key names (its UID, or its UID before a group
    suffix), if the view holds it."""
    for uid in (gang, gang.rsplit(GROUP_SUFFIX, 1)[0]):
        job = view.by_uid(uid)
        if job is not None:
            meta = metadata_of(job)
            return {
                "apiVersion": job.get("apiVersion"),
                "kind": job.get("kind"),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            }
    return {}


def parse_count(value: object, default: int | None = None) -> int | None:
    """A non-negative int from an int or a decimal string; ``default`` when absent; else None."""
    if value is None:
        return default
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.isascii() and value.isdecimal() and len(value) <= 18:
        return int(value)
    if isinstance(value, int) and 0 <= value < 10**18:
        return value
    return None


def controller(obj: Obj, api_group: str, kinds: Sequence[str]) -> Mapping[str, Any] | None:
    """The controller ownerReference if it is one of ``kinds`` in ``api_group`` (``""``: core).

    Only a well-formed reference counts: string kind, name and apiVersion, and a UID that is a
    valid label value (every Kubernetes UID is), since the UID becomes the gang key.
    """
    ref = controller_ref(obj)
    if ref is None:
        return None
    kind, name, api_version = ref.get("kind"), ref.get("name"), ref.get("apiVersion")
    if not (isinstance(kind, str) and kind in kinds and isinstance(name, str) and name):
        return None
    if not (isinstance(api_version, str) and is_label_value(ref.get("uid"))):
        return None
    return ref if group_of(api_version) == api_group else None


def verified(view: View, ref: Mapping[str, Any], namespace: str) -> Obj | None:
    """The object ``ref`` points at, if the view holds it *with the same UID*.

    A different UID means a newer object reusing the name: it is not the one this pod belongs to.
    """
    obj = view.get(
        str(ref.get("apiVersion", "")),
        str(ref.get("kind", "")),
        namespace,
        str(ref.get("name", "")),
    )
    return obj if obj is not None and uid_of(obj) == ref.get("uid") else None


def requests_of(spec: object) -> resources.Resources:
    """``resources.pod_requests`` of a pod spec, after dropping whatever is not shaped like one;
    once per distinct shape (a job's templates are read again at every admission of its pods).
    The result is shared: do not change it."""
    return _REQUESTS(as_mapping(spec))


def _sane_requests(spec: Mapping[str, Any]) -> resources.Resources:
    return resources.pod_requests(
        {
            "containers": _containers(spec.get("containers")),
            "initContainers": _containers(spec.get("initContainers")),
            "overhead": _quantities(spec.get("overhead")),
        }
    )


_REQUESTS = resources.ByShape(_sane_requests)


def _containers(value: object) -> list[dict[str, Any]]:
    out = []
    for container in as_list(value):
        if not isinstance(container, Mapping):
            continue
        res = as_mapping(container.get("resources"))
        out.append(
            {
                "restartPolicy": container.get("restartPolicy"),
                "resources": {
                    "limits": _quantities(res.get("limits")),
                    "requests": _quantities(res.get("requests")),
                },
            }
        )
    return out


def _quantities(value: object) -> dict[str, Any]:
    # Whether each one parses is ``resources.parse_resource_list``'s business; here only what
    # can be hashed into a shape (``resources.ByShape``).
    return {
        name: quantity
        for name, quantity in as_mapping(value).items()
        if isinstance(name, str) and type(quantity) in (str, int, float)
    }


def template_group(template: Obj | None, count: Any) -> PodGroup | None:
    """A PodGroup from a pod template and a replica count; None when either is unusable."""
    n = parse_count(count, default=1)
    if n is None or not isinstance(template, Mapping):
        return None
    return PodGroup(n, requests_of(template.get("spec")))


def env_world(pod: Obj, names: Sequence[str] = WORLD_SIZE_ENV) -> int | None:
    """The gang's pod count from launcher env (``PET_NNODES``, ``WORLD_SIZE``), if set literally."""
    for container in as_list(as_mapping(pod.get("spec")).get("containers")):
        env = {
            e.get("name"): e.get("value")
            for e in as_list(as_mapping(container).get("env"))
            if isinstance(e, Mapping)
            and isinstance(e.get("name"), str)
            and isinstance(e.get("value"), str)
        }
        for name in names:
            try:
                n = int(str(env[name]).split(":")[-1])  # PET_NNODES may be "min:max"
            except (KeyError, ValueError):
                continue
            if n > 0:
                return n
    return None


def env_value(pod: Obj, name: str) -> str | None:
    """The literal value of env var ``name`` in the first container that sets one."""
    for container in as_list(as_mapping(pod.get("spec")).get("containers")):
        for env in as_list(as_mapping(container).get("env")):
            value = as_mapping(env).get("value")
            if as_mapping(env).get("name") == name and isinstance(value, str):
                return value
    return None


def fallback_demand(pod: Obj) -> tuple[tuple[PodGroup, ...], DemandSource]:
    """Without the job object: the env's world size times this pod, else this pod alone."""
    n = env_world(pod)
    one = requests_of(pod.get("spec"))
    if n:
        return (PodGroup(n, one),), "env"
    return (PodGroup(1, one),), "pod"


def job_groups(
    view: View, job: Obj | None, groups: Callable[[Obj], Sequence[PodGroup | None]]
) -> Sequence[PodGroup | None]:
    """``groups(job)``: the job's demand read from its pod templates, once per version of the job
    the view holds (``ClusterView.derived``); nothing without a job."""
    return () if job is None else view.derived(job, groups)


def demand_or_fallback(
    groups: Sequence[PodGroup | None], pod: Obj
) -> tuple[tuple[PodGroup, ...], DemandSource]:
    """The job's demand when any group is usable and non-empty, else ``fallback_demand``."""
    usable = tuple(g for g in groups if g is not None and g.count)
    return (usable, "job") if usable else fallback_demand(pod)
