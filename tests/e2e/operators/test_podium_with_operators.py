"""podium beside the real operators: the operator creates the pods, podium pins each gang.

Per framework the operator's own example (frameworks.py) is submitted in a namespace opted in to
podium (``podium.dev/enabled=true``); once the operator's pods exist and are bound, the whole
outcome is checked: every pod of a gang pinned to one zone (node affinity and the bound node's
zone label), a reason per pod, exactly one decision record and one policy per gang, owned by an
object of the pod's owner chain and labelled as podium's, and an audit record for every pod.
Opt-in like the smoke tests: ``PODIUM_E2E_OPERATORS=all`` (or a comma list of build names).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from testbed.controlplane import LocalCluster
from testbed.observe import Observation, api_path, observe, summarize
from testbed.operators import OperatorPool
from testbed.operators.frameworks import FRAMEWORKS
from testbed.podium import PIN, Podium, opted_in_namespace, serving

from .conftest import framework_params, needs, ready_for_podium

pytestmark = pytest.mark.e2e

ZONE_KEY = "topology.kubernetes.io/zone"
JOB = "podium.dev/job"
ZONE = "podium.dev/zone"
REASON = "podium.dev/reason"
MANAGED_BY = ("app.kubernetes.io/managed-by", "podium")
#: Reasons that mean podium chose a zone for the gang (not a fallback that leaves it unpinned).
PINNED_REASONS = frozenset(
    {"best-fit", "most-free", "recorded", "members-placed", "coordinator-placed"}
)


@dataclass(frozen=True)
class Gangs:
    """How many gangs podium should see in the framework's example, and what owns them."""

    count: int = 1
    #: the kind of the object podium's record and policy are owned by
    owner_kind: str = ""


#: The frameworks in the order the issue asks for them; the rest follow.
ORDER = (
    "pytorchjob",
    "mpijob",
    "jobset",
    "leaderworkerset",
    "pytorchjob-elastic",
    "mpijob-launcher-as-worker",
    "trainjob",
    "raycluster",
    "volcanojob",
    "tfjob",
    "xgboostjob",
    "paddlejob",
    "jaxjob",
)

GANGS: dict[str, Gangs] = {
    "pytorchjob": Gangs(owner_kind="PyTorchJob"),
    "pytorchjob-elastic": Gangs(owner_kind="PyTorchJob"),
    "tfjob": Gangs(owner_kind="TFJob"),
    "xgboostjob": Gangs(owner_kind="XGBoostJob"),
    "paddlejob": Gangs(owner_kind="PaddleJob"),
    "jaxjob": Gangs(owner_kind="JAXJob"),
    "mpijob": Gangs(owner_kind="MPIJob"),
    "mpijob-launcher-as-worker": Gangs(owner_kind="MPIJob"),
    "jobset": Gangs(owner_kind="JobSet"),
    "trainjob": Gangs(owner_kind="JobSet"),
    # Two groups of three: each group is a gang of its own, with its own zone decision.
    "leaderworkerset": Gangs(count=2, owner_kind="LeaderWorkerSet"),
    "raycluster": Gangs(owner_kind="RayCluster"),
    "volcanojob": Gangs(owner_kind="Job"),
}


def test_every_framework_is_covered() -> None:
    assert set(ORDER) == set(FRAMEWORKS) == set(GANGS)


@pytest.fixture(scope="module")
def podium_beside_operators(
    operator_cluster: LocalCluster,
    operator_pool: OperatorPool,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Podium]:
    """podium serving for ``operator_cluster``, with Cilium's policy CRDs installed so it writes
    its policies; the webhook configuration is removed again afterwards.

    The requested operators (and so their CRDs) are started first, as on a cluster where podium
    is installed beside them: podium retries a kind whose CRD is missing only every 30 s, and
    until then an adapter that verifies the owner chain (LWS) does not recognise the pods."""
    ready_for_podium(operator_cluster, operator_pool)
    with serving(
        Podium(operator_cluster, tmp_path_factory.mktemp("podium-operators"), config=PIN),
        unregister=True,
    ) as server:
        yield server


def _podium_objects(cluster: LocalCluster, namespace: str) -> dict[str, list[dict[str, Any]]]:
    found = {}
    for api_version, kind in (("v1", "ConfigMap"), ("cilium.io/v2", "CiliumNetworkPolicy")):
        items = cluster.request("GET", api_path(api_version, kind, namespace))["items"]
        found[kind] = [
            o for o in items if o["metadata"].get("labels", {}).get(MANAGED_BY[0]) == MANAGED_BY[1]
        ]
    return found


def _affinity_zones(pod: dict[str, Any]) -> list[str]:
    terms = (
        pod["spec"]
        .get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    return sorted(
        {
            value
            for term in terms
            for expression in term.get("matchExpressions", [])
            if expression["key"] == ZONE_KEY and expression["operator"] == "In"
            for value in expression["values"]
        }
    )


def _node_zones(cluster: LocalCluster) -> dict[str, str | None]:
    return {
        n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE_KEY)
        for n in cluster.request("GET", "/api/v1/nodes")["items"]
    }


def _check_pinned(pod: dict[str, Any], node_zones: dict[str, str | None]) -> str:
    """Assert podium pinned ``pod`` (reason, zone annotation, trusted label, node affinity and,
    once bound, the node's zone); return the zone."""
    pod_name = pod["metadata"]["name"]
    labels = pod["metadata"].get("labels", {})
    annotations = pod["metadata"].get("annotations", {})
    assert JOB in labels, f"{pod_name}: podium did not recognise the pod ({annotations})"
    reason = annotations.get(REASON)
    assert reason in PINNED_REASONS, (pod_name, reason, annotations)
    zone: str = annotations[ZONE]
    assert labels.get(ZONE) == zone, pod_name
    assert _affinity_zones(pod) == [zone], pod_name
    node = pod["spec"].get("nodeName")
    if node:
        assert node_zones[node] == zone, (pod_name, node)
    return zone


def _check_outcome(
    seen: Observation,
    objects: dict[str, list[dict[str, Any]]],
    podium: Podium,
    expected: Gangs,
    node_zones: dict[str, str | None],
) -> None:
    gangs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    outcome = []
    for pod in seen.pods:
        zone = _check_pinned(pod, node_zones)
        gangs[pod["metadata"]["labels"][JOB]].append(pod)
        reason = pod["metadata"]["annotations"][REASON]
        outcome.append((pod["metadata"]["name"], zone, reason, pod["spec"].get("nodeName")))
    print("\n".join(" ".join(str(x) for x in row) for row in outcome))

    # Each gang sits in one zone; as many gangs as the example makes.
    assert len(gangs) == expected.count, sorted(gangs)
    zones = {key: {p["metadata"]["annotations"][ZONE] for p in pods} for key, pods in gangs.items()}
    assert all(len(z) == 1 for z in zones.values()), zones

    # One decision record and one policy per gang, owned by an object of the pods' chain.
    chain_uids = {ref["uid"]: ref["kind"] for chain in seen.owners.values() for ref in chain}
    for kind, items in objects.items():
        assert len(items) == expected.count, (kind, [o["metadata"]["name"] for o in items])
        for obj in items:
            owners = obj["metadata"].get("ownerReferences", [])
            assert len(owners) == 1, (kind, owners)
            assert owners[0]["uid"] in chain_uids, (kind, owners)
            assert owners[0]["kind"] == expected.owner_kind, (kind, owners)
            print(
                f"{kind} {obj['metadata']['name']} owned by {owners[0]['kind']}/{owners[0]['name']}"
            )
    record_zones = sorted(r["data"]["zone"] for r in objects["ConfigMap"])
    assert record_zones == sorted(z for zs in zones.values() for z in zs)

    # An audit record for every pod, with the zone it was pinned to.
    records = [r for r in podium.audit_records() if r.get("namespace") == seen.namespace]
    for pod in seen.pods:
        pod_name = pod["metadata"]["name"]
        generate = pod["metadata"].get("generateName") or "\0"
        mine = [
            r
            for r in records
            if r.get("pod") == pod_name or str(r.get("pod") or "").startswith(generate)
        ]
        assert mine, (pod_name, [r.get("pod") for r in records])
        assert {r.get("zone") for r in mine} == {pod["metadata"]["annotations"][ZONE]}, mine


def _delete_job_and_wait_cleaned_up(cluster: LocalCluster, seen: Observation) -> None:
    """Delete the submitted job as its owner would: the garbage collector must take podium's
    decision records and policies with it (they are owned by the job or an object it owns)."""
    job = seen.job
    cluster.request(
        "DELETE",
        api_path(job["apiVersion"], job["kind"], seen.namespace, job["metadata"]["name"]),
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
    )

    def cleaned_up() -> bool:
        return not any(_podium_objects(cluster, seen.namespace).values())

    cluster.wait_for(
        f"podium's records and policies in {seen.namespace} to be collected with "
        f"{job['kind']}/{job['metadata']['name']}",
        cleaned_up,
        timeout=90,
    )


@pytest.mark.parametrize("name", framework_params(ORDER))
def test_podium_pins_what_the_real_operator_creates(
    name: str,
    operator_cluster: LocalCluster,
    operator_pool: OperatorPool,
    podium_beside_operators: Podium,
) -> None:
    framework = FRAMEWORKS[name]
    operator_pool.ensure(framework.operators)
    node_zones = _node_zones(operator_cluster)
    with opted_in_namespace(operator_cluster, f"podium-{name}") as namespace:
        seen = observe(operator_cluster, framework, operator_pool.builds, namespace)
        print("\n".join(summarize(seen)))
        assert len(seen.pods) >= framework.pods
        objects = _podium_objects(operator_cluster, namespace)
        _check_outcome(seen, objects, podium_beside_operators, GANGS[name], node_zones)
        _delete_job_and_wait_cleaned_up(operator_cluster, seen)


# --- the operator acts again on a running job -------------------------------------------------

REPLICA_TYPE = "training.kubeflow.org/replica-type"


def _pods(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")[
        "items"
    ]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _workers(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["name"]: p
        for p in pods
        if p["metadata"].get("labels", {}).get(REPLICA_TYPE) == "worker"
    }


def _the_zone(seen: Observation) -> str:
    """The one zone podium pinned the whole job to."""
    zones = {p["metadata"].get("annotations", {}).get(ZONE) for p in seen.pods}
    assert len(zones) == 1 and None not in zones, zones
    (zone,) = zones
    assert zone is not None
    return zone


def _one_record_and_policy(cluster: LocalCluster, namespace: str, zone: str) -> None:
    objects = _podium_objects(cluster, namespace)
    assert [len(objects["ConfigMap"]), len(objects["CiliumNetworkPolicy"])] == [1, 1], objects
    assert objects["ConfigMap"][0]["data"]["zone"] == zone


def _wait_recorded_audit(cluster: LocalCluster, podium: Podium, namespace: str, pod: str) -> None:
    """podium's audit trail has the pod's admission with reason ``recorded``. Waited for: podium
    writes its audit file from a background thread a moment after it answers, so an entry may
    not be on disk yet when the pod it admitted is already bound."""

    def recorded() -> bool:
        return any(
            r.get("namespace") == namespace
            and r.get("pod") == pod
            and r.get("reason") == "recorded"
            for r in podium.audit_records()
        )

    cluster.wait_for(f"podium's audit entry 'recorded' for {pod}", recorded, timeout=30)


@needs("trainingoperator")
def test_a_worker_the_operator_recreates_follows_the_record(
    operator_cluster: LocalCluster,
    operator_pool: OperatorPool,
    podium_beside_operators: Podium,
) -> None:
    """Delete a running worker: training-operator creates it again (same name, new UID) and
    podium pins the new pod to the recorded zone, with reason ``recorded``."""
    framework = FRAMEWORKS["pytorchjob"]
    operator_pool.ensure(framework.operators)
    node_zones = _node_zones(operator_cluster)
    cluster = operator_cluster
    with opted_in_namespace(cluster, "podium-recreate") as namespace:
        seen = observe(cluster, framework, operator_pool.builds, namespace)
        zone = _the_zone(seen)
        victim = sorted(_workers(seen.pods).items())[0][1]
        name, old_uid = victim["metadata"]["name"], victim["metadata"]["uid"]
        cluster.request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            query={"gracePeriodSeconds": "0"},
        )

        def recreated() -> dict[str, Any] | None:
            pod = _workers(_pods(cluster, namespace)).get(name)
            if pod and pod["metadata"]["uid"] != old_uid and pod["spec"].get("nodeName"):
                return pod
            return None

        cluster.wait_for(
            f"training-operator to recreate {name}", lambda: bool(recreated()), timeout=120
        )
        again = recreated()
        assert again is not None
        print(name, old_uid, "->", again["metadata"]["uid"], again["spec"]["nodeName"])
        assert _check_pinned(again, node_zones) == zone
        assert again["metadata"]["annotations"][REASON] == "recorded"
        _wait_recorded_audit(cluster, podium_beside_operators, namespace, name)
        _one_record_and_policy(cluster, namespace, zone)
        _delete_job_and_wait_cleaned_up(cluster, seen)


@needs("trainingoperator")
def test_an_elastic_job_scaled_from_2_to_4_workers_stays_in_its_zone(
    operator_cluster: LocalCluster,
    operator_pool: OperatorPool,
    podium_beside_operators: Podium,
) -> None:
    """Scale the elastic PyTorchJob (maxReplicas 4) from 2 to 4 workers: training-operator
    creates workers 2 and 3, and podium pins them where the first two run."""
    framework = FRAMEWORKS["pytorchjob-elastic"]
    operator_pool.ensure(framework.operators)
    node_zones = _node_zones(operator_cluster)
    cluster = operator_cluster
    with opted_in_namespace(cluster, "podium-elastic") as namespace:
        seen = observe(cluster, framework, operator_pool.builds, namespace)
        zone = _the_zone(seen)
        first = set(_workers(seen.pods))
        assert len(first) == 2, sorted(first)
        job = seen.job
        cluster.request(
            "PATCH",
            api_path(job["apiVersion"], job["kind"], namespace, job["metadata"]["name"]),
            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}},
            content_type="application/merge-patch+json",
        )

        def scaled() -> bool:
            workers = _workers(_pods(cluster, namespace))
            return len(workers) == 4 and all(p["spec"].get("nodeName") for p in workers.values())

        cluster.wait_for("4 bound workers of the elastic job", scaled, timeout=120)
        workers = _workers(_pods(cluster, namespace))
        for name, pod in sorted(workers.items()):
            print(name, pod["metadata"]["annotations"].get(REASON), pod["spec"]["nodeName"])
            assert _check_pinned(pod, node_zones) == zone, name
        added = set(workers) - first
        assert len(added) == 2, sorted(workers)
        for name in added:
            assert workers[name]["metadata"]["annotations"][REASON] == "recorded", name
            _wait_recorded_audit(cluster, podium_beside_operators, namespace, name)
        _one_record_and_policy(cluster, namespace, zone)
        _delete_job_and_wait_cleaned_up(cluster, seen)
