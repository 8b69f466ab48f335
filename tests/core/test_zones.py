"""Choosing a gang's zone, branch by branch, straight from ``zones.choose_zone`` (the engine's
tests check the same through whole admissions). The packing mirrors how the scheduler places
pods one by one (kubernetes ``pkg/scheduler/framework/plugins/noderesources/fit.go``): a zone's
free total is not enough when no single node has room for a pod."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import ZONE, NodeBuilder
from webhook.core import adapters, resources, zones
from webhook.core.adapters.base import PodGroup
from webhook.core.settings import NoFit, Placement, Settings
from webhook.core.view import ClusterView

GPU = "nvidia.com/gpu"


def gpus(n: int) -> resources.Resources:
    return {GPU: n, resources.PODS: 1}


def cluster(*zone_gpus: tuple[str, int, int]) -> ClusterView:
    """``(zone, nodes, GPUs per node)`` per zone."""
    nodes = [
        NodeBuilder(f"{zone}-{i}").zone(zone).gpus(per_node).obj()
        for zone, count, per_node in zone_gpus
        for i in range(count)
    ]
    return ClusterView.from_objects(nodes, zone_label=ZONE, kept=adapters.KEPT)


def choose(
    view: ClusterView,
    demand: list[PodGroup],
    *,
    recorded: str | None = None,
    placed: tuple[zones.Placed, ...] = (),
    pod_spec: Mapping[str, Any] | None = None,
    reserved: Mapping[str, resources.Resources] | None = None,
    **settings: Any,
) -> zones.ZoneChoice:
    def read_reserved() -> Mapping[str, resources.Resources]:
        if reserved is None:
            raise AssertionError("reservations were read although capacity did not decide")
        return reserved

    return zones.choose_zone(
        pod_spec=pod_spec or {},
        demand=demand,
        recorded_zone=recorded,
        placed=placed,
        view=view,
        settings=Settings(**settings),
        reserved=read_reserved,
    )


VIEW = cluster(("zone-a", 1, 8), ("zone-b", 2, 8), ("zone-c", 8, 8))  # 8, 16 and 64 GPUs


def test_a_recorded_zone_wins_before_anything_is_read() -> None:
    choice = choose(VIEW, [PodGroup(100, gpus(8))], recorded="zone-a")
    assert (choice.zone, choice.reason) == ("zone-a", zones.Reason.RECORDED)


def test_the_coordinators_zone_wins_over_the_members_majority() -> None:
    placed = (zones.Placed("zone-b", False), zones.Placed("zone-b", False))
    choice = choose(VIEW, [], placed=(*placed, zones.Placed("zone-c", True)))
    assert (choice.zone, choice.reason) == ("zone-c", zones.Reason.COORDINATOR_PLACED)
    assert choice.warnings == (
        "pods of this job already run in several zones (zone-b: 2, zone-c: 1)",
    )


def test_without_a_coordinator_the_members_majority_wins() -> None:
    placed = (zones.Placed("zone-c", False), *[zones.Placed("zone-b", False)] * 2)
    choice = choose(VIEW, [], placed=placed)
    assert (choice.zone, choice.reason) == ("zone-b", zones.Reason.MEMBERS_PLACED)


def test_a_pod_that_requires_one_zone_gets_it() -> None:
    choice = choose(VIEW, [PodGroup(2, gpus(8))], pod_spec={"nodeSelector": {ZONE: "zone-a"}})
    assert (choice.zone, choice.reason) == ("zone-a", zones.Reason.POD_CONSTRAINT)


@pytest.mark.parametrize(
    ("placement", "zone", "reason"),
    [
        (Placement.BEST_FIT, "zone-b", zones.Reason.BEST_FIT),
        (Placement.MOST_FREE, "zone-c", zones.Reason.MOST_FREE),
    ],
)
def test_capacity_decides_among_zones_where_the_whole_gang_fits(
    placement: Placement, zone: str, reason: zones.Reason
) -> None:
    choice = choose(VIEW, [PodGroup(2, gpus(8))], reserved={}, placement=placement)
    assert (choice.zone, choice.reason) == (zone, reason)
    assert [(c.zone, c.fits) for c in choice.capacity] == [
        ("zone-a", False),
        ("zone-b", True),
        ("zone-c", True),
    ]


def test_reservations_count_as_taken() -> None:
    choice = choose(VIEW, [PodGroup(2, gpus(8))], reserved={"zone-b": {GPU: 8}})
    assert choice.zone == "zone-c"


def test_free_gpus_spread_over_small_nodes_do_not_hold_a_big_pod() -> None:
    view = cluster(("zone-a", 4, 4), ("zone-b", 1, 16))  # 16 free GPUs each
    choice = choose(view, [PodGroup(2, gpus(8))], reserved={})
    assert (choice.zone, [c.fits for c in choice.capacity]) == ("zone-b", [False, True])


def test_no_fit_pins_to_the_zone_with_most_free_and_warns() -> None:
    choice = choose(VIEW, [PodGroup(16, gpus(8))], reserved={})
    assert (choice.zone, choice.reason) == ("zone-c", zones.Reason.NO_FIT_MOST_FREE)
    assert choice.reason == "no-fit-most-free"  # the wire value, in records and audit
    assert choice.warnings


def test_no_fit_leaves_the_pod_unpinned_when_configured() -> None:
    choice = choose(VIEW, [PodGroup(16, gpus(8))], reserved={}, no_fit=NoFit.UNPINNED)
    assert (choice.zone, choice.reason) == (None, zones.Reason.NO_FIT_UNPINNED)


def test_no_usable_node_in_any_zone() -> None:
    view = ClusterView.from_objects([NodeBuilder("n").obj()], zone_label=ZONE, kept=adapters.KEPT)
    choice = choose(view, [PodGroup(1, gpus(8))], reserved={})
    assert (choice.zone, choice.reason) == (None, zones.Reason.NO_ZONES)


# -- spread_into: pods on their way, placed as the scheduler's LeastAllocated spreads them -----

GPU = "nvidia.com/gpu"


def test_spread_puts_each_pod_on_the_node_with_the_most_free() -> None:
    free = [{GPU: 8, "cpu": 64}, {GPU: 8, "cpu": 64}, {GPU: 2, "cpu": 64}]
    assert zones.spread_into([PodGroup(8, {GPU: 1, "cpu": 1})], free, GPU)
    assert [f[GPU] for f in free] == [4, 4, 2]
    # One more 8-GPU pod finds no node; first-fit would have said one node stays free.
    assert not zones.spread_into([PodGroup(1, {GPU: 8})], free, GPU)
    assert zones.pack_into([PodGroup(8, {GPU: 1})], packed := [{GPU: 8}, {GPU: 8}], GPU)
    assert packed == [{GPU: 0}, {GPU: 8}]


def test_spread_passes_over_a_node_short_of_another_resource() -> None:
    free = [{GPU: 8, "cpu": 0}, {GPU: 4, "cpu": 8}]
    assert zones.spread_into([PodGroup(2, {GPU: 1, "cpu": 1})], free, GPU)
    assert free == [{GPU: 8, "cpu": 0}, {GPU: 2, "cpu": 6}]


def test_a_pod_that_fits_nowhere_leaves_the_other_nodes_for_smaller_pods() -> None:
    free = [{GPU: 4}, {GPU: 4}]
    assert not zones.spread_into([PodGroup(1, {GPU: 8}), PodGroup(2, {GPU: 2})], free, GPU)
    assert free == [{GPU: 2}, {GPU: 2}]


def test_spread_is_bounded_whatever_a_job_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``SPREAD_LIMIT`` pods one by one, the rest is packed first-fit in one go; a pod that
    asks for nothing takes no room, however many there are."""
    monkeypatch.setattr(zones, "SPREAD_LIMIT", 3)
    free = [{"memory": 10**12}, {"memory": 10**12}]
    groups = [PodGroup(10**6, {"memory": 1}), PodGroup(10**15, {})]
    assert zones.spread_into(groups, free, "memory")
    assert free == [{"memory": 10**12 - 2 - (10**6 - 3)}, {"memory": 10**12 - 1}]


_requests = st.dictionaries(st.sampled_from([GPU, "cpu"]), st.integers(0, 8), max_size=2)


@given(
    demand=st.lists(st.builds(PodGroup, st.integers(0, 12), _requests), max_size=4),
    free=st.lists(
        st.fixed_dictionaries({GPU: st.integers(0, 8), "cpu": st.integers(0, 8)}), max_size=5
    ),
)
def test_spread_takes_only_what_is_free_and_all_of_it_when_it_says_so(
    demand: list[PodGroup], free: list[dict[str, int]]
) -> None:
    before = [dict(f) for f in free]
    ok = zones.spread_into(demand, free, GPU)
    assert all(v >= 0 for f in free for v in f.values())
    taken = {k: sum(b[k] - f[k] for b, f in zip(before, free, strict=True)) for k in (GPU, "cpu")}
    asked = {k: sum(g.count * max(0, g.requests.get(k, 0)) for g in demand) for k in (GPU, "cpu")}
    assert all(taken[k] <= asked[k] for k in taken)
    assert not ok or taken == asked
