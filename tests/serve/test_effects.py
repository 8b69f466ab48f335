"""An admission's side effects (webhook/serve/effects.py): the record before the policy, following
a record another replica created first, a missing policy CRD as a warning, and the time budget.
Through the whole admission (and concurrent replicas): tests/serve/test_admission.py."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from datetime import datetime

import pytest

from tests.builders import PIN
from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, engine, reviews
from webhook.core.engine import Decision
from webhook.core.settings import Settings, ZoneChooser
from webhook.core.view import ClusterView
from webhook.kube import errors, twins
from webhook.serve import effects


def first_pod_decision(now: datetime) -> Decision:
    pj = pytorchjob()
    request = reviews.from_document(reviews.review_for_pod(pytorch_pod(pj).obj(), uid="u-1"))
    view = ClusterView.from_objects(base_cluster(pj), zone_label=PIN.zone_label, kept=adapters.KEPT)
    decision = engine.decide(request, view, PIN, now=now)
    assert decision.record is not None and decision.policy is not None and decision.zone
    return decision


def outcomes(applied: effects.Applied) -> list[tuple[str, str]]:
    return [(r.kind, r.outcome) for r in applied.results]


async def test_the_record_is_created_before_the_policy(now: datetime) -> None:
    api = twins.InMemoryApi()
    applied = await effects.ensure(first_pod_decision(now), api)
    assert [c[:2] for c in api.calls] == [
        ("create", "ConfigMap"),
        ("create", "CiliumNetworkPolicy"),
    ]
    assert outcomes(applied) == [("ConfigMap", "created"), ("CiliumNetworkPolicy", "created")]
    assert applied.followed is None and applied.warnings == ()


async def test_a_record_with_the_same_zone_is_kept_and_the_policy_still_made(
    now: datetime,
) -> None:
    decision = first_pod_decision(now)
    api = twins.InMemoryApi()
    assert decision.record is not None
    await api.create(copy.deepcopy(decision.record))  # another replica, same decision
    applied = await effects.ensure(decision, api)
    assert outcomes(applied) == [("ConfigMap", "exists"), ("CiliumNetworkPolicy", "created")]
    assert applied.followed is None


async def test_a_record_with_another_zone_is_followed_and_nothing_else_is_created(
    now: datetime,
) -> None:
    decision = first_pod_decision(now)
    assert decision.record is not None and decision.gang is not None
    winner = copy.deepcopy(decision.record)
    other = next(z for z in ("zone-a", "zone-b", "zone-c") if z != decision.zone)
    winner["data"]["zone"] = other
    api = twins.InMemoryApi()
    await api.create(winner)
    applied = await effects.ensure(decision, api)
    assert outcomes(applied) == [("ConfigMap", "followed")]
    assert applied.followed is not None and applied.followed.zone == other
    assert ("create", "CiliumNetworkPolicy") not in [c[:2] for c in api.calls]


async def test_a_missing_policy_crd_is_a_warning_not_a_failure(now: datetime) -> None:
    api = twins.InMemoryApi(missing_kinds=frozenset({"CiliumNetworkPolicy"}))
    applied = await effects.ensure(first_pod_decision(now), api)
    assert outcomes(applied) == [
        ("ConfigMap", "created"),
        ("CiliumNetworkPolicy", "skipped-crd-missing"),
    ]
    assert len(applied.warnings) == 1 and "not installed" in applied.warnings[0]


@pytest.mark.parametrize(
    "fault",
    [errors.ApiError("500: etcd is down", status=500), errors.Conflict("409", status=409)],
)
async def test_any_other_api_error_reaches_the_caller(
    fault: errors.ApiError, now: datetime
) -> None:
    api = twins.InMemoryApi()
    api.fail = lambda op, _key: fault if op == "create" else None
    with pytest.raises(errors.ApiError) as raised:
        await effects.ensure(first_pod_decision(now), api)
    assert raised.value is fault


async def test_a_decision_without_a_gang_creates_nothing(now: datetime) -> None:
    decision = first_pod_decision(now)
    api = twins.InMemoryApi()
    bare = Decision(outcome="skipped", reason="no-gang", detail="", namespace=decision.namespace)
    assert (await effects.ensure(bare, api)).results == ()
    assert api.calls == []


async def test_the_budget_turns_a_hung_call_into_an_api_error() -> None:
    async def hang() -> None:
        await asyncio.sleep(10)

    with pytest.raises(errors.ApiError, match=r"did not answer within 0\.01s"):
        await effects.with_budget(0.01, hang)
    assert await effects.with_budget(1, lambda: asyncio.sleep(0, result=7)) == 7


# -- zone-chooser scheduler: the PodGroup --------------------------------------------------------


def grouped_decision(now: datetime) -> Decision:
    pj = pytorchjob()
    request = reviews.from_document(reviews.review_for_pod(pytorch_pod(pj).obj(), uid="u-1"))
    settings = Settings(zone_chooser=ZoneChooser.SCHEDULER)
    view = ClusterView.from_objects(
        base_cluster(pj), zone_label=settings.zone_label, kept=adapters.KEPT
    )
    decision = engine.decide(request, view, settings, now=now)
    assert decision.outcome == "grouped" and decision.podgroup is not None
    return decision


async def test_the_podgroup_is_created_after_the_record_and_before_the_policy(
    now: datetime,
) -> None:
    api = twins.InMemoryApi()
    applied = await effects.ensure(grouped_decision(now), api)
    assert outcomes(applied) == [
        ("ConfigMap", "created"),
        ("PodGroup", "created"),
        ("CiliumNetworkPolicy", "created"),
    ]


async def test_a_podgroup_created_first_by_another_admission_is_fine(now: datetime) -> None:
    decision = grouped_decision(now)
    api = twins.InMemoryApi()
    assert decision.record is not None and decision.podgroup is not None
    await api.create(copy.deepcopy(decision.record))
    await api.create(copy.deepcopy(decision.podgroup))
    applied = await effects.ensure(decision, api)
    assert outcomes(applied) == [
        ("ConfigMap", "exists"),
        ("PodGroup", "exists"),
        ("CiliumNetworkPolicy", "created"),
    ]
    assert applied.followed is None and applied.warnings == ()


async def test_a_podium_record_without_a_zone_is_followed_by_a_scheduler_decision(
    now: datetime,
) -> None:
    """Both say "no zone", but a gang podium left unpinned must not be handed to the scheduler
    half-way: the first decision's chooser wins too."""
    decision = grouped_decision(now)
    assert decision.record is not None
    winner = copy.deepcopy(decision.record)
    del winner["data"]["zoneChooser"]
    api = twins.InMemoryApi()
    await api.create(winner)
    applied = await effects.ensure(decision, api)
    assert outcomes(applied) == [("ConfigMap", "followed")]
    assert applied.followed is not None and applied.followed.chooser == "podium"
    assert ("create", "PodGroup") not in [c[:2] for c in api.calls]


async def test_podgroups_not_served_is_a_warning(now: datetime) -> None:
    api = twins.InMemoryApi(missing_kinds=frozenset({"PodGroup"}))
    applied = await effects.ensure(grouped_decision(now), api)
    assert ("PodGroup", "skipped-crd-missing") in outcomes(applied)
    assert any("does not serve" in w for w in applied.warnings)


# -- one replica's concurrent admissions of a new gang (Shared) ---------------------------------


def other_zone_decision(decision: Decision) -> Decision:
    """``decision`` as a concurrent admission that chose another zone would make it."""
    assert decision.record is not None and decision.zone is not None
    other = next(z for z in ("zone-a", "zone-b", "zone-c") if z != decision.zone)
    record = copy.deepcopy(decision.record)
    record["data"]["zone"] = other
    return dataclasses.replace(decision, record=record, zone=other)


async def test_concurrent_admissions_of_a_gang_create_each_object_once(now: datetime) -> None:
    api = twins.InMemoryApi(delay=0.01)
    shared = effects.Shared()
    decision = first_pod_decision(now)
    answers = await asyncio.gather(*(effects.ensure(decision, api, shared) for _ in range(8)))
    assert sorted(c[:2] for c in api.calls) == [
        ("create", "CiliumNetworkPolicy"),
        ("create", "ConfigMap"),
    ]
    assert outcomes(answers[0]) == [("ConfigMap", "created"), ("CiliumNetworkPolicy", "created")]
    for later in answers[1:]:  # what a 409 would have said, without asking
        assert outcomes(later) == [("ConfigMap", "exists"), ("CiliumNetworkPolicy", "exists")]
        assert later.followed is None


async def test_a_concurrent_decision_for_another_zone_follows_the_first_without_asking(
    now: datetime,
) -> None:
    api = twins.InMemoryApi(delay=0.01)
    shared = effects.Shared()
    first = first_pod_decision(now)
    created, followed = await asyncio.gather(
        effects.ensure(first, api, shared), effects.ensure(other_zone_decision(first), api, shared)
    )
    assert outcomes(created)[0] == ("ConfigMap", "created")
    assert outcomes(followed) == [("ConfigMap", "followed")]
    assert followed.followed is not None and followed.followed.zone == first.zone
    assert len(api.calls) == 2  # the first's record and policy


async def test_a_shared_create_is_forgotten_after_its_seconds(now: datetime) -> None:
    clock = [0.0]
    api = twins.InMemoryApi()
    shared = effects.Shared(seconds=2.0, clock=lambda: clock[0])
    decision = first_pod_decision(now)
    await effects.ensure(decision, api, shared)
    await api.delete("cilium.io/v2", "CiliumNetworkPolicy", *policy_place(decision))
    clock[0] = 1.5  # still shared: the delete is not seen
    assert outcomes(await effects.ensure(decision, api, shared))[1] == (
        "CiliumNetworkPolicy",
        "exists",
    )
    clock[0] = 3.5  # the watch has shown it by now, and its deletion
    again = await effects.ensure(decision, api, shared)
    assert outcomes(again) == [("ConfigMap", "exists"), ("CiliumNetworkPolicy", "created")]


async def test_after_a_failed_create_the_waiting_admission_writes_itself(now: datetime) -> None:
    api = twins.InMemoryApi(delay=0.01)
    failed = [False]

    def once(op: str, key: tuple[str, str, str, str]) -> errors.ApiError | None:
        if op == "create" and key[1] == "ConfigMap" and not failed[0]:
            failed[0] = True
            return errors.ApiError("500: etcd is down", status=500)
        return None

    api.fail = once
    shared = effects.Shared()
    decision = first_pod_decision(now)
    first, second = await asyncio.gather(
        effects.ensure(decision, api, shared),
        effects.ensure(decision, api, shared),
        return_exceptions=True,
    )
    assert isinstance(first, errors.ApiError)
    assert isinstance(second, effects.Applied)
    assert outcomes(second) == [("ConfigMap", "created"), ("CiliumNetworkPolicy", "created")]


async def test_a_kind_not_served_is_shared_too(now: datetime) -> None:
    api = twins.InMemoryApi(delay=0.01, missing_kinds=frozenset({"CiliumNetworkPolicy"}))
    shared = effects.Shared()
    decision = first_pod_decision(now)
    answers = await asyncio.gather(*(effects.ensure(decision, api, shared) for _ in range(3)))
    assert [c[:2] for c in api.calls].count(("create", "CiliumNetworkPolicy")) == 1
    for applied in answers:
        assert outcomes(applied)[1] == ("CiliumNetworkPolicy", "skipped-crd-missing")
        assert len(applied.warnings) == 1


def policy_place(decision: Decision) -> tuple[str, str]:
    assert decision.policy is not None
    meta = decision.policy["metadata"]
    return meta["namespace"], meta["name"]
