"""``release.plan`` with ``topology-levels``: a gang goes into the tightest domain of its zone
that fits it whole, the release patch and the record carry the domain, later pods follow it, a
required level with no room waits (and times out into the zone alone), pods heading into a
domain take room there, and an empty ``topology-levels`` changes nothing."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import jsonpatch

from tests.builders import NodeBuilder, PodBuilder, namespace
from tests.core.test_engine import decide
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, labels, mutation, release
from webhook.core.settings import Settings, ZoneChooser
from webhook.core.view import ClusterView

L2 = "topology.k8s.aws/network-node-layer-2"
L3 = "topology.k8s.aws/network-node-layer-3"
TOPO = Settings(zone_chooser=ZoneChooser.HOLD, topology_levels=(L2, L3))


def cluster() -> list[dict[str, Any]]:
    """zone-a: layer-2 nn-a over layer-3 blocks b1 (3 nodes) and b2 (2 nodes), and one node
    with no layer labels; zone-b: one unlabelled node. 8 GPUs per node."""
    nodes = [
        NodeBuilder(f"a-{block}-{i}").zone("zone-a").label(L2, "nn-a").label(L3, block).obj()
        for block, count in (("b1", 3), ("b2", 2))
        for i in range(count)
    ]
    bare = [NodeBuilder("a-bare").zone("zone-a").obj(), NodeBuilder("b-0").zone("zone-b").obj()]
    return [namespace(NS), *nodes, *bare]


def held_job(
    name: str, pods: int, at: datetime, notes: dict[str, str] | None = None, gpus: int = 8
) -> list[dict[str, Any]]:
    pj = pytorchjob(name, workers=pods - 1, gpus=gpus)
    out = [pj]
    for i in range(pods):
        rtype, index = ("master", 0) if i == 0 else ("worker", i - 1)
        pod = pytorch_pod(pj, rtype, index, gpus=gpus).uid().obj()
        pod["metadata"].setdefault("annotations", {}).update(notes or {})
        held = mutation.hold(pod, gang_key=pj["metadata"]["uid"]).pod
        held["metadata"]["creationTimestamp"] = at.isoformat().replace("+00:00", "Z")
        out.append(held)
    return out


def plan(objects: list[dict[str, Any]], now: datetime, settings: Settings = TOPO) -> release.Plan:
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    return release.plan(view, settings, now=now)


def ungate(
    objects: list[dict[str, Any]], r: release.Release, only: set[str] | None = None
) -> list[dict[str, Any]]:
    names = {ref.name for ref in r.pods} if only is None else only
    out = [
        jsonpatch.apply_patch(o, release.release_patch(o, r, TOPO))
        if o["kind"] == "Pod" and o["metadata"]["name"] in names
        else o
        for o in objects
    ]
    return [*out, *([r.record] if r.record is not None else [])]


def test_a_gang_goes_into_the_tightest_block_and_the_patch_and_record_say_so(
    now: datetime,
) -> None:
    objects = [*cluster(), *held_job("llama", 2, now)]
    (r,) = plan(objects, now).releases
    assert (r.zone, r.domain) == ("zone-a", f"{L2}=nn-a,{L3}=b2")
    assert "tightest of 2" in r.topology and r.topology in r.detail
    assert r.record is not None and r.record["data"]["topology"] == r.domain
    pod = next(o for o in objects if o["kind"] == "Pod")
    after = jsonpatch.apply_patch(pod, release.release_patch(pod, r, TOPO))
    (term,) = after["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": labels.ZONE_LABEL, "operator": "In", "values": ["zone-a"]},
        {"key": L2, "operator": "In", "values": ["nn-a"]},
        {"key": L3, "operator": "In", "values": ["b2"]},
    ]
    assert after["metadata"]["annotations"][labels.TOPOLOGY] == r.domain
    assert "schedulingGates" not in after["spec"]


def test_a_gang_that_fits_no_block_climbs_and_then_takes_the_zone_alone(now: datetime) -> None:
    (r,) = plan([*cluster(), *held_job("llama", 4, now)], now).releases
    assert r.domain == f"{L2}=nn-a" and f"no {L3} domain has room" in r.topology
    (z,) = plan([*cluster(), *held_job("llama", 6, now)], now).releases
    assert (z.zone, z.domain) == ("zone-a", "") and "the zone alone" in z.topology
    assert z.record is not None and "topology" not in z.record["data"]


def test_required_level_with_no_room_waits_and_names_the_roomiest_block(now: datetime) -> None:
    notes = {labels.REQUIRED_TOPOLOGY: L3}
    p = plan([*cluster(), *held_job("llama", 4, now, notes)], now)
    assert p.releases == ()
    (w,) = p.waits
    assert w.position == 1 and w.best_zone == "zone-a"
    assert w.why == (
        f"requires one {L3} domain with 32 nvidia.com/gpu free; the roomiest, b1, has "
        "24 nvidia.com/gpu free of 24 nvidia.com/gpu on 3 node(s) (in zone-a, where the zone "
        "has room for it); 1st in line"
    )


def test_a_required_level_times_out_into_the_zone_alone(now: datetime) -> None:
    notes = {labels.REQUIRED_TOPOLOGY: L3}
    settings = dataclasses.replace(TOPO, hold_timeout_seconds=60.0)
    objects = [*cluster(), *held_job("llama", 4, now - timedelta(seconds=61), notes)]
    (r,) = plan(objects, now, settings).releases
    assert (r.zone, r.reason, r.domain) == ("zone-a", release.TIMEOUT, "")
    assert "released into zone-a alone" in r.detail


def test_an_unknown_level_is_said_and_the_zone_alone_is_used(now: datetime) -> None:
    notes = {labels.PREFERRED_TOPOLOGY: "rack"}
    (r,) = plan([*cluster(), *held_job("llama", 2, now, notes)], now).releases
    assert r.domain == "" and "'rack' is not one of topology-levels" in r.detail


def test_later_pods_of_a_half_released_gang_follow_its_domain(now: datetime) -> None:
    objects = [*cluster(), *held_job("llama", 3, now)]
    (r,) = plan(objects, now).releases
    assert r.domain == f"{L2}=nn-a,{L3}=b1"
    half = ungate(objects, r, only={r.pods[0].name})
    (done,) = plan(half, now).releases
    assert (done.reason, done.domain) == (release.COMPLETED, r.domain)
    pod = next(o for o in half if o["metadata"].get("name") == done.pods[0].name)
    after = jsonpatch.apply_patch(pod, release.release_patch(pod, done, TOPO))
    assert after["metadata"]["annotations"][labels.TOPOLOGY] == r.domain


def test_pods_heading_into_a_block_take_room_there(now: datetime) -> None:
    first = held_job("first", 2, now - timedelta(seconds=5))
    objects = [*cluster(), *first]
    (r,) = plan(objects, now).releases
    assert r.domain.endswith("=b2")
    # Released into b2, not bound yet: b2 is full for the next gang, which goes to b1.
    (second,) = plan([*ungate(objects, r), *held_job("second", 2, now)], now).releases
    assert second.domain.endswith("=b1")


def test_a_gang_no_block_fits_takes_the_fewest_blocks_and_leaves_the_rest_whole(
    now: datetime,
) -> None:
    """3 × 8 fits none of b1 (2 nodes), b2 (2) and b3 (1): it goes into b1 and b3 (the roomiest,
    then the tightest that completes it), one patch requiring both; heading there, it leaves
    b2 whole for the next gang of 2 × 8 — spread over the layer-2 domain, as the scheduler's
    scoring would spread it, no block would be left for that one."""
    nodes = [
        NodeBuilder(f"a-{block}-{i}").zone("zone-a").label(L2, "nn-a").label(L3, block).obj()
        for block, count in (("b1", 2), ("b2", 2), ("b3", 1))
        for i in range(count)
    ]
    objects = [namespace(NS), *nodes, *held_job("big", 3, now - timedelta(seconds=5))]
    (r,) = plan(objects, now).releases
    assert (r.zone, r.domain) == ("zone-a", f"{L2}=nn-a,{L3}=b1,b3")
    assert f"below it the fewest {L3} domains with room for all of it together: 2" in r.topology
    pod = next(o for o in objects if o["kind"] == "Pod")
    after = jsonpatch.apply_patch(pod, release.release_patch(pod, r, TOPO))
    (term,) = after["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"][1:] == [
        {"key": L2, "operator": "In", "values": ["nn-a"]},
        {"key": L3, "operator": "In", "values": ["b1", "b3"]},
    ]
    (second,) = plan([*ungate(objects, r), *held_job("next", 2, now)], now).releases
    assert second.domain == f"{L2}=nn-a,{L3}=b2"


def test_pods_not_created_yet_take_room_in_their_gangs_block(now: datetime) -> None:
    """A gang released into b2 whose worker its operator has not created yet: the record keeps
    room for the worker inside b2 (it will follow the record there), not spread over the zone —
    so b2 is full and the next gang goes to b1. Counted zone-wide, the worker would have taken a
    b1 node's room, and b2 (one node left, the tightest) would have got the next gang."""
    first = held_job("first", 2, now - timedelta(seconds=5))
    objects = [*cluster(), *first]
    (r,) = plan(objects, now).releases
    assert r.domain.endswith("=b2")
    master = next(o for o in first if o["kind"] == "Pod" and "master" in o["metadata"]["name"])
    worker = next(o for o in first if o["kind"] == "Pod" and o is not master)
    released = [o for o in ungate(objects, r, {master["metadata"]["name"]}) if o is not worker]
    (second,) = plan([*released, *held_job("second", 1, now)], now).releases
    assert second.domain.endswith("=b1")


def test_bound_pods_count_per_node(now: datetime) -> None:
    hog = PodBuilder("other", name="hog").gpus(8).bound("a-b2-0").obj()
    (r,) = plan([*cluster(), hog, *held_job("llama", 2, now)], now).releases
    assert r.domain.endswith("=b1")


def test_no_levels_changes_nothing(now: datetime) -> None:
    objects = [*cluster(), *held_job("llama", 2, now)]
    plain = dataclasses.replace(TOPO, topology_levels=())
    (r,) = plan(objects, now, plain).releases
    assert (r.domain, r.topology) == ("", "")
    assert r.record is not None and "topology" not in r.record["data"]
    pod = next(o for o in objects if o["kind"] == "Pod")
    patch = release.release_patch(pod, r, plain)
    assert not any(labels.TOPOLOGY in str(op) or L3 in str(op) for op in patch)


def test_a_later_pod_of_a_released_gang_is_pinned_into_its_recorded_domain(now: datetime) -> None:
    """A worker created after its gang was released (recreated, or a later stage) is pinned at
    admission to the recorded zone and, from the record, to its domain."""
    pj = pytorchjob("llama", workers=2, gpus=8)
    key = pj["metadata"]["uid"]
    first = decide(pytorch_pod(pj, "master", 0, gpus=8).obj(), base_cluster(pj), now)
    assert first.record is not None
    record = {
        **first.record,
        "data": {**first.record["data"], "zone": "zone-c", "topology": f"{L3}=b1"},
    }
    running = pytorch_pod(pj, "worker", 0, gpus=8).label(labels.JOB, key).bound("c-1").obj()
    objects = [*base_cluster(pj), record, running]
    decision = decide(pytorch_pod(pj, "worker", 1, gpus=8).obj(), objects, now, TOPO)
    assert (decision.outcome, decision.zone) == ("pinned", "zone-c")
    assert decision.patched is not None
    (term,) = decision.patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"][-1] == {"key": L3, "operator": "In", "values": ["b1"]}
    assert decision.patched["metadata"]["annotations"][labels.TOPOLOGY] == f"{L3}=b1"
    assert f"inside {L3}=b1, as its release" in decision.detail  # the audit says so too


def test_the_zone_fit_counts_pods_heading_into_a_block_inside_it(now: datetime) -> None:
    """4 × 4 GPUs released into block b1 (two nodes), not bound yet: counted zone-wide they
    would take 4 GPUs of each of zone-a's four nodes and no 8-GPU pod would fit; their node
    selection keeps them in b1, so b2's two nodes are free for a 2 × 8 gang."""
    nodes = [
        NodeBuilder(f"a-{block}-{i}").zone("zone-a").label(L2, "nn-a").label(L3, block).obj()
        for block in ("b1", "b2")
        for i in range(2)
    ]
    objects = [namespace(NS), *nodes, NodeBuilder("b-0").zone("zone-b").obj()]
    first = [*objects, *held_job("small", 4, now - timedelta(seconds=5), gpus=4)]
    (r,) = plan(first, now).releases
    assert (r.zone, r.domain) == ("zone-a", f"{L2}=nn-a,{L3}=b1")
    (second,) = plan([*ungate(first, r), *held_job("big", 2, now)], now).releases
    assert (second.held.gang.owner.name, second.zone) == ("big", "zone-a")
    assert second.domain == f"{L2}=nn-a,{L3}=b2"


def test_a_gang_goes_to_the_zone_where_a_block_fits_it_not_the_tightest_zone(
    now: datetime,
) -> None:
    """zone-b is the tighter zone (best-fit), but its 3 nodes carry no block labels; zone-a's
    block b1 has room for the whole gang: the gang goes there, not into zone-b alone. Without a
    block anywhere it would take zone-b (the zone fit alone: the second plan)."""
    extra = [NodeBuilder(f"b-{i}").zone("zone-b").obj() for i in (1, 2)]
    objects = [*cluster(), *extra, *held_job("llama", 3, now)]
    (r,) = plan(objects, now).releases
    assert (r.zone, r.domain) == ("zone-a", f"{L2}=nn-a,{L3}=b1")
    (z,) = plan(objects, now, dataclasses.replace(TOPO, topology_levels=())).releases
    assert z.zone == "zone-b"
