"""Time to release (issue 29, item 7): from the moment room exists for a held gang — pods that
held it finish, or new nodes turn Ready — to the gang's last pod bound, for gangs of 8, 64 and
256 pods, on the local control plane:

    python -m bench.latency.room [--sizes 8,64,256] [--runs 10] [--triggers finish,node] [--out DIR]

One ``testbed.controlplane.LocalCluster`` (etcd, kube-apiserver, the real kube-scheduler,
kube-controller-manager, KWOK nodes) and ``podium serve`` beside it as the e2e tests run it
(`testbed.podium.Podium`: the chart's ServiceAccount and RBAC, the shipped webhook configuration,
podium's default settings — ``zone-chooser: hold``, ``release-interval-seconds`` 2 — nothing
tuned). Three zones of 4 nodes × 64 GPUs (110 pods a node). Zones b and c stay full all along
(one 64-GPU "blocker" pod per node, plain pods in a namespace podium does not serve).

Per run (size, trigger), in turn: zone-a is made full too (4 fresh blockers, one per node, bound);
a PyTorchJob of ``size`` pods × 1 GPU is created in a namespace of its own, opted in, its pods
created from 16 threads as the operator would and admitted by podium: held, since no zone has
room. Once podium's releaser has said why on every pod (``podium.dev/held``: the gang is held
and podium's view has it), room is made in zone-a:

* ``finish``: ceil(size / 64) of zone-a's blockers finish (their status phase ``Succeeded``,
  written as a kubelet writes it). Room exists when the last of those writes is answered.
* ``node``: ceil(size / 64) new 64-GPU nodes of zone-a, registered beforehand as a kubelet
  registers a node that is not ready yet (Ready False; not played by KWOK, which makes a node
  Ready at once and takes no node later), turn Ready: their status's Ready condition written
  True, as their kubelets would. The node lifecycle controller (kube-controller-manager) lifts
  the ``node.kubernetes.io/not-ready`` taint it had put on them. Room exists when a watch sees
  the last of them Ready and untainted. Pods bound to them stay Pending (no KWOK), which does not
  matter here: the time ends at binding.

A watch on the gang's pods notes when each is first seen without podium's gate and first seen
bound; the run's figures are seconds after room existed: the first pod ungated (podium noticing),
the last pod ungated, the last pod bound (**time to release**). Then the gang, its job and the
zone-a blockers (and new nodes) are deleted and waited for. A run where podium released the gang
before room was made (it must not: zone-a was full) fails the bench.

Prints p50/p95 per trigger and size, and writes every run to ``--out``/room.json.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.placement import runner, trace
from testbed.controlplane import LocalCluster
from testbed.controlplane.objects import fake_node

SIZES = (8, 64, 256)
TRIGGERS = ("finish", "node")
GPUS_PER_NODE = 64
ZONE_NODES: dict[str, list[int]] = {z: [GPUS_PER_NODE] * 4 for z in ("zone-a", "zone-b", "zone-c")}
#: The zone made free for each gang; the others stay full.
ROOM_ZONE = "zone-a"
BLOCKERS = "room-blockers"
HELD_WHY = "podium.dev/held"
HOLD_GATE = "podium.dev/hold"
#: The taints the node lifecycle controller puts on a node that is not Ready.
NODE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
#: podium's settings: its defaults (``zone-chooser: hold`` is one), said out loud.
CONFIG = "zone-chooser: hold\n"
#: How long one step of a run may take before the bench gives up.
STEP_TIMEOUT = 180.0


# -- the figures --------------------------------------------------------------------------------


def percentile(values: Sequence[float], share: float) -> float:
    """The ``share`` (0–1) percentile of ``values``, linear between the closest ranks (the
    'inclusive' method of `statistics.quantiles`); the value itself for one run."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    at = share * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def summary(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per trigger and size: runs, p50 and p95 of the time to the last pod bound, and the p50 of
    the steps before it (first and last pod ungated)."""
    keys = sorted({(r["trigger"], r["size"]) for r in runs}, key=lambda k: (k[0], k[1]))
    out = []
    for trigger, size in keys:
        mine = [r for r in runs if (r["trigger"], r["size"]) == (trigger, size)]
        bound = [r["last_bound"] for r in mine]
        out.append(
            {
                "trigger": trigger,
                "size": size,
                "runs": len(mine),
                "p50": percentile(bound, 0.5),
                "p95": percentile(bound, 0.95),
                "most": max(bound),
                "first_ungated_p50": percentile([r["first_ungated"] for r in mine], 0.5),
                "last_ungated_p50": percentile([r["last_ungated"] for r in mine], 0.5),
                "room_p50": percentile([r["room_after"] for r in mine], 0.5),
            }
        )
    return out


TRIGGER_WORDS = {"finish": "pods finish", "node": "nodes turn Ready"}


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The summary as a Markdown table, in seconds."""
    lines = [
        "| room made by | gang pods | runs | p50 s | p95 s | most s "
        "| first ungated p50 s | last ungated p50 s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {TRIGGER_WORDS.get(r['trigger'], r['trigger'])} | {r['size']} | {r['runs']} "
            f"| {r['p50']:.2f} | {r['p95']:.2f} | {r['most']:.2f} "
            f"| {r['first_ungated_p50']:.2f} | {r['last_ungated_p50']:.2f} |"
        )
    return "\n".join(lines)


# -- watching -----------------------------------------------------------------------------------


class GangWatch(runner.Watch):
    """When each pod of a namespace was first seen without podium's gate, and first seen bound."""

    def __init__(self, cluster: LocalCluster, namespace: str, t0: float) -> None:
        super().__init__(cluster, f"/api/v1/namespaces/{namespace}/pods", t0, name="gang-watch")
        self.ungated: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.changed = threading.Condition(self.lock)

    def observe(self, kind: str, obj: Mapping[str, Any]) -> None:
        now, name = self.now(), obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        with self.changed:
            if not any(g.get("name") == HOLD_GATE for g in spec.get("schedulingGates") or []):
                self.ungated.setdefault(name, now)
            if spec.get("nodeName"):
                self.bound.setdefault(name, now)
            self.changed.notify_all()

    def wait_bound(self, count: int, timeout: float) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.bound) >= count, timeout=timeout):
                raise TimeoutError(f"{len(self.bound)} of {count} pods bound after {timeout}s")


class NodeWatch(runner.Watch):
    """When each node was first seen Ready and without the node lifecycle controller's
    NoSchedule taints."""

    def __init__(self, cluster: LocalCluster, t0: float) -> None:
        super().__init__(cluster, "/api/v1/nodes", t0, name="node-watch")
        self.usable: dict[str, float] = {}
        self.changed = threading.Condition(self.lock)

    def observe(self, kind: str, obj: Mapping[str, Any]) -> None:
        conditions = (obj.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        taints = (obj.get("spec") or {}).get("taints") or []
        blocked = any(
            t.get("key") in NODE_TAINTS and t.get("effect") == "NoSchedule" for t in taints
        )  # the NoExecute ones are tolerated for 300 s by every pod (DefaultTolerationSeconds)
        if ready and not blocked:
            with self.changed:
                self.usable.setdefault(obj["metadata"]["name"], self.now())
                self.changed.notify_all()

    def wait_usable(self, names: Sequence[str], timeout: float) -> float:
        """The time the last of ``names`` was seen usable."""
        with self.changed:
            if not self.changed.wait_for(
                lambda: all(n in self.usable for n in names), timeout=timeout
            ):
                raise TimeoutError(f"nodes {names} not Ready after {timeout}s")
            return max(self.usable[n] for n in names)


# -- the runs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    sizes: Sequence[int] = SIZES
    runs: int = 10
    triggers: Sequence[str] = TRIGGERS


def blocker(name: str, node: str) -> dict[str, Any]:
    """A plain pod taking the whole of ``node``'s GPUs."""
    gpus = {"nvidia.com/gpu": str(GPUS_PER_NODE)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": BLOCKERS},
        "spec": {
            "containers": [
                {"name": "c", "image": "other:1", "resources": {"requests": gpus, "limits": gpus}}
            ],
            "nodeSelector": {"kubernetes.io/hostname": node},
        },
    }


def create_all(cluster: LocalCluster, path: str, objects: Sequence[Mapping[str, Any]]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda o: cluster.request("POST", path, o), objects))


def fill(cluster: LocalCluster, zone: str, tag: str) -> list[str]:
    """One blocker on every node of ``zone``, bound; their names."""
    nodes = [f"kwok-{zone}-{i}" for i in range(len(ZONE_NODES[zone]))]
    pods = [blocker(f"{tag}-{i}", node) for i, node in enumerate(nodes)]
    create_all(cluster, f"/api/v1/namespaces/{BLOCKERS}/pods", pods)
    names = [p["metadata"]["name"] for p in pods]
    cluster.wait_for(
        f"the blockers of {zone} bound",
        lambda: all(
            cluster.request("GET", f"/api/v1/namespaces/{BLOCKERS}/pods/{n}")["spec"].get(
                "nodeName"
            )
            for n in names
        ),
        timeout=STEP_TIMEOUT,
    )
    return names


def held_gang(cluster: LocalCluster, namespace: str, size: int) -> list[str]:
    """The PyTorchJob and its ``size`` pods, created as the operator would; podium holds them."""
    job = trace.TraceJob(index=0, name="gang", arrival_s=0, pods=size, gpus_per_pod=1, duration_s=0)
    job_obj = cluster.request(
        "POST",
        f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs",
        runner.pytorchjob(job, namespace),
    )
    pods = runner.operator_pods(job, job_obj)
    create_all(cluster, f"/api/v1/namespaces/{namespace}/pods", pods)
    return [p["metadata"]["name"] for p in pods]


def wait_said_why(cluster: LocalCluster, namespace: str, names: Sequence[str]) -> None:
    """Every pod of the gang gated and carrying podium's why (its releaser holds the gang)."""

    def said() -> bool:
        pods = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        mine = [p for p in pods if p["metadata"]["name"] in names]
        for pod in mine:
            gates = (pod.get("spec") or {}).get("schedulingGates") or []
            if not any(g.get("name") == HOLD_GATE for g in gates):
                raise RuntimeError(f"podium released {pod['metadata']['name']} with no room")
        return len(mine) == len(names) and all(
            HELD_WHY in (p["metadata"].get("annotations") or {}) for p in mine
        )

    cluster.wait_for("podium to say why the gang waits", said, timeout=STEP_TIMEOUT)


def finish(cluster: LocalCluster, names: Sequence[str]) -> None:
    """The pods end as a kubelet says so: phase Succeeded (KWOK leaves a Succeeded pod alone)."""

    def one(name: str) -> None:
        cluster.request(
            "PATCH",
            f"/api/v1/namespaces/{BLOCKERS}/pods/{name}/status",
            {"status": {"phase": "Succeeded"}},
            content_type="application/merge-patch+json",
        )

    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(one, names))


def ready_condition(status: str) -> dict[str, str]:
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    reason = "KubeletReady" if status == "True" else "KubeletNotReady"
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": f"kubelet says {reason}",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def unmanaged_node(name: str) -> dict[str, Any]:
    """A zone-a node as a kubelet registers it before it is ready: Ready False (no KWOK: KWOK
    plays only nodes it was given at creation, and would make it Ready at once). The node
    lifecycle controller taints it ``node.kubernetes.io/not-ready:NoSchedule``."""
    node = fake_node(name, ROOM_ZONE, GPUS_PER_NODE)
    node["metadata"]["annotations"] = {}
    node["status"]["conditions"] = [ready_condition("False")]
    return node


def turn_ready(cluster: LocalCluster, names: Sequence[str]) -> None:
    """What the nodes' kubelets write when they become ready: Ready True on the status."""

    def one(name: str) -> None:
        cluster.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"conditions": [ready_condition("True")]}},
            content_type="application/strategic-merge-patch+json",
        )

    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(one, names))


def delete_pods(cluster: LocalCluster, namespace: str, names: Sequence[str]) -> None:
    for name in names:
        cluster.request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {"kind": "DeleteOptions", "gracePeriodSeconds": 0},
        )
    gone = set(names)
    cluster.wait_for(
        f"pods of {namespace} gone",
        lambda: (
            not {
                p["metadata"]["name"]
                for p in cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
            }
            & gone
        ),
        timeout=STEP_TIMEOUT,
    )


def one_run(cluster: LocalCluster, trigger: str, size: int, run: int) -> dict[str, Any]:
    tag = f"{trigger}-{size}-{run}"
    need = math.ceil(size / GPUS_PER_NODE)
    blockers = fill(cluster, ROOM_ZONE, f"a-{tag}")
    new_nodes = [f"new-{tag}-{i}" for i in range(need)] if trigger == "node" else []
    for name in new_nodes:
        # as a kubelet registers: capacity and allocatable on the status (kept on create)
        cluster.request("POST", "/api/v1/nodes", unmanaged_node(name))
    namespace = f"room-{tag}"
    cluster.create_namespace(namespace, {"podium.dev/enabled": "true"})
    names = held_gang(cluster, namespace, size)
    wait_said_why(cluster, namespace, names)
    t0 = time.monotonic()
    pods = GangWatch(cluster, namespace, t0)
    nodes = NodeWatch(cluster, t0)
    pods.start()
    nodes.start()
    try:
        load = os.getloadavg()[0]
        sent = pods.now()
        if trigger == "finish":
            finish(cluster, blockers[:need])
            room = pods.now()
        else:
            turn_ready(cluster, new_nodes)
            room = nodes.wait_usable(new_nodes, STEP_TIMEOUT)
        pods.wait_bound(len(names), STEP_TIMEOUT)
        with pods.lock:
            ungated = [pods.ungated[n] - room for n in names]
            bound = [pods.bound[n] - room for n in names]
        zones = {
            cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{n}")["spec"]["nodeName"]
            for n in names
        }
    finally:
        for watch in (pods, nodes):
            watch.stopping.set()
    for error in (pods.error, nodes.error):
        if error is not None:
            raise error
    row = {
        "trigger": trigger,
        "size": size,
        "run": run,
        "room_after": room - sent,
        "first_ungated": min(ungated),
        "last_ungated": max(ungated),
        "last_bound": max(bound),
        "nodes": sorted(zones),
        "load": load,
    }
    assert all(n.startswith(f"kwok-{ROOM_ZONE}-") or n.startswith("new-") for n in zones), zones
    delete_pods(cluster, namespace, names)
    cluster.request("DELETE", f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/gang")
    cluster.request("DELETE", f"/api/v1/namespaces/{namespace}")
    delete_pods(cluster, BLOCKERS, blockers)
    for name in new_nodes:
        cluster.request("DELETE", f"/api/v1/nodes/{name}")
    return row


def measure(cluster: LocalCluster, work: Path, spec: Spec) -> list[dict[str, Any]]:
    """The runs on ``cluster`` (started, with the PyTorchJob and Cilium CRDs): its nodes and
    podium set up here, each size and trigger in turn, ``spec.runs`` times."""
    from testbed.podium import Podium, serving  # noqa: PLC0415 - the driver's only

    cluster.create_fake_nodes(ZONE_NODES, timeout=STEP_TIMEOUT)
    cluster.create_namespace(BLOCKERS)
    fill(cluster, "zone-b", "b")
    fill(cluster, "zone-c", "c")
    out: list[dict[str, Any]] = []
    with serving(Podium(cluster, work / "podium", config=CONFIG), unregister=True):
        for run in range(spec.runs):
            for trigger in spec.triggers:
                for size in spec.sizes:
                    row = one_run(cluster, trigger, size, run)
                    print(json.dumps(row), flush=True)
                    out.append(row)
    return out


def study(spec: Spec, out: Path | None) -> list[dict[str, Any]]:
    from testbed.build import controlplane_bin_dir  # noqa: PLC0415
    from testbed.controlplane import crd_files  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="podium-room-") as scratch:
        work = Path(scratch)
        with LocalCluster(controlplane_bin_dir(), work / "cluster") as cluster:
            cluster.install_crds(crd_files())
            runs = measure(cluster, work, spec)
    rows = summary(runs)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        meta = {"cpus": os.cpu_count(), "python": sys.version.split()[0], "spec": spec.__dict__}
        (out / "room.json").write_text(
            json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=1) + "\n"
        )
    return rows


def main(argv: Sequence[str]) -> int:
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m bench.latency.room")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--triggers", default=",".join(TRIGGERS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    triggers = tuple(t for t in args.triggers.split(",") if t)
    unknown = set(triggers) - set(TRIGGERS)
    if unknown:
        parser.error(f"unknown triggers {sorted(unknown)}; known: {', '.join(TRIGGERS)}")
    spec = Spec(
        sizes=tuple(int(s) for s in args.sizes.split(",")), runs=args.runs, triggers=triggers
    )
    print(table(study(spec, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
