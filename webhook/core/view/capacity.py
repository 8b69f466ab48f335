"""Room in the cluster: what the bound pods use of each node, and for each scheduling constraint
seen lately, the nodes it admits by zone with each zone's summed allocatable and usage, kept
current as pods and nodes change, so that no decision scans all nodes once a constraint has been
seen (``ClusterView.candidate_zones``)."""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from collections.abc import Iterator, Mapping

import orjson

from webhook.core import resources, selectors
from webhook.core.objects import Obj
from webhook.core.view.summaries import NodeInfo, PodSummary, scheduling_constraint

#: How many distinct scheduling constraints keep a cached set of candidate nodes.
CANDIDATE_CACHE_SIZE = 16


class ZoneNodes:
    """The candidate nodes of one zone for one scheduling constraint, in the view's node order,
    and their summed allocatable and usage (kept current by ``Capacity``)."""

    __slots__ = ("_capacity", "allocatable", "nodes", "used", "zone")

    def __init__(self, zone: str, capacity: Capacity) -> None:
        self.zone = zone
        self._capacity = capacity
        self.nodes: dict[str, NodeInfo] = {}
        self.allocatable: resources.Resources = {}
        self.used: resources.Resources = {}

    def free(self) -> resources.Resources:
        """The zone's free capacity: what ``free_on`` of every node would sum to."""
        out = dict(self.allocatable)
        for name, amount in self.used.items():
            if amount or name in out:
                out[name] = out.get(name, 0) - amount
        return out

    def frees(self) -> Iterator[resources.Resources]:
        """``free_on`` of each node, computed as it is read (packing stops when the gang fits)."""
        for node in self.nodes.values():
            yield self._capacity.free_on(node)


class _Candidates:
    """Nodes one scheduling constraint admits, by zone."""

    __slots__ = ("constraint", "node_zone", "zones")

    def __init__(self, constraint: Obj) -> None:
        self.constraint = constraint
        self.zones: dict[str, ZoneNodes] = {}
        self.node_zone: dict[str, str] = {}


def _admits(constraint: Obj, node: NodeInfo) -> bool:
    return bool(
        node.usable
        and node.zone
        and selectors.admits_labels(constraint, node.name, node.labels)
        and selectors.tolerates_all(constraint, node.taints)
    )


class Capacity:
    """Per node, the requests of its bound, running pods; per cached scheduling constraint (the
    ``CANDIDATE_CACHE_SIZE`` most recently asked), its candidate nodes by zone."""

    __slots__ = ("_nodes", "candidates", "used")

    def __init__(self, nodes: Mapping[str, NodeInfo]) -> None:
        #: The store's nodes, in its order (read when a constraint is first asked).
        self._nodes = nodes
        self.used: dict[str, resources.Resources] = defaultdict(dict)
        self.candidates: OrderedDict[bytes, _Candidates] = OrderedDict()

    # -- events

    def on_pod(self, old: PodSummary | None, new: PodSummary | None) -> None:
        if old is not None and old.bound:
            assert old.node is not None
            if (
                new is not None
                and new.bound
                and new.node == old.node
                and new.requests == old.requests
            ):
                return  # still bound to the same node for the same requests: nothing moves
            self._use(old.node, old.requests, -1)
        if new is not None and new.bound:
            assert new.node is not None
            self._use(new.node, new.requests, 1)

    def on_node(self, name: str, new: NodeInfo | None) -> None:
        """Node ``name`` changed (in what a decision reads) to ``new``, or went (None)."""
        for candidates in self.candidates.values():
            self._uncandidate(candidates, name)
            if new is not None:
                self._candidate(candidates, new)

    def _use(self, node: str, requests: resources.Resources, sign: int) -> None:
        self.used[node] = resources.add(self.used[node], requests, sign=sign)
        for candidates in self.candidates.values():
            zone = candidates.node_zone.get(node)
            if zone is not None:
                zone_nodes = candidates.zones[zone]
                zone_nodes.used = resources.add(zone_nodes.used, requests, sign=sign)

    def _candidate(self, candidates: _Candidates, node: NodeInfo) -> None:
        if not _admits(candidates.constraint, node):
            return
        assert node.zone is not None
        zone_nodes = candidates.zones.get(node.zone)
        if zone_nodes is None:
            zone_nodes = candidates.zones[node.zone] = ZoneNodes(node.zone, self)
        zone_nodes.nodes[node.name] = node
        zone_nodes.allocatable = resources.add(zone_nodes.allocatable, node.allocatable)
        zone_nodes.used = resources.add(zone_nodes.used, self.used.get(node.name, {}))
        candidates.node_zone[node.name] = node.zone

    def _uncandidate(self, candidates: _Candidates, name: str) -> None:
        zone = candidates.node_zone.pop(name, None)
        if zone is None:
            return
        zone_nodes = candidates.zones[zone]
        node = zone_nodes.nodes.pop(name)
        if not zone_nodes.nodes:
            del candidates.zones[zone]
            return
        zone_nodes.allocatable = resources.add(zone_nodes.allocatable, node.allocatable, sign=-1)
        zone_nodes.used = resources.add(zone_nodes.used, self.used.get(name, {}), sign=-1)

    # -- reads

    def free_on(self, node: NodeInfo) -> resources.Resources:
        return resources.add(node.allocatable, self.used.get(node.name, {}), sign=-1)

    def candidate_zones(self, pod_spec: Obj) -> Mapping[str, ZoneNodes]:
        """Usable nodes in some zone that the pod's own selector, affinity and tolerations admit,
        by zone, with each zone's free capacity, from a cache per distinct constraint (node
        selector, required node affinity, tolerations) that pod and node events keep current:
        no scan of all nodes once a constraint has been seen."""
        constraint = scheduling_constraint(pod_spec)
        try:
            key = orjson.dumps(constraint, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # not JSON (an offline YAML oddity): decide without the cache
            return self._scan(constraint).zones
        candidates = self.candidates.get(key)
        if candidates is None:
            # A private copy: the cache outlives the request the constraint came from.
            candidates = self._scan(orjson.loads(key))
            self.candidates[key] = candidates
            if len(self.candidates) > CANDIDATE_CACHE_SIZE:
                self.candidates.popitem(last=False)
        else:
            self.candidates.move_to_end(key)
        return candidates.zones

    def _scan(self, constraint: Obj) -> _Candidates:
        candidates = _Candidates(constraint)
        for node in self._nodes.values():
            self._candidate(candidates, node)
        return candidates
