"""podium with ``zone-chooser: auto`` on a control plane whose scheduler does gang and topology
placement (GenericWorkload + TopologyAwareWorkloadScheduling, scheduling.k8s.io/v1beta1): podium
finds the PodGroup API served (its dry-run probe), creates one PodGroup per gang owned by the job,
names it in every pod's ``spec.schedulingGroup``, pins nothing, and kube-scheduler places the
whole gang in the one zone where it fits. podium mode with the gates off is covered by
tests/e2e/test_podium.py on the session cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from testbed.controlplane import (
    SCHEDULER_GANG_GATES,
    SCHEDULER_GANG_RUNTIME_CONFIG,
    ApiError,
    LocalCluster,
    crd_files,
)
from testbed.podium import Podium, opted_in_namespace

from .conftest import controlplane_or_skip
from .test_podium import (
    JOB,
    REASON,
    create_concurrently,
    podium_objects,
    pytorch_pods,
    pytorchjob,
    serving,
    wait_bound,
)

pytestmark = pytest.mark.e2e

#: 8, 16 and 8 GPUs on 8-GPU nodes: three 4-GPU pods fit together only in zone-b.
ZONES = {"zone-a": [8], "zone-b": [8, 8], "zone-c": [8]}
PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"


@pytest.fixture(scope="module")
def gang_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(
        controlplane_or_skip(),
        tmp_path_factory.mktemp("scheduler-mode-controlplane"),
        feature_gates=SCHEDULER_GANG_GATES,
        runtime_config=SCHEDULER_GANG_RUNTIME_CONFIG,
    ) as cluster:
        cluster.create_fake_nodes(ZONES)
        cluster.install_crds(crd_files())
        cluster.create_namespace("podium-system")  # where podium's probe is sent
        yield cluster


@pytest.fixture(scope="module")
def podium(
    gang_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    server = Podium(
        gang_cluster, tmp_path_factory.mktemp("podium-auto"), config="zone-chooser: auto\n"
    )
    with serving(server):
        yield server


@pytest.fixture
def ns(gang_cluster: LocalCluster, podium: Podium) -> Iterator[str]:
    with opted_in_namespace(gang_cluster, f"sched-{uuid.uuid4().hex[:4]}") as name:
        yield name


def test_auto_finds_the_scheduler_and_the_gang_lands_in_one_zone(
    gang_cluster: LocalCluster, podium: Podium, ns: str
) -> None:
    job = pytorchjob(gang_cluster, ns, "llama", workers=2, gpus=4)
    uid = job["metadata"]["uid"]
    specs = pytorch_pods(job, workers=2, gpus=4)
    # A gang goes to the scheduler only when podium reads its size from the job. The pods come
    # at once, as an operator's do: a pod admitted before podium's watch has delivered the job
    # reads the job first (serve/owners.py), so no wait is needed here.
    pods = create_concurrently(gang_cluster, specs)
    groups = {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods}
    assert len(groups) == 1 and None not in groups, groups
    (group,) = groups
    for p in pods:
        assert p["metadata"]["labels"][JOB] == uid
        assert p["metadata"]["annotations"][REASON] == "scheduler-chooses"
        assert "affinity" not in p["spec"]  # no pin: the scheduler chooses
    podgroup = gang_cluster.request("GET", PODGROUPS.format(ns=ns) + f"/{group}")
    assert podgroup["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert podgroup["spec"]["schedulingConstraints"] == {
        "topology": [{"key": "topology.kubernetes.io/zone"}]
    }
    assert [(o["kind"], o["uid"]) for o in podgroup["metadata"]["ownerReferences"]] == [
        ("PyTorchJob", uid)
    ]
    zones = wait_bound(gang_cluster, ns, [p["metadata"]["name"] for p in pods])
    assert set(zones.values()) == {"zone-b"}, zones
    records, policies = podium_objects(gang_cluster, ns)
    assert len(records) == 1 and len(policies) == 1
    assert records[0]["data"]["zoneChooser"] == "scheduler" and records[0]["data"]["zone"] == ""
    # Job-wide: the scheduler keeps the gang in one zone; no pod is relabelled after binding.
    assert policies[0]["spec"]["endpointSelector"] == {"matchLabels": {JOB: uid}}
    audit = [r for r in podium.audit_records() if r.get("namespace") == ns and not r["dryRun"]]
    assert len(audit) == 3 and {r["outcome"] for r in audit} == {"grouped"}
    created = [e["outcome"] for r in audit for e in r["effects"] if e["kind"] == "PodGroup"]
    assert created.count("created") == 1


def test_dry_run_creates_no_podgroup(gang_cluster: LocalCluster, ns: str) -> None:
    job = pytorchjob(gang_cluster, ns, "dry", workers=1, gpus=4)
    (first, _) = pytorch_pods(job, workers=1, gpus=4)
    got = gang_cluster.request(
        "POST", f"/api/v1/namespaces/{ns}/pods", first, query={"dryRun": "All"}
    )
    assert got["spec"]["schedulingGroup"]["podGroupName"]
    with pytest.raises(ApiError) as missing:
        gang_cluster.request(
            "GET", PODGROUPS.format(ns=ns) + f"/{got['spec']['schedulingGroup']['podGroupName']}"
        )
    assert missing.value.status == 404
