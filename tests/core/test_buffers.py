"""``core.buffers`` through ``release.plan``: with ``capacity-buffers: on`` a held gang that fits
no zone gets one CapacityBuffer in the zone where the fewest new nodes make it fit (among the
zones ``buffer-zones`` and its pods' own node selection allow), kept there until its deadline,
then the next zone, then stopped; caps refuse; a gang that fits is released and its buffer is
deleted. Off (the default) changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import NodeBuilder, PodBuilder, namespace
from tests.core.test_release import held_job, hogs, plan
from tests.scenarios import NS
from webhook.core import buffers, labels, release
from webhook.core.settings import (
    BufferDeadline,
    CapacityBuffers,
    Settings,
    SettingsError,
    ZoneChooser,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(seconds=30)
OFF = Settings(zone_chooser=ZoneChooser.HOLD)
ON = Settings(zone_chooser=ZoneChooser.HOLD, capacity_buffers=CapacityBuffers.ON)


def nodes(**per_zone: int) -> list[dict[str, Any]]:
    """``zone_a=2`` → nodes a-0, a-1 of 8 GPUs in zone-a."""
    out = [namespace(NS)]
    for key, count in per_zone.items():
        zone = key.replace("_", "-")
        prefix = zone.removeprefix("zone-")
        out += [NodeBuilder(f"{prefix}-{i}").zone(zone).obj() for i in range(count)]
    return out


def gang(name: str = "big", pods: int = 4) -> list[dict[str, Any]]:
    return held_job(name, pods, T0)


def existing(
    want: buffers.Want, *, created: datetime, provisioning: tuple[str, str, str] | None = None
) -> list[dict[str, Any]]:
    """The template and buffer the releaser wrote for ``want``, as the view then holds them."""
    template, buffer = want.manifests()
    buffer["metadata"]["uid"] = f"uid-{want.name}"
    buffer["metadata"]["creationTimestamp"] = created.isoformat()
    if provisioning is not None:
        status, reason, message = provisioning
        buffer["status"] = {
            "conditions": [
                {"type": "Provisioning", "status": status, "reason": reason, "message": message}
            ]
        }
    return [template, buffer]


def only_want(p: release.Plan) -> buffers.Want:
    (want,) = p.grow
    return want


def test_off_by_default_nothing_changes() -> None:
    objects = [*nodes(zone_a=1, zone_b=1), *gang()]
    p = plan(objects, NOW, OFF)
    assert p.grow == () and p.unwanted == ()
    (wait,) = p.waits
    assert wait.too_big and "CapacityBuffer" not in wait.why
    before = plan(objects, NOW, Settings(zone_chooser=ZoneChooser.HOLD))
    assert [(w.why, w.position) for w in p.waits] == [(w.why, w.position) for w in before.waits]


def test_a_gang_no_zone_holds_gets_one_buffer_pinned_to_the_zone_to_grow() -> None:
    objects = [*nodes(zone_a=1, zone_b=2), *gang()]
    p = plan(objects, NOW, ON)
    assert p.releases == ()
    want = only_want(p)
    (wait,) = p.waits
    # zone-b has 2 free nodes: 2 new ones make 4; zone-a would need 3
    assert (want.zone, want.replicas, want.new_nodes) == ("zone-b", 4, 2)
    assert not wait.too_big and wait.position == 1
    assert "CapacityBuffer" in wait.why and "zone-b" in wait.why
    template, buffer = want.manifests()
    job_uid = objects[-1]["metadata"]["ownerReferences"][0]["uid"]
    for obj in (template, buffer):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == job_uid
        assert obj["metadata"]["labels"][labels.MANAGED_BY] == labels.MANAGER
    assert buffer["spec"] == {"podTemplateRef": {"name": want.name}, "replicas": 4}
    assert buffer["metadata"]["annotations"][labels.ZONE] == "zone-b"
    spec = template["template"]["spec"]
    assert spec["nodeSelector"][ON.zone_label] == "zone-b"
    (container,) = spec["containers"]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8"}


@pytest.mark.parametrize(
    ("zones", "busy", "settings_zones", "expected"),
    [
        ({"zone_a": 1, "zone_b": 1}, [], frozenset(), "zone-a"),  # a tie: by name
        ({"zone_a": 1, "zone_b": 1}, [("a", 1)], frozenset(), "zone-b"),  # a's node is busy
        ({"zone_a": 3, "zone_b": 1}, [("a", 3)], frozenset(), "zone-b"),
        ({"zone_a": 1, "zone_b": 3}, [], frozenset({"zone-a"}), "zone-a"),  # buffer-zones
        ({"zone_a": 2, "zone_b": 2, "zone_c": 3}, [("c", 2)], frozenset(), "zone-a"),
    ],
)
def test_the_zone_to_grow_is_the_one_needing_the_fewest_new_nodes(
    zones: dict[str, int],
    busy: list[tuple[str, int]],
    settings_zones: frozenset[str],
    expected: str,
) -> None:
    objects = [*nodes(**zones), *gang()]
    for prefix, count in busy:
        objects += hogs(prefix, range(count))
    chosen = plan(objects, NOW, Settings(**{**_on(), "buffer_zones": settings_zones}))
    assert only_want(chosen).zone == expected


def _on(**more: Any) -> dict[str, Any]:
    return {"zone_chooser": ZoneChooser.HOLD, "capacity_buffers": CapacityBuffers.ON, **more}


def test_the_pods_own_node_selection_narrows_the_zones() -> None:
    objects = [*nodes(zone_a=1, zone_b=3), *gang()]
    for obj in objects:
        if obj["kind"] == "Pod":
            obj["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": ON.zone_label,
                                        "operator": "NotIn",
                                        "values": ["zone-b"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            }
    want = only_want(plan(objects, NOW, ON))
    assert want.zone == "zone-a"
    affinity = want.manifests()[0]["template"]["spec"]["affinity"]
    assert affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


@pytest.mark.parametrize(
    ("more", "word"),
    [({"buffer_max_per_gang": 16}, "buffer-max-per-gang"), ({"buffer_max_total": 24}, "total")],
)
def test_a_gang_over_a_cap_gets_no_buffer_and_says_why(more: dict[str, Any], word: str) -> None:
    p = plan([*nodes(zone_a=1, zone_b=1), *gang()], NOW, Settings(**_on(**more)))
    assert p.grow == ()
    (wait,) = p.waits
    assert wait.too_big and word in wait.why


def test_the_total_cap_counts_the_buffers_other_gangs_have() -> None:
    base = [*nodes(zone_a=1, zone_b=1), *gang("first", 2)]
    first = only_want(plan(base, NOW, ON))
    assert first.asked == 16
    objects = [*base, *existing(first, created=NOW), *held_job("second", 4, NOW)]
    later = NOW + timedelta(seconds=5)
    p = plan(objects, later, Settings(**_on(buffer_max_total=40)))
    assert [w.name for w in p.grow] == [first.name]
    second = next(w for w in p.waits if w.held.gang.owner.name == "second")
    assert "buffer-max-total" in second.why


def test_a_buffer_keeps_its_zone_until_its_deadline_then_the_next_zone_then_stops() -> None:
    settings = Settings(**_on(buffer_deadline_seconds=60, hold_timeout_seconds=3600))
    base = [*nodes(zone_a=1, zone_b=1), *gang()]
    first = only_want(plan(base, NOW, settings))
    assert first.zone == "zone-a" and first.changed
    # zone-b now looks better, but the zone asked is kept until its deadline
    said = ("False", "RequiresNewCapacity", "3/4 virtual pods required new capacity, 0 failed")
    shown = [*base, *existing(first, created=NOW, provisioning=said)]
    busier = [*shown, *hogs("a", range(1))]
    kept = only_want(plan(busier, NOW + timedelta(seconds=59), settings))
    assert kept.zone == "zone-a" and not kept.changed
    (wait,) = plan(busier, NOW + timedelta(seconds=59), settings).waits
    assert "RequiresNewCapacity" in wait.why
    moved = only_want(plan(busier, NOW + timedelta(seconds=60), settings))
    assert (moved.zone, moved.tried, moved.changed) == ("zone-b", ("zone-a",), True)
    # zone-b's deadline passes too: nothing left to try, the buffer stops (replicas 0)
    both = [*base, *existing(moved, created=NOW + timedelta(seconds=60))]
    at = NOW + timedelta(seconds=121)
    p = plan(both, at, settings)
    stopped = only_want(p)
    assert (stopped.zone, stopped.tried, stopped.replicas) == (None, ("zone-a", "zone-b"), 0)
    assert stopped.manifests()[1]["spec"]["replicas"] == 0
    (wait,) = p.waits
    assert wait.too_big and "brought no room" in wait.why
    # then the hold-timeout applies as without buffers (here: still within it)
    assert p.releases == ()


def test_a_stopped_buffer_leaves_the_gang_to_the_hold_timeout() -> None:
    settings = Settings(
        **_on(buffer_deadline_seconds=60, buffer_on_deadline=BufferDeadline.HOLD_TIMEOUT),
        hold_timeout_seconds=90,
    )
    base = [*nodes(zone_a=2, zone_b=1), *hogs("a", range(1)), *hogs("b", range(1))]
    base += gang("mid", 2)
    first = only_want(plan(base, NOW, settings))
    assert first.zone == "zone-a"
    later = NOW + timedelta(seconds=61)
    stopped = only_want(plan([*base, *existing(first, created=NOW)], later, settings))
    assert stopped.zone is None and stopped.tried == ("zone-a",)
    written = [*base, *existing(stopped, created=NOW)]
    p = plan(written, T0 + timedelta(seconds=91), settings)
    assert [(r.reason, r.zone) for r in p.releases] == [(release.TIMEOUT, "zone-a")]


def test_once_the_zone_grew_the_gang_is_released_there_and_its_buffer_deleted() -> None:
    base = [*nodes(zone_a=1, zone_b=1), *gang()]
    want = only_want(plan(base, NOW, ON))
    grown = [
        *base,
        *existing(want, created=NOW),
        *(NodeBuilder(f"new-{i}").zone("zone-a").obj() for i in range(3)),
    ]
    p = plan(grown, NOW + timedelta(seconds=40), ON)
    assert [(r.zone, r.reason) for r in p.releases] == [("zone-a", "best-fit")]
    assert p.grow == ()
    assert [(e.name, e.zone) for e in p.unwanted] == [(want.name, "zone-a")]


def test_a_buffer_with_no_held_gang_left_is_deleted() -> None:
    base = [*nodes(zone_a=1, zone_b=1), *gang()]
    want = only_want(plan(base, NOW, ON))
    gone = [o for o in base if o["kind"] != "Pod"] + existing(want, created=NOW)
    p = plan(gone, NOW, ON)
    assert [e.name for e in p.unwanted] == [want.name]
    # switched off, podium still removes the buffers it made
    assert [e.name for e in plan(gone, NOW, OFF).unwanted] == [want.name]


def test_a_gang_that_fits_somewhere_gets_no_buffer() -> None:
    p = plan([*nodes(zone_a=4, zone_b=1), *gang()], NOW, ON)
    assert [r.zone for r in p.releases] == ["zone-a"] and p.grow == ()


@settings(max_examples=60, deadline=None)
@given(
    per_zone=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    busy=st.lists(st.integers(0, 4), min_size=3, max_size=3),
    pods=st.integers(1, 6),
    gpus=st.sampled_from([2, 4, 8]),
)
def test_the_nodes_a_buffer_counts_are_enough_and_no_allowed_zone_needs_fewer(
    per_zone: list[int], busy: list[int], pods: int, gpus: int
) -> None:
    """Whatever the cluster: when the autoscaler makes the new nodes podium counted in the
    zone it chose, the gang fits there and is released there; no other zone needed fewer."""
    zones = {f"zone_{'abc'[i]}": n for i, n in enumerate(per_zone)}
    objects = [*nodes(**zones), *held_job("g", pods, T0, gpus=gpus)]
    for i, n in enumerate(per_zone):
        objects += hogs("abc"[i], range(min(n, busy[i])))
    p = plan(objects, NOW, ON)
    if p.releases or not any(per_zone):
        return  # it fits already, or no zone is known to grow
    want = only_want(p)
    assert want.zone is not None and want.replicas * want.pod["nvidia.com/gpu"] >= pods * gpus
    grown = [
        *objects,
        *(NodeBuilder(f"new-{i}").zone(want.zone).obj() for i in range(want.new_nodes)),
    ]
    after = plan(grown, NOW, ON)
    assert [r.zone for r in after.releases] == [want.zone]
    for other in {z.replace("_", "-") for z, n in zones.items() if n} - {want.zone}:
        fewer = [
            *objects,
            *(NodeBuilder(f"x-{i}").zone(other).obj() for i in range(want.new_nodes - 1)),
        ]
        if want.new_nodes:
            assert not plan(fewer, NOW, ON).releases, other


def test_a_pod_behind_no_gate_is_not_asked_for() -> None:
    """Bound pods of other work are never in a buffer: only held gangs are."""
    objects = [*nodes(zone_a=1), PodBuilder(NS, name="lone").gpus(8).obj()]
    assert plan(objects, NOW, ON).grow == ()


@settings(max_examples=80, deadline=None)
@given(value=st.one_of(st.integers(-5, 10_000), st.booleans(), st.text(max_size=4), st.none()))
def test_the_caps_are_whole_numbers_zero_or_more(value: object) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    for key in ("buffer-max-per-gang", "buffer-max-total"):
        try:
            loaded = Settings.from_mapping({key: value})
        except SettingsError:
            assert not ok
        else:
            assert ok and getattr(loaded, key.replace("-", "_")) == value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("on", CapacityBuffers.ON), (True, CapacityBuffers.ON), (False, CapacityBuffers.OFF)],
)
def test_capacity_buffers_reads_on_and_off_quoted_or_not(
    raw: object, expected: CapacityBuffers
) -> None:
    assert Settings.from_mapping({"capacity-buffers": raw}).capacity_buffers is expected
    assert Settings().capacity_buffers is CapacityBuffers.OFF
    loaded = Settings.from_mapping(
        {"buffer-zones": ["zone-a"], "buffer-on-deadline": "hold-timeout"}
    )
    assert loaded.buffer_zones == frozenset({"zone-a"})
    assert loaded.buffer_on_deadline is BufferDeadline.HOLD_TIMEOUT
