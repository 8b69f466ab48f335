"""A held gang the autoscaler can see: podium's CapacityBuffer against real Karpenter.

Karpenter v1.15.0's KWOK provider (``testbed.karpenter``, feature gate ``CapacityBuffer``) runs
beside the local control plane (kube-apiserver, kube-scheduler, kube-controller-manager, kwok)
with one NodePool whose only instance type, 8 ``nvidia.com/gpu``, is offered in zone-a and
zone-b. The cluster starts with one 8-GPU node per zone. podium runs with
``capacity-buffers: on`` as the chart's ServiceAccount (the chart's RBAC, buffers included).

* A 4 × 8-GPU PyTorchJob fits no zone: podium holds it and creates one CapacityBuffer in the zone
  where the fewest new nodes make it fit (a tie: zone-a); Karpenter makes the nodes there, and
  only there; podium releases the gang whole into zone-a, where it binds, and deletes the
  buffer. No node appears in zone-b.
* With the NodePool at its limit, a gang no zone holds keeps waiting, said on its pods, with its
  buffer in place and Karpenter's own word on it — and no pod of it bound.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import karpenter
from testbed.controlplane import ApiError, LocalCluster
from testbed.podium import Podium, opted_in_namespace, serving
from tests.builders import owner_ref

from .conftest import controlplane_or_skip
from .test_podium import create_concurrently, pytorch_pods, pytorchjob
from .test_reconciler import ensure_namespace

pytestmark = pytest.mark.e2e

ZONE = "topology.kubernetes.io/zone"
ZONES = ("zone-a", "zone-b")
POOL = karpenter.POOL
BUFFERS = "/apis/autoscaling.x-k8s.io/v1beta1/namespaces/{ns}/capacitybuffers"
TEMPLATES = "/api/v1/namespaces/{ns}/podtemplates"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODEPOOL = f"/apis/karpenter.sh/v1/nodepools/{POOL}"
CONFIG = (
    "zone-chooser: hold\n"
    "release-interval-seconds: 1\n"
    "capacity-buffers: 'on'\n"
    "buffer-deadline-seconds: 600\n"
)
MERGE = "application/merge-patch+json"
#: Karpenter makes a node in seconds; the scheduler and podium follow within a pass.
GROW_TIMEOUT = 180


@pytest.fixture(scope="module")
def grown_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The control plane with one 8-GPU node per zone, the training CRDs and Karpenter's, a
    Ready KWOKNodeClass and the NodePool, and Karpenter running."""
    work = tmp_path_factory.mktemp("karpenter")
    with karpenter.autoscaled_cluster(controlplane_or_skip(), work, zones=ZONES) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def podium(
    grown_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    ensure_namespace(grown_cluster, "podium-system")
    server = Podium(grown_cluster, tmp_path_factory.mktemp("podium"), config=CONFIG)
    with serving(server) as started:
        yield started


@pytest.fixture
def ns(grown_cluster: LocalCluster, podium: Podium) -> Iterator[str]:
    with opted_in_namespace(grown_cluster, "grow") as name:
        yield name


def nodes_per_zone(cluster: LocalCluster) -> Counter[str]:
    items = cluster.request("GET", "/api/v1/nodes")["items"]
    return Counter(n["metadata"]["labels"].get(ZONE, "") for n in items)


def nodeclaims_per_zone(cluster: LocalCluster) -> Counter[str]:
    claims = cluster.request("GET", NODECLAIMS)["items"]
    return Counter((c["metadata"].get("labels") or {}).get(ZONE, "?") for c in claims)


def buffers_in(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.request("GET", BUFFERS.format(ns=ns))["items"]
    return items


def pods_in(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    return items


def gpu_job(cluster: LocalCluster, ns: str, name: str, pods: int) -> list[str]:
    """A PyTorchJob of ``pods`` × 8 GPUs and its pods, created as its operator would."""
    job = pytorchjob(cluster, ns, name, workers=pods - 1)
    created = create_concurrently(cluster, pytorch_pods(job, workers=pods - 1))
    assert all(p["metadata"]["ownerReferences"] == [owner_ref(job)] for p in created)
    return [p["metadata"]["name"] for p in created]


def zone_of(cluster: LocalCluster, node: str) -> str:
    labels = cluster.request("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"]
    return str(labels[ZONE])


def test_a_held_gang_grows_one_zone_and_is_released_whole_there(
    grown_cluster: LocalCluster, ns: str
) -> None:
    cluster = grown_cluster
    before = nodes_per_zone(cluster)
    claims_before = nodeclaims_per_zone(cluster)
    names = gpu_job(cluster, ns, "grow", 4)

    found: list[dict[str, Any]] = []

    def buffered() -> bool:
        found[:] = buffers_in(cluster, ns)
        return bool(found)

    cluster.wait_for("podium's CapacityBuffer", buffered, timeout=60)
    (buffer,) = found
    assert buffer["metadata"]["annotations"]["podium.dev/zone"] == "zone-a"
    assert buffer["spec"]["replicas"] == 4
    assert buffer["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    template = cluster.request(
        "GET", f"{TEMPLATES.format(ns=ns)}/{buffer['spec']['podTemplateRef']['name']}"
    )
    assert template["template"]["spec"]["nodeSelector"][ZONE] == "zone-a"
    # held: gated, unbound, saying it waits for the autoscaler
    for pod in pods_in(cluster, ns):
        assert pod["spec"].get("schedulingGates") and not pod["spec"].get("nodeName")

    def all_bound() -> bool:
        pods = pods_in(cluster, ns)
        return len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)

    cluster.wait_for("the gang to be bound", all_bound, timeout=GROW_TIMEOUT)
    zones = {zone_of(cluster, p["spec"]["nodeName"]) for p in pods_in(cluster, ns)}
    assert zones == {"zone-a"}, zones
    assert sorted(p["metadata"]["name"] for p in pods_in(cluster, ns)) == sorted(names)
    cluster.wait_for("the buffer to go", lambda: not buffers_in(cluster, ns), timeout=30)
    assert not cluster.request("GET", TEMPLATES.format(ns=ns))["items"]
    after = nodes_per_zone(cluster)
    claims = nodeclaims_per_zone(cluster) - claims_before
    print(f"\nnodes per zone: before {dict(before)}, after {dict(after)}")
    print(f"new NodeClaims per zone: {dict(claims)}")
    assert after["zone-b"] == before["zone-b"]
    assert after["zone-a"] - before["zone-a"] == claims["zone-a"] == 3
    assert set(claims) == {"zone-a"}


def test_a_gang_the_nodepool_cannot_grow_for_waits_visibly_and_whole(
    grown_cluster: LocalCluster, ns: str
) -> None:
    cluster = grown_cluster
    gpus = {z: n * 8 for z, n in nodes_per_zone(cluster).items()}
    in_pool = sum(8 for _ in cluster.request("GET", NODECLAIMS)["items"])
    # the pool may not grow past what it has now
    limits = {"spec": {"limits": {"nvidia.com/gpu": str(in_pool)}}}
    cluster.request("PATCH", NODEPOOL, limits, content_type=MERGE)
    claims_before = nodeclaims_per_zone(cluster)
    pods = max(gpus.values()) // 8 + 1
    name = f"big-{uuid.uuid4().hex[:4]}"
    gpu_job(cluster, ns, name, pods)
    try:
        answered: list[dict[str, Any]] = []

        def karpenter_answered() -> bool:
            answered[:] = [
                c
                for b in buffers_in(cluster, ns)
                for c in (b.get("status") or {}).get("conditions") or []
                if c.get("type") == "Provisioning"
            ]
            return bool(answered)

        cluster.wait_for("Karpenter's word on the buffer", karpenter_answered, timeout=90)
        (provisioning,) = answered
        assert provisioning["status"] == "False", provisioning

        def said() -> bool:
            return all(
                "CapacityBuffer"
                in (p["metadata"].get("annotations") or {}).get("podium.dev/held", "")
                and provisioning["reason"] in p["metadata"]["annotations"]["podium.dev/held"]
                for p in pods_in(cluster, ns)
            )

        cluster.wait_for("the held pods to say what they wait for", said, timeout=30)
        for pod in pods_in(cluster, ns):
            assert pod["spec"].get("schedulingGates") and not pod["spec"].get("nodeName")
        assert nodeclaims_per_zone(cluster) == claims_before
        print(f"\nheld: {pods_in(cluster, ns)[0]['metadata']['annotations']['podium.dev/held']}")
    finally:
        unlimited: dict[str, Any] = {"spec": {"limits": None}}
        with contextlib.suppress(ApiError):
            cluster.request("PATCH", NODEPOOL, unlimited, content_type=MERGE)
