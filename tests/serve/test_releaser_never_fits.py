"""The releaser on a gang no zone could ever hold (issue 29 item 6): said at once, everywhere a
person looks — the held annotation on every pod, a Warning Event on the job, the audit trail
(reason ``too-big``), ``podium_gangs_too_big`` — naming the ways out; never released."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.core.test_release import cluster, held_job
from tests.serve.test_releaser import World
from webhook.core import labels
from webhook.serve import events


async def test_a_gang_that_never_fits_is_said_at_once_everywhere(now: datetime) -> None:
    # 9 pods of 8 GPUs, 4 created so far; zone-c, the largest, holds 8 such pods.
    world = World([*cluster(), *held_job("huge", 9, now, present=4)], now)
    (entry,) = await world.pass_()
    assert (entry["outcome"], entry["reason"], entry["result"]) == ("held", "too-big", "not ready")
    why = entry["detail"]
    assert "more than any zone holds even empty" in why
    assert "podium release pytorchjob/huge -n team-a --unpinned" in why
    assert "too-big: spread" in why and "at most 8 pod(s) of 8 nvidia.com/gpu" in why
    (event,) = events.build(entry, instance="podium-0", now=now)
    assert (event["reason"], event["type"]) == (events.GANG_HELD, "Warning")
    assert event["note"] == f"the pods of PyTorchJob/huge are held: {why}"
    assert {p["metadata"]["annotations"].get(labels.HELD_WHY) for p in world.pods("huge")} == {why}
    assert world.meter.gangs_too_big._value.get() == 1
    assert world.meter.gangs_held._value.get() == 1
    # The rest of its pods come: still the same why, nothing said twice, nothing released.
    world.now = now + timedelta(seconds=5)
    for pod in held_job("huge", 9, now)[5:]:
        world.api.put(pod)
    assert await world.pass_() == []
    assert len(world.gated("huge")) == 9


async def test_a_gang_that_fits_later_is_not_counted(now: datetime) -> None:
    world = World([*cluster(c=0), *held_job("big", 4, now)], now)  # zone-c has no node at all
    await world.pass_()
    assert world.meter.gangs_too_big._value.get() == 1
    world.api.put(cluster()[-1])  # a first zone-c node: 8 GPUs, not enough for 32
    for i in range(1, 4):
        world.api.put(cluster()[-1 - i])
    await world.pass_()
    assert world.meter.gangs_too_big._value.get() == 0
    assert world.meter.gangs_held._value.get() == 0  # zone-c, four nodes: released
