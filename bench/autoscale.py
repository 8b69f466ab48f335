"""A held gang and a real autoscaler, three ways side by side: podium with CapacityBuffers,
podium with today's ``hold-timeout-seconds``, and podium off (the default scheduler alone).

    python -m bench.autoscale [--arms buffers,hold-timeout,off] [--pods 4] [--busy N] [--out DIR]

Each arm gets a fresh `testbed.karpenter.autoscaled_cluster`: the local control plane
(kube-apiserver, kube-scheduler, kube-controller-manager, kwok), one 8-GPU node in zone-a and one
in zone-b, and Karpenter v1.15.0's KWOK provider with one NodePool whose 8-GPU instance type is
offered in both zones. Then one PyTorchJob of ``--pods`` × 8 GPUs, its pods created at once as
its operator would, in a namespace podium enforces in (arm ``off``: no podium at all):

* ``buffers`` — ``capacity-buffers: 'on'``: the gang is held, one CapacityBuffer asks one zone,
  Karpenter grows it, podium releases the gang whole there.
* ``hold-timeout`` — ``hold-timeout-seconds: HOLD_TIMEOUT`` (``no-fit: pin-most-free``): the gang
  is held until the timeout, then released pinned to the roomiest zone; the pods that fit bind,
  the rest are ``Unschedulable`` and Karpenter grows that zone.
* ``off`` — no podium: every pod the two nodes can take binds at once, in whichever zone; the rest
  are ``Unschedulable`` and Karpenter makes nodes wherever its scheduler simulation puts them.

With ``--busy N`` each zone starts with N + 1 nodes, N of them full of other work (plain pods
pinned to the zone, in a namespace podium leaves alone): the gang could fit a zone emptied, so
``hold-timeout-seconds`` applies to it. Without (``--busy 0``, the default) no zone could hold the
gang even empty, and podium without buffers holds it as ``too-big`` (the hold timeout is for gangs
some zone could hold).

Measured per arm, by polling the apiserver every `POLL` seconds from just before the pods are
created: the seconds until every pod is bound (a kwok node runs a bound pod at once), the
NodeClaims Karpenter made per zone, the zones the job's pods ran in, and the GPU-hours held idle
by a partly bound gang — for each pod, its GPUs × the time from its binding until the gang's last
pod bound (a distributed job does not start before all its pods run). Prints a table and writes
``autoscale.json`` into ``--out`` when given. Times are of this machine at that moment (the
arms' ratios are what carries over), and Karpenter's own batching (1 s idle, 10 s most) is in
every arm.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from testbed import build, karpenter
from testbed.controlplane import ApiError, LocalCluster
from testbed.podium import Podium, serving

ARMS = ("buffers", "hold-timeout", "off")
ZONES = ("zone-a", "zone-b")
ZONE = "topology.kubernetes.io/zone"
GPUS = 8
HOLD_TIMEOUT = 5
POLL = 0.2
TIMEOUT = 300.0
CONFIG = {
    "buffers": "zone-chooser: hold\nrelease-interval-seconds: 1\ncapacity-buffers: 'on'\n",
    "hold-timeout": (
        f"zone-chooser: hold\nrelease-interval-seconds: 1\nhold-timeout-seconds: {HOLD_TIMEOUT}\n"
    ),
}


def _container() -> dict[str, Any]:
    res = {"nvidia.com/gpu": str(GPUS)}
    return {"name": "main", "image": "trainer:1", "resources": {"limits": res, "requests": res}}


def _job(cluster: LocalCluster, ns: str, name: str, pods: int) -> list[dict[str, Any]]:
    """The PyTorchJob and its pods (not yet created), as the training operator makes them."""
    spec = {"containers": [_container()]}
    job = cluster.request(
        "POST",
        f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": {"spec": spec}},
                    "Worker": {"replicas": pods - 1, "template": {"spec": spec}},
                }
            },
        },
    )
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": name,
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    out = []
    for rtype, index in [("master", 0)] + [("worker", i) for i in range(pods - 1)]:
        labels = {
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/replica-type": rtype,
            "training.kubeflow.org/replica-index": str(index),
        }
        if rtype == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{rtype}-{index}",
                    "namespace": ns,
                    "labels": labels,
                    "ownerReferences": [owner],
                },
                "spec": {"containers": [_container()], "restartPolicy": "Never"},
            }
        )
    return out


def _namespace(cluster: LocalCluster, name: str, *, enforced: bool) -> None:
    labels = {"podium.dev/enabled": "true"} if enforced else {}
    meta = {"name": name, "labels": labels}
    try:
        cluster.request("POST", "/api/v1/namespaces", {"kind": "Namespace", "metadata": meta})
    except ApiError as error:
        if error.status != 409:
            raise


def run_arm(
    arm: str, bin_dir: Path, work: Path, pods: int, timeout: float, busy: int = 0
) -> dict[str, Any]:
    """One arm on its own cluster; its figures."""
    nodes = busy + 1
    with karpenter.autoscaled_cluster(
        bin_dir, work, zones=ZONES, gpus=GPUS, nodes=nodes
    ) as cluster:
        _fill(cluster, busy)
        if arm == "off":
            return _measure(arm, cluster, pods, timeout)
        _namespace(cluster, "podium-system", enforced=False)
        with serving(Podium(cluster, work / "podium", config=CONFIG[arm])):
            return _measure(arm, cluster, pods, timeout)


def _fill(cluster: LocalCluster, busy: int) -> None:
    """Other work on ``busy`` nodes of each zone: whole-node pods pinned to the zone."""
    if not busy:
        return
    _namespace(cluster, "other", enforced=False)
    names = []
    for zone in ZONES:
        for i in range(busy):
            name = f"other-{zone}-{i}"
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "other"},
                "spec": {"containers": [_container()], "nodeSelector": {ZONE: zone}},
            }
            cluster.request("POST", "/api/v1/namespaces/other/pods", pod)
            names.append(name)

    def all_bound() -> bool:
        found = cluster.request("GET", "/api/v1/namespaces/other/pods")["items"]
        return sum(1 for p in found if p["spec"].get("nodeName")) == len(names)

    cluster.wait_for("the other work to be bound", all_bound, timeout=120)


def _measure(arm: str, cluster: LocalCluster, pods: int, timeout: float) -> dict[str, Any]:
    ns = f"{arm}-{uuid.uuid4().hex[:4]}"
    _namespace(cluster, ns, enforced=arm != "off")
    manifests = _job(cluster, ns, "train", pods)
    start = time.monotonic()
    path = f"/api/v1/namespaces/{ns}/pods"
    with ThreadPoolExecutor(max_workers=len(manifests)) as pool:
        list(pool.map(lambda p: cluster.request("POST", path, p), manifests))
    bound: dict[str, tuple[float, str]] = {}
    while len(bound) < pods and time.monotonic() - start <= timeout:
        now = time.monotonic() - start
        for pod in cluster.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
            name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
            if node and name not in bound:
                bound[name] = (now, node)
        time.sleep(POLL)
    done = len(bound) == pods
    # A gang not all bound by the timeout: its bound pods idled at least until then.
    last = max(t for t, _ in bound.values()) if done else timeout
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE, "")
        for n in cluster.request("GET", "/api/v1/nodes")["items"]
    }
    claims = cluster.request("GET", "/apis/karpenter.sh/v1/nodeclaims")["items"]
    per_zone = Counter((c["metadata"].get("labels") or {}).get(ZONE, "?") for c in claims)
    return {
        "arm": arm,
        "pods": pods,
        "secondsUntilAllBound": round(last, 1) if done else None,
        "bound": len(bound),
        "bindSeconds": sorted(round(t, 1) for t, _ in bound.values()),
        "nodeClaimsPerZone": {z: per_zone.get(z, 0) for z in ZONES},
        "zonesUsed": sorted({nodes.get(node, "?") for _, node in bound.values()}),
        "idleGpuHours": round(sum(GPUS * (last - t) for t, _ in bound.values()) / 3600, 4),
    }


def table(results: Sequence[dict[str, Any]]) -> str:
    head = "| arm | time until all pods run (s) | NodeClaims per zone | zones used | idle GPU-h |"
    rows = [head, "|---|---|---|---|---|"]
    for r in results:
        claims = ", ".join(f"{z}: {n}" for z, n in r["nodeClaimsPerZone"].items())
        until = r["secondsUntilAllBound"]
        ran = f"{until:g}" if until is not None else f"not all: {r['bound']} of {r['pods']} bound"
        zones = ", ".join(r["zonesUsed"]) or "none"
        rows.append(f"| {r['arm']} | {ran} | {claims} | {zones} | {r['idleGpuHours']:.4f} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.autoscale", description=__doc__)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--busy", type=int, default=0, help="full nodes per zone at the start")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per arm")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        parser.error(f"unknown arms: {', '.join(sorted(unknown))}")
    bin_dir = build.controlplane_bin_dir()
    build.karpenter_binary()
    results = []
    with TemporaryDirectory(prefix="autoscale-") as scratch:
        for arm in arms:
            print(f"[autoscale] {arm} …", file=sys.stderr, flush=True)
            work = Path(scratch) / arm
            results.append(run_arm(arm, bin_dir, work, args.pods, args.timeout, args.busy))
    print(table(results))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"autoscale-busy{args.busy}.json" if args.busy else "autoscale.json"
        (args.out / name).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
