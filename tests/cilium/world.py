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
  pods with the job but pins none; the scheduler puts j3 in zone-b;
* ``split-fail-open``: j1 and j2 pinned to zone-a; podium failed open on j3 (admitted unchanged:
  no podium label at all), which lands in zone-b.

After admission the pods are bound and **podium's real reconciler** (``reconcile.plan``) runs
until it has nothing left to do: it labels the bound pods whose zone podium did not know at
admission (``split-unpinned``) with their node's zone and creates the policies of the zones the
job runs in. Every pod carries its zone under ``topology.kubernetes.io/zone`` (copied from its
node at binding, as KEP-4742 does). ``podium.dev/zone``, the key the zone-isolation fixtures use,
is podium's on the pods it admitted into the job (the matrix checks it names the zone the pod
runs in); the matrix stamps it on every other pod (notebook, monitoring, DNS, a fail-open j3) so
that an admin's zone isolation covers them too.

Policies under test (``Mode``): ``none`` (podium writes no policy: the baseline), ``cilium`` and
``kubernetes`` (podium's real policies in that mode, scoped to job and zone: the default),
``cilium-job-scope`` (``policy-scope: job``: one job-wide policy, the trade-off the setting
documents) and, on Cilium 1.15 only, ``cilium-create-policy`` (``old-cilium: create-policy``:
the policy written although the CRD has no ``enableDefaultDeny``). The engine sees the installed
CiliumNetworkPolicy CRD of the Cilium line under test (``cilium_crd``): on 1.15 it writes no
CiliumNetworkPolicy unless told to.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import os
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from testbed.paths import MODULES
from tests.builders import PodBuilder, namespace, node
from tests.cilium.oracle import Flow, Pod
from tests.cilium.podium_api import ClusterView, engine, labels, policies, reviews, settings
from tests.scenarios import NS, pytorch_pod, pytorchjob
from tests.schemas import CRDS
from webhook.core import adapters, mergepatch
from webhook.core.reconcile import Action, Owned, Tuning, plan

POLICIES = Path(__file__).resolve().parent / "policies"
ZONES = ("zone-a", "zone-b")
TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
#: podium's trusted zone label (issue 13): on the pods it pins, and on the bound pods of a job
#: whose zone it did not know at admission; the zone-isolation fixtures key on it.
PODIUM_ZONE = labels.ZONE
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
    #: ``policy-mode: cilium``, scoped to job and zone (the default).
    CILIUM = "cilium"
    #: ``policy-mode: kubernetes``, scoped to job and zone.
    KUBERNETES = "kubernetes"
    #: ``policy-mode: cilium`` with ``policy-scope: job``: one policy for the whole job.
    CILIUM_JOB_SCOPE = "cilium-job-scope"
    #: ``old-cilium: create-policy``: the policy written where the CRD lacks enableDefaultDeny.
    CILIUM_CREATE_POLICY = "cilium-create-policy"

    @property
    def settings(self) -> dict[str, Any]:
        """The settings that make this mode."""
        return {
            Mode.NONE: {"policy_mode": settings.PolicyMode.NONE},
            Mode.CILIUM: {"policy_mode": settings.PolicyMode.CILIUM},
            Mode.KUBERNETES: {"policy_mode": settings.PolicyMode.KUBERNETES},
            Mode.CILIUM_JOB_SCOPE: {
                "policy_mode": settings.PolicyMode.CILIUM,
                "policy_scope": settings.PolicyScope.JOB,
            },
            Mode.CILIUM_CREATE_POLICY: {
                "policy_mode": settings.PolicyMode.CILIUM,
                "old_cilium": settings.OldCilium.CREATE_POLICY,
            },
        }[self]


class Line(enum.StrEnum):
    """The Cilium line whose CRD podium sees (and whose engine judges)."""

    CURRENT = "oracle"
    OLD = "oracle115"


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


def _settings(placement: Placement, mode: Mode) -> settings.Settings:
    no_fit = (
        settings.NoFit.UNPINNED
        if placement is Placement.SPLIT_UNPINNED
        else settings.NoFit.PIN_MOST_FREE
    )
    # The placements are podium's pins at admission (zone-chooser: pin, not the default hold).
    return settings.Settings(zone_chooser=settings.ZoneChooser.PIN, no_fit=no_fit, **mode.settings)


@dataclasses.dataclass(frozen=True, slots=True)
class Admitted:
    """What podium made of the cluster's pods, in one placement and mode: its admissions, then
    its reconciler once the pods are bound."""

    #: name → the pod as it runs (after podium's patch, or unchanged; then the reconciler's).
    pods: Mapping[str, dict[str, Any]]
    #: name → the zone the pod runs in.
    zones: Mapping[str, str]
    #: The policies podium wrote for the gang, in name order.
    policies: tuple[dict[str, Any], ...]
    #: The gang podium recognised, for the builder cross-check.
    gang: Any
    #: The zone the gang's decision record names (None: unpinned).
    record_zone: str | None
    #: What the reconciler did, pass by pass: (verb, reason, kind) per action.
    reconciled: tuple[tuple[tuple[str, str, str], ...], ...] = ()


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


def _read_crd(path: Path) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return policies.slim_crd(crd)


@functools.cache
def cilium_crd(line: Line) -> dict[str, Any]:
    """The ciliumnetworkpolicies CRD (slim, as podium's watch cache keeps it) of the Cilium
    version the line's oracle module requires, from the Go module cache its build filled; else
    the repository's copy (testbed/crds, v1.19), with ``enableDefaultDeny`` dropped for the old
    line."""
    module = (MODULES / "cilium" / line.value / "go.mod").read_text()
    version = next(
        w.split()[-1] for w in module.splitlines() if w.strip().startswith("github.com/cilium/")
    )
    cache = os.environ.get("GOMODCACHE") or _go_env("GOMODCACHE")
    path = (
        Path(cache)
        / f"github.com/cilium/cilium@{version}"
        / "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml"
        if cache
        else None
    )
    if path is not None and path.is_file():
        return _read_crd(path)
    crd = _read_crd(CRDS / "cilium.io_ciliumnetworkpolicies.yaml")
    if line is Line.OLD:
        for version_ in crd["spec"]["versions"]:
            version_.pop("schema", None)
    return crd


def _go_env(name: str) -> str:
    try:
        out = subprocess.run(["go", "env", name], capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return out.stdout.strip()


def _bind(pod: dict[str, Any], zone: str) -> dict[str, Any]:
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = f"{zone[-1]}-0"  # a-0 or b-0: a node of that zone
    bound.setdefault("status", {})["phase"] = "Running"
    return bound


@functools.cache
def admit(placement: Placement, mode: Mode, line: Line = Line.CURRENT) -> Admitted:
    """Admit the cluster's pods with podium's engine, in order, as the apiserver would; bind them
    where the placement says; then run podium's reconciler until it has nothing left to do."""
    source = _source_pods()
    job = source.pop("_job")
    conf = _settings(placement, mode)
    crd = cilium_crd(line)
    objects: list[dict[str, Any]] = [*NAMESPACES.values(), *_nodes(placement), job, crd]
    out: dict[str, dict[str, Any]] = {}
    made: list[dict[str, Any]] = []
    gang = None
    for name, pod in source.items():
        if placement is Placement.SPLIT_FAIL_OPEN and name == "j3":
            out[name] = pod  # podium failed open: the pod is admitted unchanged
            continue
        doc = reviews.review_for_pod(pod)
        doc["request"]["namespace"] = pod["metadata"]["namespace"]
        view = ClusterView.from_objects(objects, zone_label=conf.zone_label, kept=adapters.KEPT)
        decision = engine.decide(reviews.from_document(doc), view, conf, now=NOW)
        out[name] = decision.patched if decision.patched is not None else pod
        objects.extend(decision.to_create)  # the record and policy now exist for later pods
        made.extend(decision.to_create)
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
    bound = {name: _bind(pod, zones[name]) for name, pod in out.items()}
    records = [m for m in made if m["kind"] == policies.RECORD_KIND]
    written = {m["metadata"]["name"]: m for m in made if m["kind"] != policies.RECORD_KIND}
    passes = [p for p, _, _ in reconcile(placement, conf, [job, crd, *records], bound, written)]
    record = records[0] if records else None
    return Admitted(
        pods=bound,
        zones=zones,
        policies=tuple(written[n] for n in sorted(written)),
        gang=gang,
        record_zone=(record["data"]["zone"] or None) if record else None,
        reconciled=tuple(passes),
    )


Pass = tuple[tuple[str, str, str], ...]


def reconcile(
    placement: Placement,
    conf: settings.Settings,
    objects: list[dict[str, Any]],
    pods: dict[str, dict[str, Any]],
    written: dict[str, dict[str, Any]],
) -> list[tuple[Pass, dict[str, dict[str, Any]], list[dict[str, Any]]]]:
    """Run podium's reconciler (``reconcile.plan``, its actions carried out as the apiserver
    would) on the cluster until it has nothing left to do; ``pods`` and ``written`` (podium's
    policies by name) change in place. Per pass: its actions, and the pods and policies after it."""
    records = [o for o in objects if o.get("kind") == policies.RECORD_KIND]
    out = []
    for _ in range(4):
        base = [*NAMESPACES.values(), *_nodes(placement), *objects]
        view = ClusterView.from_objects(
            [*base, *pods.values()], zone_label=conf.zone_label, kept=adapters.KEPT
        )
        owned = Owned(decisions=records, policies=list(written.values()))
        actions = plan(view, conf, owned=owned, now=NOW, tuning=Tuning())
        if not actions:
            return out
        for action in actions:
            _carry_out(action, pods, written)
        done = tuple((a.verb, a.reason, a.target[0]) for a in actions)
        out.append((done, copy.deepcopy(pods), [written[n] for n in sorted(written)]))
    raise AssertionError(f"the reconciler did not settle: {[p for p, _, _ in out]}")


def migration(placement: Placement) -> list[tuple[Pass, list[Pod], list[dict[str, Any]]]]:
    """A job admitted before podium scoped policies to zones — its pods without
    ``podium.dev/zone``, its policy job-wide — and what today's reconciler makes of it, pass by
    pass: (the pass's actions, the pods as Cilium sees them, podium's policies) after each, the
    state before the first pass first (no actions)."""
    admitted = admit(placement, Mode.CILIUM)
    conf = _settings(placement, Mode.CILIUM)
    pods = copy.deepcopy(dict(admitted.pods))
    for name in JOB_PODS:
        pod_labels = pods[name]["metadata"]["labels"]
        if labels.JOB in pod_labels:
            pod_labels.pop(PODIUM_ZONE, None)
    old = policies.build_policy(
        gang=admitted.gang,
        namespace=NS,
        mode=conf.policy_mode,
        scope=settings.PolicyScope.JOB,
        zone=None,
    )
    assert old is not None
    written = {old["metadata"]["name"]: old}
    record = policies.build_record(
        gang=admitted.gang,
        namespace=NS,
        zone=admitted.record_zone,
        reason="best-fit",
        detail="",
        decided_at=NOW.isoformat(),
    )
    job = _source_pods()["_job"]
    states = [((), copy.deepcopy(pods), [old])]
    states += reconcile(placement, conf, [job, cilium_crd(Line.CURRENT), record], pods, written)

    def seen(state_pods: dict[str, dict[str, Any]]) -> list[Pod]:
        return cilium_pods(dataclasses.replace(admitted, pods=state_pods))

    return [(done, seen(state_pods), written_) for done, state_pods, written_ in states]


def _carry_out(
    action: Action,
    pods: dict[str, dict[str, Any]],
    written: dict[str, dict[str, Any]],
) -> None:
    """One reconciler action, as the apiserver would carry it out."""
    kind, _, name = action.target
    if kind == "Pod":
        assert action.verb == "label" and action.patch is not None, action
        (key,) = [k for k, pod in pods.items() if pod["metadata"].get("name") == name]
        pods[key] = mergepatch.apply(pods[key], action.patch)
    elif action.verb == "create":
        written[name] = action.manifest
    elif action.verb == "repair" and action.patch is not None:
        written[name] = mergepatch.apply(written[name], action.patch)
    elif action.verb == "delete":
        del written[name]
    else:
        raise AssertionError(f"the reconciler asked for {action}")


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
    """The pods as Cilium sees them: their labels after admission, binding and reconciling."""
    out = []
    for name, pod in admitted.pods.items():
        meta = pod["metadata"]
        zone = admitted.zones[name]
        pod_labels = dict(meta.get("labels") or {})
        if labels.JOB in pod_labels:  # podium's: its zone label must be the truth, if any
            stamped = pod_labels.get(PODIUM_ZONE)
            assert stamped in (None, zone), f"podium stamped {stamped} on {name}, placed in {zone}"
        else:  # the admin's labelling of every other pod
            pod_labels[PODIUM_ZONE] = zone
        pod_labels[TOPOLOGY_ZONE] = zone
        ns = meta["namespace"]
        ns_labels = NAMESPACES[ns]["metadata"]["labels"]
        out.append(Pod(name, ns, pod_labels, ns_labels))
    return out


def podium_policies(
    placement: Placement, mode: Mode, line: Line = Line.CURRENT
) -> list[dict[str, Any]]:
    """The policies podium writes for the job in this mode (none for ``Mode.NONE``)."""
    return [dict(p) for p in admit(placement, mode, line).policies]


def pods(placement: Placement, mode: Mode = Mode.CILIUM, line: Line = Line.CURRENT) -> list[Pod]:
    """The pods of a placement, as podium left them in ``mode``."""
    return cilium_pods(admit(placement, mode, line))


# -- flows -----------------------------------------------------------------------------------


def _ports(src: str, dst: str) -> list[Flow]:
    return [Flow(src, dst, proto, port) for proto in PROTOS for port in PORTS]  # type: ignore[arg-type]


def flows(placement: Placement) -> dict[str, list[Flow]]:
    """The flows of each class in a placement (a class may have none: no cross-zone pair)."""
    zones = admit(placement, Mode.NONE).zones
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


def check_builder(placement: Placement, mode: Mode, line: Line = Line.CURRENT) -> None:
    """The policies under test are what podium's policy builder makes of the gang, one per zone
    its pods run in (scoped) or one for the job, and nothing else."""
    admitted = admit(placement, mode, line)
    conf = _settings(placement, mode)
    if mode is Mode.NONE or policies.withheld(conf, cilium_crd(line)):
        assert admitted.policies == ()
        return
    job_zones = {
        admitted.zones[p] for p in JOB_PODS if labels.JOB in admitted.pods[p]["metadata"]["labels"]
    }
    built = policies.build_policies(
        gang=admitted.gang,
        namespace=NS,
        mode=conf.policy_mode,
        scope=conf.policy_scope,
        zones=job_zones,
        record_zone=admitted.record_zone,
    )
    assert list(admitted.policies) == sorted(built, key=lambda p: p["metadata"]["name"])
    for policy in built:
        assert policy["metadata"]["labels"][labels.JOB] == admitted.gang.key
