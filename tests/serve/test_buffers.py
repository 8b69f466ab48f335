"""The releaser's CapacityBuffers (webhook/serve/buffers.py) on the in-memory API twin: the
PodTemplate before the buffer that names it, one write per change, the buffer deleted before any
pod of its gang is ungated, each step audited and reported on the job."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from tests.builders import NodeBuilder
from tests.core.test_buffers import nodes
from tests.core.test_release import held_job
from tests.serve.test_releaser import HOLD, World
from webhook.core import buffers
from webhook.core.settings import CapacityBuffers
from webhook.serve import buffers as serve_buffers
from webhook.serve import events

ON = dataclasses.replace(HOLD, capacity_buffers=CapacityBuffers.ON)


def world_on(objects: list[dict[str, Any]], now: datetime) -> World:
    world = World(objects, now)
    world.releaser.settings = ON
    return world


def kinds_written(world: World) -> list[tuple[str, str]]:
    return [(c[0], c[1]) for c in world.api.calls if c[0] in ("create", "replace", "delete")]


async def test_a_buffer_is_written_once_template_first_and_reported(now: datetime) -> None:
    world = world_on([*nodes(zone_a=1, zone_b=1), *held_job("big", 4, now)], now)
    entries = await world.pass_()
    assert kinds_written(world) == [("create", "PodTemplate"), ("create", "CapacityBuffer")]
    (entry,) = [e for e in entries if e["outcome"] == "buffer"]
    assert (entry["action"], entry["reason"], entry["zone"]) == ("buffer", "buffer-asked", "zone-a")
    assert [e["outcome"] for e in entry["effects"]] == ["created", "created"]
    assert entry["result"] == "created"
    (event,) = events.build(entry, instance="podium-0", now=now)
    assert event["reason"] == events.CAPACITY_BUFFER and "zone-a" in event["note"]
    assert event["regarding"]["kind"] == "PyTorchJob"
    (buffer,) = [o for (_, k, _, _), o in world.api.objects.items() if k == buffers.KIND]
    assert buffer["spec"]["replicas"] == 4
    assert world.meter.capacity_buffers._value.get() == 1  # PodiumCapacityBuffersWaiting's
    # the next pass finds it as wanted: nothing written
    before = len(kinds_written(world))
    world.now = now + timedelta(seconds=5)
    await world.pass_()
    assert len(kinds_written(world)) == before
    assert world.gated() == [p["metadata"]["name"] for p in world.pods()]


async def test_the_buffer_goes_before_any_pod_of_its_gang_is_ungated(now: datetime) -> None:
    world = world_on([*nodes(zone_a=1, zone_b=1), *held_job("big", 4, now)], now)
    await world.pass_()
    for i in range(3):
        world.api.put(NodeBuilder(f"new-{i}").zone("zone-a").obj())
    world.now = now + timedelta(seconds=30)
    start = len(world.api.calls)
    entries = await world.pass_()
    calls = world.api.calls[start:]
    deletes = [i for i, c in enumerate(calls) if c[0] == "delete"]
    patches = [i for i, c in enumerate(calls) if c[:2] == ("patch", "Pod")]
    assert [calls[i][1] for i in deletes] == ["CapacityBuffer", "PodTemplate"]
    assert len(patches) == 4 and max(deletes) < min(patches)
    assert world.gated() == []
    assert {e["outcome"] for e in entries} == {"buffer", "released"}
    (gone,) = [e for e in entries if e["outcome"] == "buffer"]
    assert (gone["action"], gone["reason"]) == ("unbuffer", serve_buffers.DELETED)
    assert [e["outcome"] for e in gone["effects"]] == ["deleted", "deleted"]
    assert not [k for k in world.kinds() if k in (buffers.KIND, buffers.TEMPLATE_KIND)]


async def test_a_buffer_whose_gang_went_is_deleted_and_reported_on_its_job(now: datetime) -> None:
    world = world_on([*nodes(zone_a=1, zone_b=1), *held_job("big", 4, now)], now)
    await world.pass_()
    for pod in world.pods():
        world.api.objects.pop(("", "Pod", pod["metadata"]["namespace"], pod["metadata"]["name"]))
    entries = await world.pass_()
    (gone,) = entries
    assert (gone["action"], gone["reason"], gone["result"]) == (
        "unbuffer",
        "buffer-deleted",
        "deleted",
    )
    assert "no held gang" in gone["detail"]
    (event,) = events.build(gone, instance="podium-0", now=now)
    assert event["regarding"]["kind"] == "PyTorchJob" and event["regarding"]["name"] == "big"
    assert not [k for k in world.kinds() if k in (buffers.KIND, buffers.TEMPLATE_KIND)]
    assert world.meter.capacity_buffers._value.get() == 0


async def test_without_the_crd_the_refusal_is_audited_once_and_nothing_is_left(
    now: datetime,
) -> None:
    world = world_on([*nodes(zone_a=1, zone_b=1), *held_job("big", 4, now)], now)
    world.api.missing_kinds.add(buffers.KIND)
    (entry,) = [e for e in await world.pass_() if e["outcome"] == "buffer"]
    assert [e["outcome"] for e in entry["effects"]] == ["created", "skipped-crd-missing", "deleted"]
    assert entry["result"] == "skipped-crd-missing"
    assert buffers.TEMPLATE_KIND not in world.kinds()
    world.now = now + timedelta(seconds=5)
    assert [e for e in await world.pass_() if e["outcome"] == "buffer"] == []
    assert world.gated() == [p["metadata"]["name"] for p in world.pods()]
