"""``topology-levels`` on the real apiserver, scheduler and kwok (issue 31, item 5).

zone-c's eight 8-GPU nodes get EKS's network labels for the test (removed afterwards):
``topology.k8s.aws/network-node-layer-2`` nn-c1 (nodes 0-3) and nn-c2 (4-7), and
``…-layer-3`` blocks nn-b1 (nodes 0, 1), nn-b2 (2, 3), nn-b3 (4, 5, 6) and nn-b4 (7).

* A 3 × 8-GPU PyTorchJob fits only zone-c (zone-a holds 8, zone-b 16); the tightest layer-3
  block with room for all of it is nn-b3 (24 free, none left). ``podium review`` of its last
  pod says so before it exists; once it does, the releaser ungates the gang with ``layer-2 In
  [nn-c2]`` and ``layer-3 In [nn-b3]`` added to each pod's required term, and kube-scheduler —
  whose LeastAllocated scoring alone would spread it over zone-c — binds every pod on nn-b3.
  The record, the pods, the audit entry, the GangReleased Event and ``podium doctor`` say it.
* A 5 × 8-GPU job (40 GPUs) fits zone-c but neither layer-2 domain (32 each) nor any block:
  it is released into the fewest blocks that hold it together — nn-b3 (24) and the tightest
  that completes it, nn-b1 (16) — ``layer-3 In [nn-b1, nn-b3]``, and bound on exactly their
  five nodes, leaving nn-b2 whole (alone, the scheduler would spread it over all eight).
* A 4 × 8-GPU job that requires layer-3 fits zone-c but no block of it (the biggest has 3
  nodes): it waits, and its pods' ``podium.dev/held``, the audit entry and ``podium doctor``
  name the level and the biggest block's room.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.controlplane import LocalCluster
from testbed.podium import Podium, doctor, opted_in_namespace, serving

from .test_hold import gated
from .test_hold_faults import events
from .test_podium import (
    create_concurrently,
    listed,
    pytorch_pods,
    pytorchjob,
    wait_bound,
    wait_until_no_gpu_is_taken,
)
from .test_reconciler import ensure_namespace

pytestmark = pytest.mark.e2e

L2 = "topology.k8s.aws/network-node-layer-2"
L3 = "topology.k8s.aws/network-node-layer-3"
ZONE_KEY = "topology.kubernetes.io/zone"
#: zone-c's nodes in name order → (layer-2, layer-3).
LAYOUT = [("nn-c1", "nn-b1")] * 2 + [("nn-c1", "nn-b2")] * 2 + [("nn-c2", "nn-b3")] * 3
LAYOUT += [("nn-c2", "nn-b4")]
CONFIG = (
    f"zone-chooser: hold\nrelease-interval-seconds: 1\ntopology-levels: [{L2}, {L3}]\n"
    "policy-mode: cilium\n"
)
REPO = Path(__file__).resolve().parents[2]
MERGE = "application/merge-patch+json"


def zone_c_nodes(cluster: LocalCluster) -> list[str]:
    nodes = cluster.request("GET", "/api/v1/nodes")["items"]
    return sorted(
        n["metadata"]["name"] for n in nodes if n["metadata"]["labels"].get(ZONE_KEY) == "zone-c"
    )


def label_nodes(cluster: LocalCluster, values: dict[str, tuple[str | None, str | None]]) -> None:
    for name, (l2, l3) in values.items():
        patch = {"metadata": {"labels": {L2: l2, L3: l3}}}
        cluster.request("PATCH", f"/api/v1/nodes/{name}", patch, content_type=MERGE)


@pytest.fixture(scope="module")
def layered(local_cluster: LocalCluster) -> Iterator[dict[str, tuple[str, str]]]:
    """zone-c's nodes labelled with two EKS network layers; the labels go afterwards."""
    names = zone_c_nodes(local_cluster)
    assert len(names) == len(LAYOUT), names
    layout = dict(zip(names, LAYOUT, strict=True))
    label_nodes(local_cluster, dict(layout))
    try:
        yield layout
    finally:
        label_nodes(local_cluster, dict.fromkeys(names, (None, None)))


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster,
    tmp_path_factory: pytest.TempPathFactory,
    layered: dict[str, tuple[str, str]],
) -> Iterator[Podium]:
    ensure_namespace(local_cluster, "podium-system")  # for the leader's Lease
    server = Podium(local_cluster, tmp_path_factory.mktemp("topology"), config=CONFIG)
    with serving(server, unregister=True) as started:
        yield started


def podium_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.ops.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )


def get_pods_wide(cluster: LocalCluster, ns: str, layout: dict[str, tuple[str, str]]) -> str:
    """``kubectl get pods -o wide`` with the node's zone and layers beside."""
    nodes = {n["metadata"]["name"]: n for n in cluster.request("GET", "/api/v1/nodes")["items"]}
    rows = [("NAME", "STATUS", "NODE", "ZONE", "LAYER-2", "LAYER-3")]
    for p in sorted(listed(cluster, "v1", "Pod", ns), key=lambda p: p["metadata"]["name"]):
        node = p["spec"].get("nodeName") or "<none>"
        found = (nodes.get(node) or {}).get("metadata", {}).get("labels", {})
        status = "SchedulingGated" if gated(p) else (p.get("status") or {}).get("phase", "")
        rows.append(
            (
                p["metadata"]["name"],
                status,
                node,
                found.get(ZONE_KEY, ""),
                found.get(L2, ""),
                found.get(L3, ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def node_labels(cluster: LocalCluster) -> str:
    nodes = cluster.request("GET", "/api/v1/nodes")["items"]
    out = []
    for n in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        found = n["metadata"]["labels"]
        keys = [ZONE_KEY, L2, L3]
        out.append(f"{n['metadata']['name']}: " + ", ".join(f"{k}={found.get(k)}" for k in keys))
    return "\n".join(out)


def review_of(cluster: LocalCluster, ns: str, pod: dict[str, object], tmp_path: Path) -> str:
    """``podium snapshot -n NS`` then ``podium review POD --cluster … -o wide``: its output."""
    snap = podium_cli("snapshot", "--kubeconfig", str(cluster.kubeconfig), "-n", ns)
    assert snap.returncode == 0, snap.stderr
    (tmp_path / "snap.json").write_text(snap.stdout)
    (tmp_path / "podium.yaml").write_text(CONFIG)
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    args = ["--cluster", str(tmp_path / "snap.json"), "--config", str(tmp_path / "podium.yaml")]
    review = podium_cli("review", str(tmp_path / "pod.json"), *args, "-o", "wide")
    assert review.returncode == 0, review.stderr
    return review.stdout


def test_a_gang_is_released_into_the_tightest_block_and_bound_there(
    local_cluster: LocalCluster,
    podium: Podium,
    layered: dict[str, tuple[str, str]],
    tmp_path: Path,
) -> None:
    wait_until_no_gpu_is_taken(local_cluster)
    with opted_in_namespace(local_cluster, "topo", seen_by=podium) as ns:
        job = pytorchjob(local_cluster, ns, "llama", workers=2)  # 3 × 8 GPUs
        pods = pytorch_pods(job, workers=2)
        first = create_concurrently(local_cluster, pods[:2])
        assert all(gated(p) for p in first)

        # What podium review says of the last pod, before it exists: held, and the releaser
        # would release the gang into zone-c, block nn-b3.
        review = review_of(local_cluster, ns, pods[2], tmp_path)
        domain = f"{L2}=nn-c2,{L3}=nn-b3"
        assert f"release now into zone zone-c, domain {domain}" in " ".join(review.split()), review
        create_concurrently(local_cluster, pods[2:])
        names = [p["metadata"]["name"] for p in pods]
        zones = wait_bound(local_cluster, ns, names)
        assert set(zones.values()) == {"zone-c"}
        bound = {p["metadata"]["name"]: p for p in listed(local_cluster, "v1", "Pod", ns)}
        on = {n: bound[n]["spec"]["nodeName"] for n in names}
        assert {layered[node] for node in on.values()} == {("nn-c2", "nn-b3")}, on
        for name in names:
            pod = bound[name]
            assert pod["metadata"]["annotations"]["podium.dev/topology"] == domain
            (term,) = pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert term["matchExpressions"][-2:] == [
                {"key": L2, "operator": "In", "values": ["nn-c2"]},
                {"key": L3, "operator": "In", "values": ["nn-b3"]},
            ]
        (record,) = [
            c
            for c in listed(local_cluster, "v1", "ConfigMap", ns)
            if c["metadata"].get("labels", {}).get("podium.dev/component") == "decision"
        ]
        assert record["data"]["topology"] == domain
        (entry,) = [
            r
            for r in podium.audit_records()
            if r.get("namespace") == ns and r.get("outcome") == "released"
        ]
        assert entry["domain"] == domain and "tightest of 1" in entry["topology"]
        local_cluster.wait_for(
            "the GangReleased Event",
            lambda: any(
                e.get("reason") == "GangReleased" for e in events(local_cluster, ns, "llama")
            ),
        )
        (event,) = [
            e for e in events(local_cluster, ns, "llama") if e.get("reason") == "GangReleased"
        ]
        assert f"into zone zone-c, domain {domain}" in event["note"]
        config = str(tmp_path / "podium.yaml")  # written by review_of
        code, report, _ = doctor(local_cluster, "-n", ns, "--config", config)
        (verdict,) = report["jobs"]
        assert code == 0 and verdict["verdict"] == "ok", verdict
        assert verdict["note"].startswith(f"released into {domain}: all 3 bound pod(s) run there")
        table = podium_cli(
            "doctor", "--kubeconfig", str(local_cluster.kubeconfig), "-n", ns, "--config", config
        )
        print("\n--- node labels ---\n" + node_labels(local_cluster))
        print("\n--- kubectl get pods -o wide (+ node labels) ---")
        print(get_pods_wide(local_cluster, ns, layered))
        print("\n--- podium review (last pod, before it existed) ---\n" + review)
        print(
            "--- audit entry ---\n"
            + json.dumps({k: entry[k] for k in ("zone", "domain", "topology", "detail")}, indent=1)
        )
        print("--- GangReleased ---\n" + event["note"])
        print("--- podium doctor -n NS -o json (job) ---\n" + json.dumps(verdict, indent=1))
        print("--- podium doctor -n NS ---\n" + table.stdout + table.stderr)


def test_a_gang_no_block_fits_is_bound_in_the_fewest_blocks_that_hold_it(
    local_cluster: LocalCluster,
    podium: Podium,
    layered: dict[str, tuple[str, str]],
) -> None:
    wait_until_no_gpu_is_taken(local_cluster)
    with opted_in_namespace(local_cluster, "topo-few", seen_by=podium) as ns:
        job = pytorchjob(local_cluster, ns, "big", workers=4)  # 5 × 8 GPUs
        pods = pytorch_pods(job, workers=4)
        create_concurrently(local_cluster, pods)
        names = [p["metadata"]["name"] for p in pods]
        assert set(wait_bound(local_cluster, ns, names).values()) == {"zone-c"}
        bound = {p["metadata"]["name"]: p for p in listed(local_cluster, "v1", "Pod", ns)}
        on = {n: bound[n]["spec"]["nodeName"] for n in names}
        assert sorted(layered[node][1] for node in on.values()) == ["nn-b1"] * 2 + ["nn-b3"] * 3
        domain = f"{L2}=nn-c1,nn-c2,{L3}=nn-b1,nn-b3"
        pod = bound[names[0]]
        assert pod["metadata"]["annotations"]["podium.dev/topology"] == domain
        (term,) = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert term["matchExpressions"][-1] == {
            "key": L3,
            "operator": "In",
            "values": ["nn-b1", "nn-b3"],
        }
        (entry,) = [
            r
            for r in podium.audit_records()
            if r.get("namespace") == ns and r.get("outcome") == "released"
        ]
        assert entry["domain"] == domain, entry
        assert f"the fewest {L3} domains with room for all of it together: 2" in entry["topology"]
        print("\n--- kubectl get pods -o wide (+ node labels) ---")
        print(get_pods_wide(local_cluster, ns, layered))
        print(
            "--- audit entry ---\n"
            + json.dumps({k: entry[k] for k in ("domain", "topology")}, indent=1)
        )


def test_a_required_level_too_small_for_the_gang_waits_saying_why(
    local_cluster: LocalCluster,
    podium: Podium,
    layered: dict[str, tuple[str, str]],
    tmp_path: Path,
) -> None:
    wait_until_no_gpu_is_taken(local_cluster)
    with opted_in_namespace(local_cluster, "topo-req", seen_by=podium) as ns:
        job = pytorchjob(local_cluster, ns, "wide", workers=3)  # 4 × 8 GPUs
        pods = pytorch_pods(job, workers=3)
        for p in pods:
            p["metadata"]["annotations"] = {"podium.dev/required-topology": L3}
        created = create_concurrently(local_cluster, pods)
        assert all(gated(p) for p in created)
        names = [p["metadata"]["name"] for p in created]
        why = (
            f"requires one {L3} domain with 32 nvidia.com/gpu free; the roomiest, nn-b3, has "
            "24 nvidia.com/gpu free of 24 nvidia.com/gpu on 3 node(s)"
        )

        def held_whys() -> set[str]:
            found = [
                p for p in listed(local_cluster, "v1", "Pod", ns) if p["metadata"]["name"] in names
            ]
            return {
                (p["metadata"].get("annotations") or {}).get("podium.dev/held", "") for p in found
            }

        local_cluster.wait_for(
            "every held pod to say which level waits",
            lambda: all(w.startswith(why) for w in held_whys()),
            timeout=30,
        )
        live = listed(local_cluster, "v1", "Pod", ns)
        assert all(gated(p) and not p["spec"].get("nodeName") for p in live)
        waits = [
            r
            for r in podium.audit_records()
            if r.get("namespace") == ns and r.get("action") == "wait"
        ]
        assert waits and waits[-1]["topology"].startswith(why), waits[-1]
        (tmp_path / "podium.yaml").write_text(CONFIG)
        code, report, _ = doctor(local_cluster, "-n", ns, "--config", str(tmp_path / "podium.yaml"))
        (verdict,) = report["jobs"]
        assert (code, verdict["verdict"]) == (0, "held") and verdict["held"].startswith(why)
        (shown,) = held_whys()
        print("\n--- kubectl get pods -o wide (+ node labels) ---")
        print(get_pods_wide(local_cluster, ns, layered))
        print("--- podium.dev/held ---\n" + shown)
        print(
            "--- audit entry (wait) ---\n"
            + json.dumps({k: waits[-1][k] for k in ("detail", "result", "topology")}, indent=1)
        )
        print("--- podium doctor -n NS -o json (job) ---\n" + json.dumps(verdict, indent=1))
