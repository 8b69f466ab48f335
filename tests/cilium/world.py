"""The small cluster the verdict matrix runs in, and podium's part in it, from podium's real engine.

Pods (all in two zones, ``zone-a`` and ``zone-b``):

* ``j1``, ``j2``, ``j3``: the master and two workers of PyTorchJob ``llama`` in ``team-a`` (a
  namespace podium is enabled for), admitted by podium's engine (``engine.decide``) one after the
  other, each seeing the record and policy the earlier admissions created;
* ``notebook``: another pod of ``team-a`` (not a training pod: podium leaves it alone);
* ``prometheus`` in ``monitoring``, ``coredns`` (``k8s-app=kube-dns``) in ``kube-system``.

Placements (where the job's pods end up):

* ``co-located``: the gang fits zone-a only; podium pins all three there;
* ``split-unpinned``: no zone has room for the gang and ``noFit: unpinned``: podium labels the
  pods but pins none; the scheduler puts j3 in zone-b;
* ``split-fail-open``: j1 and j2 pinned to zone-a; podium failed open on j3 (admitted unchanged:
  no podium label at all), which lands in zone-b.

Every pod carries its zone under ``topology.kubernetes.io/zone`` (copied from its node at
binding, as KEP-4742 does) and under ``podium.dev/zone``, the key the zone-isolation fixtures use
(podium stamps it on the pods it pins from phase 2 of issue 13 on; the matrix stamps it on every
pod so that an admin's zone isolation covers all of them).

Policies under test (``Mode``): ``none`` (podium writes no policy: the baseline), ``cilium`` and
``kubernetes`` (podium's real policy in that mode: the one ``engine.decide`` asks for), and
``cilium-zone-scoped`` (a demonstration of the target form of issue 13, see zone_scoped.py).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.builders import PodBuilder, namespace, node
from tests.cilium import zone_scoped
from tests.cilium.oracle import Flow, Pod
from tests.cilium.podium_api import ClusterView, engine, labels, policies, reviews, settings
from tests.scenarios import NS, pytorch_pod, pytorchjob

POLICIES = Path(__file__).resolve().parent / "policies"
ZONES = ("zone-a", "zone-b")
TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
#: The pod label phase 2 of issue 13 stamps on pinned pods (today podium writes it as an
#: annotation only); the zone-isolation fixtures key on it.
PODIUM_ZONE = "podium.dev/zone"
#: A fixed job UID, so that names and labels (and the generated docs) are the same every run.
JOB_UID = "5f0c6d8e-1c1e-4b8e-9d3a-2a6f1c0b7e11"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

JOB_PODS = ("j1", "j2", "j3")
PORTS = (29500, 30000, 40000)
PROTOS = ("TCP", "UDP")


class Placement(enum.StrEnum):
    CO_LOCATED = "co-located"
    SPLIT_UNPINNED = "split-unpinned"
    SPLIT_FAIL_OPEN = "split-fail-open"


class Mode(enum.StrEnum):
    NONE = "none"
    CILIUM = "cilium"
    KUBERNETES = "kubernetes"
    #: Demonstration only: the zone-scoped form phase 2 will build (zone_scoped.py).
    CILIUM_ZONE_SCOPED = "cilium-zone-scoped"


#: Flow classes, the matrix's columns, in order.
CLASSES = (
    "job↔job same zone",
    "job↔job cross zone",
    "other→job",
    "job→other",
    "job→DNS",
    "monitoring→job",
)


@dataclasses.dataclass(frozen=True, slots=True)
class PolicySet:
    """A cluster's own policies (fixtures in policies/) and its cilium-config ``labels``."""

    name: str
    files: tuple[str, ...]
    description: str
    #: cilium-config ``labels`` (None: Cilium's default label filter).
    label_prefixes: tuple[str, ...] | None = None
    #: The cluster's configuration is wrong for podium (its policy cannot select the job).
    misconfigured: bool = False
    #: Sets that exist to show what Cilium v1.15 does (their fixtures parse there).
    on_old_cilium: bool = True

    def policies(self) -> list[dict[str, Any]]:
        return [doc for f in self.files for doc in load_fixture(f)]


#: cilium-config ``labels`` an admin needs for topology-keyed zone isolation: any include switches
#: Cilium to whitelist mode, so podium's key and every label another policy selects on must be
#: listed too (app.kubernetes.io, namespace and service-account labels are always kept).
TOPOLOGY_LABELS = ("k8s:topology.kubernetes.io/zone", "k8s:podium.dev/", "k8s:k8s-app")

SETS: tuple[PolicySet, ...] = (
    PolicySet("none", (), "no cluster policy"),
    PolicySet("ns-default-deny-cnp", ("ns-default-deny-cnp.yaml",), "team-a default deny (CNP)"),
    PolicySet(
        "ns-default-deny-netpol",
        ("ns-default-deny-netpol.yaml",),
        "team-a default deny (NetworkPolicy)",
    ),
    PolicySet(
        "zone-allowlist", ("zone-allowlist.yaml",), "per-zone CCNPs allow same-zone peers only"
    ),
    PolicySet(
        "zone-allowlist-topology",
        ("zone-allowlist-topology.yaml",),
        "the same on topology.kubernetes.io/zone, default label filter",
    ),
    PolicySet(
        "zone-allowlist-topology+labels",
        ("zone-allowlist-topology.yaml",),
        f"the same, cilium-config labels: {' '.join(TOPOLOGY_LABELS)}",
        label_prefixes=TOPOLOGY_LABELS,
    ),
    PolicySet(
        "ns-default-deny-cnp+zone-labels-only",
        ("ns-default-deny-cnp.yaml",),
        "team-a default deny, cilium-config labels: k8s:topology.kubernetes.io/zone",
        label_prefixes=("k8s:topology.kubernetes.io/zone",),
        misconfigured=True,
    ),
    PolicySet("zone-deny", ("zone-deny.yaml",), "per-zone CCNPs deny other zones"),
    PolicySet(
        "zone-deny-additive",
        ("zone-deny-additive.yaml",),
        "the same with enableDefaultDeny false/false",
    ),
    PolicySet("port-range-deny", ("port-range-deny.yaml",), "CCNP denies ingress on 29501-34768"),
    PolicySet(
        "cluster-default-deny-dns",
        ("cluster-default-deny-dns.yaml",),
        "CCNP default deny (not kube-system), DNS allowed",
    ),
    PolicySet(
        "zone-nodes",
        ("zone-nodes.yaml",),
        "host policies (nodeSelector) deny the other zone's nodes",
        on_old_cilium=False,
    ),
)
SET_BY_NAME = {s.name: s for s in SETS}


@functools.cache
def _fixture(name: str) -> tuple[str, ...]:
    return tuple(
        yaml.safe_dump(doc) for doc in yaml.safe_load_all((POLICIES / name).read_text()) if doc
    )


def load_fixture(name: str) -> list[dict[str, Any]]:
    """The objects of one fixture file (fresh copies)."""
    return [yaml.safe_load(doc) for doc in _fixture(name)]


# -- the cluster and podium's admissions -----------------------------------------------------


def _nodes(placement: Placement) -> list[dict[str, Any]]:
    # The gang (master + 2 workers, 8 GPUs each) needs 24 GPUs: zone-a has 32 and zone-b 16
    # when it should fit zone-a only; 16 and 16 when it should fit nowhere.
    a_nodes = 2 if placement is Placement.SPLIT_UNPINNED else 4
    return [
        *(node(f"a-{i}", "zone-a") for i in range(a_nodes)),
        *(node(f"b-{i}", "zone-b") for i in range(2)),
    ]


def _settings(placement: Placement, mode: settings.PolicyMode) -> settings.Settings:
    no_fit = (
        settings.NoFit.UNPINNED
        if placement is Placement.SPLIT_UNPINNED
        else settings.NoFit.PIN_MOST_FREE
    )
    return settings.Settings(policy_mode=mode, no_fit=no_fit)


@dataclasses.dataclass(frozen=True, slots=True)
class Admitted:
    """What podium's engine made of the cluster's pods, in one placement and policy mode."""

    #: name → the pod as created (after podium's patch, or unchanged).
    pods: Mapping[str, dict[str, Any]]
    #: name → the zone the pod runs in.
    zones: Mapping[str, str]
    #: The policies podium asked for (at most one: a gang has one policy).
    policies: tuple[dict[str, Any], ...]
    #: The gang podium recognised, for the builder cross-check.
    gang: Any


def _source_pods() -> dict[str, dict[str, Any]]:
    pj = pytorchjob("llama", workers=2, gpus=8, uid=JOB_UID)
    return {
        "j1": pytorch_pod(pj, "master", 0).obj(),
        "j2": pytorch_pod(pj, "worker", 0).obj(),
        "j3": pytorch_pod(pj, "worker", 1).obj(),
        "notebook": PodBuilder(NS, name="notebook").label("app", "notebook").obj(),
        "prometheus": PodBuilder("monitoring", name="prometheus")
        .label("app.kubernetes.io/name", "prometheus")
        .obj(),
        "coredns": PodBuilder("kube-system", name="coredns").label("k8s-app", "kube-dns").obj(),
        "_job": pj,
    }


NAMESPACES = {
    NS: namespace(NS),
    "monitoring": namespace("monitoring", enabled=False),
    "kube-system": namespace("kube-system", enabled=False),
}


@functools.cache
def admit(placement: Placement, mode: settings.PolicyMode) -> Admitted:
    """Admit the cluster's pods with podium's engine, in order, as the apiserver would."""
    source = _source_pods()
    job = source.pop("_job")
    conf = _settings(placement, mode)
    objects: list[dict[str, Any]] = [*NAMESPACES.values(), *_nodes(placement), job]
    out: dict[str, dict[str, Any]] = {}
    asked: list[dict[str, Any]] = []
    gang = None
    for name, pod in source.items():
        if placement is Placement.SPLIT_FAIL_OPEN and name == "j3":
            out[name] = pod  # podium failed open: the pod is admitted unchanged
            continue
        doc = reviews.review_for_pod(pod)
        doc["request"]["namespace"] = pod["metadata"]["namespace"]
        view = ClusterView.from_objects(objects, zone_label=conf.zone_label)
        decision = engine.decide(reviews.from_document(doc), view, conf, now=NOW)
        out[name] = decision.patched if decision.patched is not None else pod
        objects.extend(decision.effects)  # the record and policy now exist for later pods
        if decision.policy is not None:
            asked.append(decision.policy)
        gang = decision.gang or gang
    zones = dict.fromkeys(out, "zone-a")
    if placement is not Placement.CO_LOCATED:
        zones["j3"] = "zone-b"
    # Where podium pinned the job's pods: the placement must be one podium can lead to.
    pinned = {name: _pinned_zone(out[name]) for name in JOB_PODS}
    expected = {
        Placement.CO_LOCATED: {"j1": "zone-a", "j2": "zone-a", "j3": "zone-a"},
        Placement.SPLIT_UNPINNED: {"j1": None, "j2": None, "j3": None},
        Placement.SPLIT_FAIL_OPEN: {"j1": "zone-a", "j2": "zone-a", "j3": None},
    }[placement]
    assert pinned == expected, f"{placement}: podium pinned {pinned}"
    return Admitted(pods=out, zones=zones, policies=tuple(asked), gang=gang)


def _pinned_zone(pod: Mapping[str, Any]) -> str | None:
    terms = (
        ((pod.get("spec") or {}).get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    for term in terms:
        for expr in term.get("matchExpressions", []):
            if expr.get("key") == TOPOLOGY_ZONE and expr.get("operator") == "In":
                return str(expr["values"][0])
    return None


def cilium_pods(admitted: Admitted) -> list[Pod]:
    """The pods as Cilium sees them: their labels after admission and binding."""
    out = []
    for name, pod in admitted.pods.items():
        meta = pod["metadata"]
        zone = admitted.zones[name]
        pod_labels = dict(meta.get("labels") or {})
        stamped = pod_labels.get(PODIUM_ZONE)
        assert stamped in (None, zone), f"podium stamped {stamped} on {name}, placed in {zone}"
        pod_labels.update({TOPOLOGY_ZONE: zone, PODIUM_ZONE: zone})
        ns = meta["namespace"]
        ns_labels = NAMESPACES[ns]["metadata"]["labels"]
        out.append(Pod(name, ns, pod_labels, ns_labels))
    return out


def podium_policies(placement: Placement, mode: Mode) -> list[dict[str, Any]]:
    """The policies podium writes for the job in this mode (none for ``Mode.NONE``)."""
    if mode is Mode.CILIUM_ZONE_SCOPED:
        job_wide = podium_policies(placement, Mode.CILIUM)
        zones = sorted({admit(placement, settings.PolicyMode.CILIUM).zones[p] for p in JOB_PODS})
        return [zone_scoped.demo_zone_scoped(p, zones) for p in job_wide]
    policy_mode = {
        Mode.NONE: settings.PolicyMode.NONE,
        Mode.CILIUM: settings.PolicyMode.CILIUM,
        Mode.KUBERNETES: settings.PolicyMode.KUBERNETES,
    }[mode]
    admitted = admit(placement, policy_mode)
    return [dict(p) for p in admitted.policies]


def pods(placement: Placement) -> list[Pod]:
    """The pods of a placement (the same in every policy mode)."""
    return cilium_pods(admit(placement, settings.PolicyMode.CILIUM))


# -- flows -----------------------------------------------------------------------------------


def _ports(src: str, dst: str) -> list[Flow]:
    return [Flow(src, dst, proto, port) for proto in PROTOS for port in PORTS]  # type: ignore[arg-type]


def flows(placement: Placement) -> dict[str, list[Flow]]:
    """The flows of each class in a placement (a class may have none: no cross-zone pair)."""
    zones = admit(placement, settings.PolicyMode.CILIUM).zones
    same, cross = [], []
    for a in JOB_PODS:
        for b in JOB_PODS:
            if a == b or "j1" not in (a, b):
                continue
            (same if zones[a] == zones[b] else cross).extend(_ports(a, b))
    return {
        CLASSES[0]: same,
        CLASSES[1]: cross,
        CLASSES[2]: _ports("notebook", "j1"),
        CLASSES[3]: _ports("j1", "notebook"),
        CLASSES[4]: [Flow("j1", "coredns", "UDP", 53), Flow("j1", "coredns", "TCP", 53)],
        CLASSES[5]: _ports("prometheus", "j1"),
    }


def all_flows(placement: Placement) -> list[Flow]:
    return [f for fs in flows(placement).values() for f in fs]


def class_of(placement: Placement, flow: Flow) -> str:
    return next(c for c, fs in flows(placement).items() if flow in fs)


def same_job_same_zone(placement: Placement, flow: Flow) -> bool:
    """Between two pods of the job, in one zone: the only flows podium may open."""
    return flow in flows(placement)[CLASSES[0]]


def same_job(flow: Flow) -> bool:
    return flow.src in JOB_PODS and flow.dst in JOB_PODS


def check_builder(placement: Placement, mode: Mode) -> None:
    """The engine's policy is what podium's policy builder makes of the gang (no other path)."""
    if mode in (Mode.NONE, Mode.CILIUM_ZONE_SCOPED):
        return
    policy_mode = settings.PolicyMode(mode.value)
    admitted = admit(placement, policy_mode)
    built = policies.build_policy(gang=admitted.gang, namespace=NS, mode=policy_mode)
    assert list(admitted.policies) == [built]
    assert built["metadata"]["labels"][labels.JOB] == admitted.gang.key
