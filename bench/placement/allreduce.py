"""A stated all-reduce cost model: how much slower a gang's gradient all-reduce is where its pods
landed than in the tightest placement its shape allows. Pure (no cluster): the topology study
(`bench.placement.topology`) feeds it the nodes and blocks a gang's bound pods were on.

**The model.** One ring all-reduce over all the gang's GPUs (NCCL's ring algorithm), its ranks
ordered node by node and block by block, as NCCL orders a ring to cross each slow boundary as
few times as it can. A ring all-reduce of ``S`` bytes over ``p`` ranks takes ``2(p − 1)`` steps,
each rank sending ``S / p`` bytes to its neighbour in every step, all hops at once; a step lasts
as long as its slowest hop. So::

    T = 2 (p − 1) / p × S / B_min

with ``B_min`` the bandwidth of the slowest kind of hop the ring has: *intra-node* (GPU to GPU
over NVLink/NVSwitch), *intra-block* (node to node under one layer-3 network node, over EFA) or
*cross-block* (node to node through the layers above). Latency terms are left out (large
messages: bandwidth-bound), as are several rings sharing a NIC (each GPU is given its share of
the node's network bandwidth).

**The numbers** (per GPU, one direction, GB/s; `Fabric`): an 8 × H100 SXM node (AWS
``p5.48xlarge``): NVLink 900 GB/s per GPU in both directions together, 450 one way; EFA 3,200
Gbps per instance = 400 GB/s, 50 GB/s per GPU. Cross-block: the block's uplinks are
oversubscribed — `Fabric.cross_block_oversubscription`, 2:1 by default, **an assumption**: no
provider publishes the ratio above its bottom network layer (Meta's RoCE fabric paper says its
cross-zone links are "deliberately oversubscribed" without a figure for others to reuse). The
sources, as read, are listed in docs/benchmarks/placement.md ("The all-reduce cost model").

**Training time.** A step is compute plus communication; with ``c`` the share of a step spent
in the all-reduce at the tightest placement (not overlapped with compute, `COMM_SHARE`, an
assumption), a placement whose all-reduce takes ``r`` times as long makes the step
``(1 − c) + c × r`` times as long (`step_time_ratio`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The hop kinds, fastest first.
INTRA_NODE, INTRA_BLOCK, CROSS_BLOCK = "intra-node", "intra-block", "cross-block"
#: The share of a training step spent in a non-overlapped all-reduce at the tightest placement
#: (an assumption, stated in the report).
COMM_SHARE = 0.3


@dataclass(frozen=True)
class Fabric:
    """Bandwidth per GPU, one direction, GB/s."""

    #: NVLink 4 / NVSwitch on H100 SXM: 900 GB/s per GPU, both directions together.
    intra_node_gbs: float = 450.0
    #: EFA on p5.48xlarge: 3,200 Gbps (400 GB/s) per 8-GPU instance.
    intra_block_gbs: float = 50.0
    #: How much less a node gets through the layers above its block (assumed).
    cross_block_oversubscription: float = 2.0

    @property
    def cross_block_gbs(self) -> float:
        return self.intra_block_gbs / self.cross_block_oversubscription

    def bandwidth(self, hop: str) -> float:
        return {
            INTRA_NODE: self.intra_node_gbs,
            INTRA_BLOCK: self.intra_block_gbs,
            CROSS_BLOCK: self.cross_block_gbs,
        }[hop]


#: Where one pod of a gang runs: (block, node, GPUs).
Pod = tuple[str, str, int]


def ring_hops(pods: Sequence[Pod]) -> set[str]:
    """The kinds of hop in the ring over ``pods``' GPUs, ranks ordered block by block and node by
    node (so a ring crosses each boundary once per domain), the last rank back to the first."""
    ranks = [
        (block, node)
        for block, node, gpus in sorted(pods, key=lambda pod: (pod[0], pod[1]))
        for _ in range(gpus)
    ]
    hops = set()
    for (block, node), (next_block, next_node) in zip(ranks, ranks[1:] + ranks[:1], strict=True):
        if (block, node) == (next_block, next_node):
            hops.add(INTRA_NODE)
        elif block == next_block:
            hops.add(INTRA_BLOCK)
        else:
            hops.add(CROSS_BLOCK)
    return hops if len(ranks) > 1 else set()


def slowest_gbs(pods: Sequence[Pod], fabric: Fabric | None = None) -> float | None:
    """The bandwidth of the ring's slowest hop (None for a single GPU: no ring)."""
    fabric = fabric or Fabric()
    hops = ring_hops(pods)
    return min(fabric.bandwidth(hop) for hop in hops) if hops else None


def allreduce_seconds(nbytes: float, pods: Sequence[Pod], fabric: Fabric | None = None) -> float:
    """The ring all-reduce of ``nbytes`` over ``pods``' GPUs (0 for a single GPU)."""
    ranks = sum(gpus for _, _, gpus in pods)
    slowest = slowest_gbs(pods, fabric)
    if slowest is None:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes / (slowest * 1e9)


def tightest(pods: int, gpus_per_pod: int, gpus_per_node: int, nodes_per_block: int) -> list[Pod]:
    """The tightest placement a gang's shape allows: its pods packed onto as few nodes as fit
    (``gpus_per_node // gpus_per_pod`` per node), the nodes onto as few blocks."""
    per_node = max(1, gpus_per_node // gpus_per_pod)
    return [
        (f"b{(i // per_node) // nodes_per_block}", f"n{i // per_node}", gpus_per_pod)
        for i in range(pods)
    ]


def fewest_nodes(pods: int, gpus_per_pod: int, gpus_per_node: int) -> int:
    return math.ceil(pods / max(1, gpus_per_node // gpus_per_pod))


def fewest_blocks(pods: int, gpus_per_pod: int, gpus_per_node: int, nodes_per_block: int) -> int:
    return math.ceil(fewest_nodes(pods, gpus_per_pod, gpus_per_node) / nodes_per_block)


def comm_ratio(
    pods: Sequence[Pod],
    *,
    gpus_per_node: int,
    nodes_per_block: int,
    fabric: Fabric | None = None,
) -> float:
    """How many times as long the gang's all-reduce takes where ``pods`` are as in the tightest
    placement of the same shape (1.0 there): the same ranks and message, so the ratio of the two
    rings' slowest hops."""
    if not pods:
        return 1.0
    best = slowest_gbs(tightest(len(pods), pods[0][2], gpus_per_node, nodes_per_block), fabric)
    actual = slowest_gbs(pods, fabric)
    return best / actual if best is not None and actual is not None else 1.0


def step_time_ratio(ratio: float, comm_share: float = COMM_SHARE) -> float:
    """A training step's time relative to the tightest placement, when a share ``comm_share`` of
    the step is a non-overlapped all-reduce there and the all-reduce takes ``ratio`` times as
    long."""
    return (1.0 - comm_share) + comm_share * ratio
