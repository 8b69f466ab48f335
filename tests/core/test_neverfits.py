"""A gang that can never fit one zone (issue 29 item 6), and how free room is split over a
zone's nodes (item 5): ``neverfits`` alone, then as ``release.plan`` says it."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import NodeBuilder
from tests.core.test_release import HOLD, cluster, held_job, hogs, plan
from webhook.core import adapters, neverfits
from webhook.core.adapters.base import PodGroup
from webhook.core.settings import TooBig
from webhook.core.view import ClusterView

GPU = "nvidia.com/gpu"


def node(gpus: int, cpu: int = 64_000) -> dict[str, int]:
    return {GPU: gpus, "cpu": cpu}


def gang(count: int, gpus: int = 8, cpu: int = 1000) -> list[PodGroup]:
    return [PodGroup(count, {GPU: gpus, "cpu": cpu})]


# -- never_fits --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("demand", "capacity", "never"),
    [
        (gang(8), {"a": [node(8)] * 8}, False),  # exactly one zone's worth
        (gang(9), {"a": [node(8)] * 8, "b": [node(8)] * 8}, True),  # 72 > 64 in either zone
        (gang(2, gpus=16), {"a": [node(8)] * 8}, True),  # the sum is there, no node is
        (gang(2, gpus=16), {"a": [node(8)] * 8, "b": [node(16)] * 2}, False),
        (gang(4, cpu=40_000), {"a": [node(8, cpu=64_000)] * 3}, True),  # cpu: one pod a node
        (gang(1), {}, True),  # no zone admits its pods
        (gang(1), {"a": []}, True),
    ],
    ids=["exact", "bigger", "per-node", "other-zone", "second-resource", "no-zone", "no-node"],
)
def test_never_fits_counts_every_node_free_node_by_node(
    demand: list[PodGroup], capacity: dict[str, list[dict[str, int]]], never: bool
) -> None:
    assert (neverfits.never_fits(demand, GPU, capacity) is not None) is never


def test_how_many_pods_of_its_size_the_largest_zone_holds() -> None:
    launcher = PodGroup(1, {"cpu": 1000})
    found = neverfits.never_fits(
        [launcher, *gang(12)], GPU, {"a": [node(8)] * 3, "b": [node(8)] * 8, "c": [node(4)] * 9}
    )
    assert found is not None
    assert (found.best, found.at_most, found.pod_size, found.need) == ("b", 8, 8, 96)
    assert found.zones == {"a": 24, "b": 64, "c": 36}
    assert found.describe() == (
        "the largest zone for it, b, has 64 nvidia.com/gpu on the nodes its pods may use: "
        "room for 8 pod(s) of 8 nvidia.com/gpu at most"
    )
    assert found.ways_out("podium release mpijob/x -n ml") == (
        "run it across zones (podium release mpijob/x -n ml --unpinned for this job, or the "
        "setting too-big: spread for every such gang), or shrink it to at most 8 pod(s) of "
        "8 nvidia.com/gpu"
    )


def test_a_pod_bigger_than_any_node_is_not_told_to_spread() -> None:
    found = neverfits.never_fits(gang(2, gpus=16), GPU, {"a": [node(8)] * 8})
    assert found is not None and found.at_most == 0
    assert "--unpinned" not in found.ways_out("podium release x/y -n z")
    assert "make its pods smaller" in found.ways_out("podium release x/y -n z")


def test_no_zone_at_all_says_to_check_where_the_pods_may_go() -> None:
    found = neverfits.never_fits(gang(1), GPU, {})
    assert found is not None and found.best is None
    assert "node selector" in found.ways_out("podium release x/y -n z")


# -- per_node -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "said"),
    [
        ([5, 5, 6, 5], "6/5/5/5 per node"),
        ([21], "21 on one node"),
        ([8, 0, 8, 0, 0], "8/8 per node, none on 3 others"),
        ([4, 0], "4 on one node, none on 1 other"),
        ([0, 0], "none on any node"),
        ([], "no node"),
        ([-2, 3], "3 on one node, none on 1 other"),  # overcommitted: nothing free, not less
        ([8] * 12 + [2] * 3 + [0] * 5, "8 on 12 nodes, 2 on 3, none on 5 others"),
        (list(range(1, 41)), "40 on 1 node, 39 on 1, 38 on 1, 37 on 1, less on 36"),
    ],
)
def test_per_node_says_how_free_room_is_split(free: list[int], said: str) -> None:
    assert neverfits.per_node(free) == said


def test_per_node_in_the_resources_units() -> None:
    assert neverfits.per_node([8000, 4500], "cpu") == "8/4500m per node"
    assert neverfits.per_node([3 << 30, 1 << 29], "memory") == "3Gi/512Mi per node"


@given(st.lists(st.integers(min_value=-(10**6), max_value=10**6), max_size=5000))
def test_per_node_is_bounded_whatever_the_cluster(free: list[int]) -> None:
    said = neverfits.per_node(free)
    assert len(said) <= 160, said
    listed = said.split(" ")[0].split("/")
    if sum(1 for f in free if f > 0) <= neverfits.LISTED_NODES and any(f > 0 for f in free):
        assert sorted(map(int, listed), reverse=True) == sorted(f for f in free if f > 0)[::-1]


# -- as the releaser says it --------------------------------------------------------------------


def test_the_held_reason_says_how_free_room_is_split(now: datetime) -> None:
    # zone-c: 8 nodes, 5 of them full, 3 with 4 GPUs free: 12 free, no 8-GPU pod fits.
    objects = [*cluster(), *hogs("c", range(5)), *hogs("c", range(5, 8), gpus=4)]
    objects += [*hogs("a", range(1)), *hogs("b", range(2))]
    (wait,) = plan([*objects, *held_job("llama", 2, now)], now).waits
    assert "the roomiest zone, zone-c, has 12 nvidia.com/gpu free (4/4/4 per node, none on 5 " in (
        wait.why
    )


def test_a_gang_that_never_fits_says_so_with_the_ways_out(now: datetime) -> None:
    (wait,) = plan([*cluster(), *held_job("huge", 9, now)], now).waits
    assert wait.too_big and wait.position == 0 and wait.never is not None
    assert wait.why == (
        "needs 9 × 8 nvidia.com/gpu in one zone, more than any zone holds even empty (the "
        "largest zone for it, zone-c, has 64 nvidia.com/gpu on the nodes its pods may use: room "
        "for 8 pod(s) of 8 nvidia.com/gpu at most); held until an admin acts: run it across "
        "zones (podium release pytorchjob/huge -n team-a --unpinned for this job, or the setting "
        "too-big: spread for every such gang), or shrink it to at most 8 pod(s) of "
        "8 nvidia.com/gpu"
    )
    assert (wait.best_zone, wait.best_free) == ("zone-c", 64)


def test_it_is_said_before_its_last_pod_exists(now: datetime) -> None:
    """The job says 9 pods; 3 exist: waiting for the other 6 would only delay the news."""
    (wait,) = plan([*cluster(), *held_job("huge", 9, now, present=3)], now).waits
    assert wait.too_big and "more than any zone holds even empty" in wait.why
    assert (wait.best_zone, wait.best_free) == ("zone-c", 64)


def test_a_gang_that_fits_once_ready_is_only_waiting_for_its_pods(now: datetime) -> None:
    (wait,) = plan([*cluster(), *held_job("big", 8, now, present=3)], now).waits
    assert not wait.too_big and wait.why == "waiting for its pods: 3 of 8 exist"


def test_spread_waits_for_the_whole_gang_before_it_releases(now: datetime) -> None:
    spread = dataclasses.replace(HOLD, too_big=TooBig.SPREAD)
    p = plan([*cluster(), *held_job("huge", 9, now, present=3)], now, spread)
    assert p.releases == () and [w.why for w in p.waits] == ["waiting for its pods: 3 of 9 exist"]


def test_a_bigger_node_makes_it_fit_again(now: datetime) -> None:
    bigger = NodeBuilder("d-0").zone("zone-c").gpus(16).obj()
    (wait,) = plan([*cluster(), bigger, *hogs("c", range(8)), *held_job("huge", 9, now)], now).waits
    assert not wait.too_big and wait.position == 1


@given(
    st.dictionaries(
        st.sampled_from(["zone-a", "zone-b", "zone-c"]),
        st.lists(st.sampled_from([0, 2, 4, 8, 16]), min_size=0, max_size=6),
        max_size=3,
    ),
    st.integers(min_value=1, max_value=12),
    st.sampled_from([1, 4, 8, 16]),
)
def test_the_cheap_way_agrees_with_the_whole_count(
    zone_gpus: dict[str, list[int]], pods: int, size: int
) -> None:
    """``never_fits_on`` (a view's candidate zones, largest first, packing only where the sum
    suffices) answers as ``never_fits`` on the same nodes."""
    nodes = [
        NodeBuilder(f"{zone}-{i}").zone(zone).gpus(gpus).obj()
        for zone, sizes in zone_gpus.items()
        for i, gpus in enumerate(sizes)
    ]
    view = ClusterView.from_objects(nodes, zone_label=HOLD.zone_label, kept=adapters.KEPT)
    candidates = view.candidate_zones({})
    demand = gang(pods, gpus=size)
    capacity = {z: neverfits.capacity_of(n) for z, n in candidates.items()}
    cheap = neverfits.never_fits_on(demand, GPU, candidates)
    assert cheap == neverfits.never_fits(demand, GPU, capacity)


def test_what_a_zone_may_grow_by_counts_too() -> None:
    """The extension point for buffers: nodes a zone may still get make a gang fit."""
    nodes = [NodeBuilder(f"c-{i}").zone("zone-c").obj() for i in range(8)]
    view = ClusterView.from_objects(nodes, zone_label=HOLD.zone_label, kept=adapters.KEPT)
    candidates = view.candidate_zones({})
    assert neverfits.never_fits_on(gang(9), GPU, candidates) is not None
    assert neverfits.never_fits_on(gang(9), GPU, candidates, {"zone-c": [node(8)]}) is None
    grown = neverfits.never_fits_on(gang(9), GPU, candidates, {"zone-d": [node(8)] * 2})
    assert grown is not None and grown.zones == {"zone-c": 64, "zone-d": 16}
    assert neverfits.never_fits_on(gang(2), GPU, {}, {"zone-d": [node(8)] * 2}) is None


def test_a_release_at_the_timeout_says_how_the_zones_room_is_split(now: datetime) -> None:
    objects = [*cluster(), *hogs("c", range(5)), *held_job("llama", 4, now - timedelta(hours=1))]
    settings = dataclasses.replace(HOLD, hold_timeout_seconds=1800)
    (r,) = plan(objects, now, settings).releases
    assert "pinned to zone-c, which has the most free (24 nvidia.com/gpu, 8/8/8 per node, " in (
        r.detail
    )
