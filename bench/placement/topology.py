"""The topology study's cluster and arms, and what a run says about how tightly gangs were packed.

**The cluster** (`TopologyLayout`): two zones, four blocks each, four 8-GPU KWOK nodes per block
(256 GPUs), labelled with EKS's network-layer keys (FACTS §15; the EKS user guide "Place
distributed AI/ML workloads with network topology labels"):
``topology.k8s.aws/network-node-layer-1`` is the top of the hierarchy, ``-layer-3`` the bottom
one for most instance types, "nodes that share this value are physically closest". The
**block is layer 3** — the network node the instances attach to, the fewest hops — and layers
1 and 2 have one value per zone here (the study's arms never choose among them).

**Arms** (`ARMS`, the same names as the main study where they are the same thing):

* ``podium-hold`` — podium's hold, zone only, exactly as in the main study;
* ``podium-hold-topology`` — the same with ``topology-levels: [<layer-3>]`` (podium's default:
  preferred at the finest level);
* ``kueue-tas`` — Kueue TAS with a ``Topology`` of zone, layer 3 and hostname and each pod group
  ``podset-preferred-topology: kubernetes.io/hostname`` (the finest level);
* ``scheduler`` — kube-scheduler's own PodGroup gang + topology placement (gates on), its
  constraint at the block key for a gang that fits one block by GPUs, at the zone key for a gang
  that cannot (the API has one required key and no fallback: a larger gang at the block key
  would never run).

Variants (``--arms``): ``podium-hold-topology-required`` (a gang that fits a block requires one,
``podium.dev/required-topology``, as the ``scheduler`` arm's PodGroup does),
``podium-hold-topology-host`` (the hostname as the finest level below the block) and
``kueue-tas-zone`` (Kueue on the same topology, each group *required* in one zone, as the main
study's ``kueue-tas``).

**Metrics** (`metrics`): per gang (the first attempt of each job that ran whole in one zone),
the blocks and nodes its pods were bound on, whether that was one block, and the all-reduce
cost model's ratio to the tightest placement of its shape (`bench.placement.allreduce`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from bench.placement import allreduce, analysis, arms, kueue, trace
from bench.placement.arms import ZONE_LABEL, Arm, RunContext
from bench.placement.runner import Layout
from bench.placement.trace import TraceJob
from testbed.controlplane import ApiError, LocalCluster
from testbed.controlplane.objects import fake_node
from testbed.operators import kueue as kueue_operator
from webhook.core.labels import REQUIRED_TOPOLOGY

LAYERS = tuple(f"topology.k8s.aws/network-node-layer-{n}" for n in (1, 2, 3))
#: The level the study calls a block: EKS's bottom network layer.
BLOCK_LABEL = LAYERS[2]
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONES = ("zone-a", "zone-b")
BLOCKS_PER_ZONE = 4
NODES_PER_BLOCK = 4
GPUS_PER_NODE = trace.GPUS_PER_NODE
BLOCK_GPUS = NODES_PER_BLOCK * GPUS_PER_NODE
ZONE_GPUS = BLOCKS_PER_ZONE * BLOCK_GPUS
CAPACITY = len(ZONES) * ZONE_GPUS

#: podium's setting for the ``podium-hold-topology`` arm.
PODIUM_TOPOLOGY_CONFIG = f"topology-levels:\n- {BLOCK_LABEL}\n"
#: Kueue's preferred-topology pod annotation.
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


def spec(jobs: int = 150) -> trace.TraceSpec:
    """The topology study's trace: the main study's mix, a job up to one zone (128 GPUs), the
    arrivals made denser in proportion to the larger cluster (256 GPUs against 200) so the
    offered load stays near the main study's."""
    return trace.TraceSpec(
        jobs=jobs,
        mean_interarrival_s=round(
            trace.TraceSpec.mean_interarrival_s * trace.capacity() / CAPACITY, 3
        ),
        max_gpus=ZONE_GPUS,
    )


def node_name(zone: str, block: int, index: int) -> str:
    return f"kwok-{zone}-b{block}-{index}"


def block_id(zone: str, block: int) -> str:
    return f"nn-{zone}-l3-{block}"


def node_objects() -> list[dict[str, Any]]:
    """The layout's Nodes: `fake_node`s with the three EKS layer labels."""
    nodes = []
    for zone in ZONES:
        for block in range(BLOCKS_PER_ZONE):
            for index in range(NODES_PER_BLOCK):
                node = fake_node(node_name(zone, block, index), zone, GPUS_PER_NODE)
                node["metadata"]["labels"].update(
                    {
                        LAYERS[0]: f"nn-{zone}-l1",
                        LAYERS[1]: f"nn-{zone}-l2",
                        LAYERS[2]: block_id(zone, block),
                    }
                )
                nodes.append(node)
    return nodes


class TopologyLayout(Layout):
    """Two zones × four blocks × four 8-GPU nodes, EKS layer labels."""

    recorded_labels = (BLOCK_LABEL,)

    def zone_gpus(self) -> dict[str, int]:
        return dict.fromkeys(ZONES, ZONE_GPUS)

    def capacity(self) -> int:
        return CAPACITY

    def create_nodes(self, cluster: LocalCluster) -> None:
        names = []
        for node in node_objects():
            try:
                cluster.request("POST", "/api/v1/nodes", node)
            except ApiError as error:
                if error.status != 409:
                    raise
            names.append(node["metadata"]["name"])
        cluster.wait_for(
            "the topology nodes to be Ready",
            lambda: all(cluster.node_ready(name) for name in names),
            timeout=180,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "block_label": BLOCK_LABEL,
            "zones": list(ZONES),
            "blocks_per_zone": BLOCKS_PER_ZONE,
            "nodes_per_block": NODES_PER_BLOCK,
            "gpus_per_node": GPUS_PER_NODE,
        }


# -- arms ------------------------------------------------------------------------------------------


def podium_hold_topology() -> Arm:
    """podium's hold with the block level below the zone (podium's default: preferred at the
    finest level). Refuses to build where podium's settings do not know ``topology-levels``."""
    from webhook.core.settings import Settings  # noqa: PLC0415 (only for this check)

    config = arms.PODIUM_STUDY_CONFIG + arms.PODIUM_HOLD_CONFIG + PODIUM_TOPOLOGY_CONFIG
    try:
        settings = Settings.from_mapping(yaml.safe_load(config))
    except Exception as error:
        raise SystemExit(
            f"the podium-hold-topology arm needs podium's topology-levels setting: {error}"
        ) from error
    if list(getattr(settings, "topology_levels", ())) != [BLOCK_LABEL]:
        raise SystemExit("podium's settings do not read topology-levels as the block level")
    return arms.PodiumArm(name="podium-hold-topology", config=config, gang_gates=False)


class KueueTasTopology(kueue.KueueTas):
    """Kueue TAS on zone → block → hostname, each pod group preferred at the hostname level
    (Kueue tries the finest level and climbs)."""

    LEVELS = (ZONE_LABEL, BLOCK_LABEL, HOSTNAME_LABEL)

    def start(self, ctx: RunContext) -> None:
        self.manager = kueue_operator.Kueue(
            ctx.cluster, kueue_operator.build_kueue(), ctx.work_dir / "kueue"
        )
        self.manager.start()
        for obj in self.objects(ctx.namespace):
            ctx.cluster.apply(obj)

    def objects(self, namespace: str) -> list[dict[str, Any]]:
        objects = kueue_operator.tas_objects(
            gpus=CAPACITY,
            node_labels={"type": "kwok"},
            zone_label=ZONE_LABEL,
            queue=kueue.QUEUE,
            namespace=namespace,
        )
        objects[0]["spec"]["levels"] = [{"nodeLabel": label} for label in self.LEVELS]
        return objects

    def pod(self, job: TraceJob, pod: dict[str, Any]) -> dict[str, Any]:
        pod = super().pod(job, pod)
        annotations = pod["metadata"]["annotations"]
        del annotations[kueue_operator.REQUIRED_TOPOLOGY]
        annotations[KUEUE_PREFERRED] = HOSTNAME_LABEL
        return pod


class SchedulerBlock(arms.SchedulerGang):
    """kube-scheduler's PodGroup gang + topology placement at the block key (the zone key for a
    gang larger than a block)."""

    def before_pods(self, ctx: RunContext, job: TraceJob, job_obj: Mapping[str, Any]) -> None:
        meta = job_obj["metadata"]
        owner = {
            "apiVersion": job_obj["apiVersion"],
            "kind": job_obj["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
        }
        ctx.cluster.request(
            "POST",
            f"/apis/scheduling.k8s.io/v1beta1/namespaces/{ctx.namespace}/podgroups",
            arms.podgroup(job.name, ctx.namespace, job.pods, owner, scheduler_key(job)),
        )


def scheduler_key(job: TraceJob) -> str:
    """The topology key of a gang's PodGroup: the block where it fits one, else the zone."""
    fits = allreduce.fewest_blocks(job.pods, job.gpus_per_pod, GPUS_PER_NODE, NODES_PER_BLOCK)
    return BLOCK_LABEL if fits == 1 else ZONE_LABEL


class KueueTasRequiredZone(KueueTasTopology):
    """Kueue TAS on the same zone → block → hostname topology, each pod group *required* in one
    zone (the main study's annotation): Kueue never splits a gang across zones, and still assigns
    its pods host by host inside the zone."""

    name = "kueue-tas-zone"

    def pod(self, job: TraceJob, pod: dict[str, Any]) -> dict[str, Any]:
        return kueue.KueueTas.pod(self, job, pod)


def podium_hold_topology_host() -> Arm:
    """``podium-hold-topology`` with the hostname as the finest level (``topology-levels:
    [<layer-3>, kubernetes.io/hostname]``): a gang that fits one node is released onto one."""
    arm = podium_hold_topology()
    assert isinstance(arm, arms.PodiumArm)
    arm.name = "podium-hold-topology-host"
    arm.config = (arm.config or "") + f"- {HOSTNAME_LABEL}\n"
    return arm


class PodiumHoldTopologyRequired(arms.PodiumArm):
    """``podium-hold-topology`` with each gang that fits one block by GPUs *requiring* one
    (``podium.dev/required-topology: <layer-3>`` on its pods): it waits for a block instead of
    falling back to the zone — what the ``scheduler`` arm's PodGroup asks for."""

    def pod(self, job: TraceJob, pod: dict[str, Any]) -> dict[str, Any]:
        if scheduler_key(job) == BLOCK_LABEL:
            pod["metadata"].setdefault("annotations", {})[REQUIRED_TOPOLOGY] = BLOCK_LABEL
        return pod


def podium_hold_topology_required() -> Arm:
    base = podium_hold_topology()
    assert isinstance(base, arms.PodiumArm)
    return PodiumHoldTopologyRequired(
        name="podium-hold-topology-required", config=base.config, gang_gates=False
    )


ARMS: dict[str, Callable[[], Arm]] = {
    "podium-hold": arms.podium_hold,
    "podium-hold-topology": podium_hold_topology,
    "kueue-tas": KueueTasTopology,
    "scheduler": SchedulerBlock,
    "podium-hold-topology-required": podium_hold_topology_required,
    "podium-hold-topology-host": podium_hold_topology_host,
    "kueue-tas-zone": KueueTasRequiredZone,
}
#: The arms `python -m bench placement-topology` runs unless told otherwise (the issue's four);
#: the others are variants run with ``--arms``.
DEFAULT_ARMS = ("podium-hold", "podium-hold-topology", "kueue-tas", "scheduler")


# -- metrics ---------------------------------------------------------------------------------------


def gang_spans(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per job, its first attempt that ran whole in one zone: the gang's shape, the blocks and
    nodes its pods were bound on, and the fewest its shape allows."""
    layout = record.get("layout") or {}
    label = layout.get("block_label", BLOCK_LABEL)
    per_node = int(layout.get("gpus_per_node", GPUS_PER_NODE))
    per_block = int(layout.get("nodes_per_block", NODES_PER_BLOCK))
    blocks_of = {
        node: labels.get(label) for node, labels in (record.get("node_labels") or {}).items()
    }
    spans = []
    for view in analysis.job_views(record):
        attempt = next((a for a in view.attempts if a.whole_in_one_zone), None)
        if attempt is None:
            continue
        nodes = [
            analysis.field(p, analysis.NODE) for p in attempt.pods if p[analysis.BOUND] is not None
        ]
        if not nodes or any(n is None for n in nodes):
            continue  # a record made before the watch kept nodes
        pods, gpus = int(view.job["pods"]), int(view.job["gpus_per_pod"])
        placed = [(str(blocks_of.get(n)), str(n), gpus) for n in nodes]
        spans.append(
            {
                "job": view.job["name"],
                "pods": pods,
                "gpus_per_pod": gpus,
                "blocks": len({b for b, _, _ in placed}),
                "nodes": len(set(nodes)),
                "fewest_blocks": allreduce.fewest_blocks(pods, gpus, per_node, per_block),
                "fewest_nodes": allreduce.fewest_nodes(pods, gpus, per_node),
                "comm_ratio": allreduce.comm_ratio(
                    placed, gpus_per_node=per_node, nodes_per_block=per_block
                ),
            }
        )
    return spans


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def metrics(record: Mapping[str, Any]) -> dict[str, Any]:
    """The topology study's numbers for one run (on top of `analysis.metrics`)."""
    spans = gang_spans(record)
    fitting = [s for s in spans if s["fewest_blocks"] == 1]
    one_block = [s for s in spans if s["blocks"] == 1]
    weights = [s["pods"] * s["gpus_per_pod"] for s in spans]
    ratios = [s["comm_ratio"] for s in spans]
    weighted = (
        sum(w * r for w, r in zip(weights, ratios, strict=True)) / sum(weights) if spans else None
    )
    return {
        "gangs": len(spans),
        "one_block": len(one_block),
        "one_block_share": _share(len(one_block), len(spans)),
        "fit_block": len(fitting),
        "fit_block_one_block": sum(1 for s in fitting if s["blocks"] == 1),
        "fit_block_share": _share(sum(1 for s in fitting if s["blocks"] == 1), len(fitting)),
        "fewest_blocks": sum(1 for s in spans if s["blocks"] == s["fewest_blocks"]),
        "fewest_nodes": sum(1 for s in spans if s["nodes"] == s["fewest_nodes"]),
        "blocks_mean": _mean([float(s["blocks"]) for s in spans]),
        "blocks_max": max((s["blocks"] for s in spans), default=None),
        "nodes_mean": _mean([float(s["nodes"]) for s in spans]),
        "fewest_nodes_mean": _mean([float(s["fewest_nodes"]) for s in spans]),
        "comm_ratio_mean": weighted,
        "comm_ratio_p95": analysis.percentile(ratios, 95),
        "step_ratio_mean": None if weighted is None else allreduce.step_time_ratio(weighted),
        "spans": spans,
    }
