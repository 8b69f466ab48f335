"""Leader election (webhook/kube/leader.py) against the in-memory Lease twin, on fake clocks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from webhook.kube import errors, leader, twins
from webhook.kube.protocols import Objects


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=self.t)


@pytest.fixture
def api() -> twins.InMemoryObjects:
    return twins.InMemoryObjects()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def elector(api: Objects, clock: Clock, identity: str) -> leader.LeaderElector:
    return leader.LeaderElector(
        api,
        namespace="podium-system",
        identity=identity,
        monotonic=clock.monotonic,
        wall=clock.wall,
    )


async def lease(api: twins.InMemoryObjects) -> dict[str, object]:
    got = await api.get(leader.API_VERSION, leader.KIND, "podium-system", leader.LEASE_NAME)
    return dict(got["spec"])


async def test_the_first_replica_creates_the_lease_and_leads(
    api: twins.InMemoryObjects, clock: Clock
) -> None:
    a = elector(api, clock, "a")
    assert await a.try_acquire_or_renew()
    assert a.is_leader
    spec = await lease(api)
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["renewTime"] == "2026-01-01T00:16:40.000000Z"


async def test_a_second_replica_waits_while_the_leader_renews(
    api: twins.InMemoryObjects, clock: Clock
) -> None:
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_acquire_or_renew()
    for _ in range(10):
        clock.t += 5
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
    assert (await lease(api))["holderIdentity"] == "a"


async def test_a_silent_leader_is_replaced_after_the_lease_duration(
    api: twins.InMemoryObjects, clock: Clock
) -> None:
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # b sees the lease at t
    clock.t += 14.9
    assert not await b.try_acquire_or_renew()
    # The old leader stopped counting itself leader before anyone may take over.
    assert not a.is_leader
    clock.t += 0.2
    assert await b.try_acquire_or_renew()
    spec = await lease(api)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    # a comes back: the lease has moved on, a does not lead.
    assert not await a.try_acquire_or_renew()


async def test_release_hands_over_at_once(api: twins.InMemoryObjects, clock: Clock) -> None:
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert not a.is_leader
    assert (await lease(api))["holderIdentity"] == ""
    assert await b.try_acquire_or_renew()


async def test_of_two_takeovers_at_once_exactly_one_wins(
    api: twins.InMemoryObjects, clock: Clock
) -> None:
    """Both read the expired lease, both write with its resourceVersion: one gets a Conflict."""
    old = elector(api, clock, "old")
    await old.try_acquire_or_renew()
    contenders = [elector(api, clock, f"r{i}") for i in range(5)]
    for c in contenders:
        await c.try_acquire_or_renew()
    clock.t += 16
    won = await asyncio.gather(*(c.try_acquire_or_renew() for c in contenders))
    assert won.count(True) == 1
    assert (await lease(api))["holderIdentity"] == contenders[won.index(True)].identity


async def test_an_api_failure_is_a_lost_round_and_the_leader_steps_down_in_time(
    api: twins.InMemoryObjects, clock: Clock
) -> None:
    a = elector(api, clock, "a")
    await a.try_acquire_or_renew()
    api.fail = lambda _op, _key: errors.ApiError("503: unavailable", status=503)
    clock.t += 5
    assert await a.try_acquire_or_renew()  # the last renewal is 5 s old: still leads
    clock.t += 5
    assert not await a.try_acquire_or_renew()  # 10 s: past the renew deadline


async def test_a_missing_namespace_is_logged_not_raised(clock: Clock) -> None:
    api = twins.InMemoryObjects()
    api.fail = lambda op, _key: (
        errors.NotFound("namespaces podium-system not found", status=404)
        if op == "create"
        else None
    )
    assert not await elector(api, clock, "a").try_acquire_or_renew()


async def test_run_renews_until_stopped_then_releases(api: twins.InMemoryObjects) -> None:
    a = leader.LeaderElector(
        api,
        namespace="podium-system",
        identity="a",
        timing=leader.Timing(duration=3, renew_every=0.01, renew_deadline=2),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(a.run(stop))
    for _ in range(200):
        await asyncio.sleep(0.01)
        if a.is_leader:
            break
    assert a.is_leader
    stop.set()
    await task
    assert (await lease(api))["holderIdentity"] == ""


def test_timing_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="renew_every"):
        leader.Timing(duration=10, renew_every=5, renew_deadline=12)


def test_identity_prefers_the_pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "podium-7d9f")
    assert leader.default_identity() == "podium-7d9f"
    monkeypatch.delenv("POD_NAME")
    assert leader.default_identity().endswith(f"-{__import__('os').getpid()}")
