"""The releaser (webhook/serve/releaser.py) on the in-memory API twin: the record and policy are
written before any pod is ungated; a failure half-way is completed by the next pass; a job or
pods deleted while held leave nothing behind; waits are audited once per why; metrics, Events."""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.core.test_release import cluster, held_job, hogs
from tests.scenarios import NS
from webhook.core import adapters, labels, reconcile, release
from webhook.core.objects import ObjectKey
from webhook.core.settings import Settings, ZoneChooser
from webhook.core.view import ClusterView
from webhook.kube import errors, twins
from webhook.serve import events, releaser
from webhook.serve.audit import MemorySink
from webhook.serve.metrics import Metrics

HOLD = Settings(zone_chooser=ZoneChooser.HOLD, own_user="podium")


class World:
    def __init__(self, objects: list[dict[str, Any]], now: datetime) -> None:
        self.api = twins.InMemoryObjects()
        for obj in objects:
            self.api.put(obj)
        self.sink = MemorySink()
        self.meter = Metrics()
        self.now = now
        self.releaser = releaser.Releaser(
            view=self.view,
            ready=lambda: True,
            api=self.api,
            settings=HOLD,
            sink=self.sink,
            clock=lambda: self.now,
            meter=self.meter,
        )

    def view(self) -> ClusterView:
        return ClusterView.from_objects(
            list(self.api.objects.values()), zone_label=HOLD.zone_label, kept=adapters.KEPT
        )

    async def pass_(self) -> list[Any]:
        return await self.releaser.run_once()

    def pods(self, prefix: str = "") -> list[dict[str, Any]]:
        return [
            o
            for (_, kind, _, name), o in sorted(self.api.objects.items())
            if kind == "Pod" and name.startswith(prefix)
        ]

    def gated(self, prefix: str = "") -> list[str]:
        return [
            p["metadata"]["name"] for p in self.pods(prefix) if p["spec"].get("schedulingGates")
        ]

    def kinds(self) -> list[str]:
        return sorted(k for (_, k, _, _) in self.api.objects if k not in ("Pod", "Node"))


def fail_on_patch(count: int) -> twins.Fault:
    """Fail the ``count``-th pod patch (1-based) and every later one."""
    seen = [0]

    def fault(op: str, key: ObjectKey) -> errors.ApiError | None:
        if op == "patch" and key[1] == "Pod":
            seen[0] += 1
            if seen[0] >= count:
                return errors.ApiError("the apiserver is unavailable")
        return None

    return fault


async def test_the_record_and_policy_exist_before_any_pod_is_ungated(now: datetime) -> None:
    world = World([*cluster(), *held_job("llama", 3, now)], now)
    (entry,) = await world.pass_()
    creates = [i for i, c in enumerate(world.api.calls) if c[0] == "create"]
    patches = [i for i, c in enumerate(world.api.calls) if c[:2] == ("patch", "Pod")]
    assert [world.api.calls[i][1] for i in creates] == ["ConfigMap", "CiliumNetworkPolicy"]
    assert len(patches) == 3 and max(creates) < min(patches)
    assert world.gated() == []
    zones = {p["metadata"]["labels"][labels.ZONE] for p in world.pods()}
    assert zones == {"zone-c"} and entry["zone"] == "zone-c"
    assert (entry["outcome"], entry["reason"], entry["result"]) == (
        "released",
        "best-fit",
        "released",
    )
    assert len(entry["pods"]) == 3
    assert [e["outcome"] for e in entry["effects"]] == ["created", "created"]
    # Events: the release, the zone and the policy.
    reasons = [e["reason"] for e in events.build(entry, instance="podium-0", now=now)]
    assert reasons == [events.GANG_RELEASED, events.ZONE_PINNED, events.POLICY_CREATED]
    assert world.meter.releases.labels(reason="best-fit")._value.get() == 1
    # A second pass has nothing to do.
    calls = len(world.api.calls)
    assert await world.pass_() == [] and len(world.api.calls) == calls + 0


async def test_a_failure_half_way_is_completed_by_the_next_pass(now: datetime) -> None:
    world = World([*cluster(), *held_job("llama", 4, now)], now)
    world.api.fail = fail_on_patch(2)
    (entry,) = await world.pass_()
    assert entry["result"].startswith("failed: ") and len(entry["pods"]) == 1
    assert len(world.gated()) == 3
    zone = {p["metadata"]["labels"].get(labels.ZONE) for p in world.pods()} - {None}
    assert zone == {"zone-c"}
    # Meanwhile zone-c filled up: the committed gang is completed all the same, into zone-c.
    for hog in hogs("c", range(8)):
        world.api.put(hog)
    world.api.fail = twins.no_fault
    (done,) = await world.pass_()
    assert (done["reason"], done["zone"], len(done["pods"])) == ("completed", "zone-c", 3)
    assert world.gated() == []
    assert {p["metadata"]["labels"][labels.ZONE] for p in world.pods("llama")} == {"zone-c"}


async def test_a_failed_record_write_ungates_nothing(now: datetime) -> None:
    world = World([*cluster(), *held_job("llama", 2, now)], now)
    world.api.fail = lambda op, key: (
        errors.ApiError("down") if (op, key[1]) == ("create", "ConfigMap") else None
    )
    (entry,) = await world.pass_()
    assert entry["result"] == "failed: down" and entry["pods"] == []
    assert len(world.gated()) == 2 and world.kinds() == ["Namespace", "PyTorchJob"]
    assert world.meter.write_failures.labels(source="releaser")._value.get() == 1
    assert world.meter.releases.labels(reason="best-fit")._value.get() == 0


async def test_a_job_deleted_while_held_is_never_released(now: datetime) -> None:
    objects = [*cluster(), *held_job("llama", 2, now)]
    world = World(objects, now)
    world.api.store.objects.pop(("kubeflow.org", "PyTorchJob", NS, "llama"))
    assert await world.pass_() == []
    assert world.kinds() == ["Namespace"] and len(world.gated()) == 2


async def test_pods_deleted_while_held(now: datetime) -> None:
    world = World([*cluster(), *held_job("llama", 3, now)], now)
    # One pod gone before the pass: the gang is not ready; nothing is written.
    first = world.pods()[0]
    key = ("", "Pod", first["metadata"]["namespace"], first["metadata"]["name"])
    gone = world.api.store.objects.pop(key)
    (wait,) = await world.pass_()
    assert (wait["outcome"], wait["detail"]) == ("held", "waiting for its pods: 2 of 3 exist")
    assert world.kinds() == ["Namespace", "PyTorchJob"]
    # Back (its controller recreated it), then deleted between the plan and the patch: the
    # others are released, the missing one skipped without an error.
    world.api.put(gone)
    view = world.view()
    world.api.store.objects.pop(key)
    world.releaser.view = lambda: view
    (entry,) = await world.pass_()
    assert entry["result"] == "released" and len(entry["pods"]) == 2
    assert world.gated() == []


async def test_a_pod_recreated_with_the_same_name_is_not_patched(now: datetime) -> None:
    world = World([*cluster(), *held_job("llama", 1, now)], now)
    view = world.view()
    (pod,) = world.pods()
    world.api.store.objects[("", "Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])] = {
        **pod,
        "metadata": {**pod["metadata"], "uid": "another"},
    }
    world.releaser.view = lambda: view
    (entry,) = await world.pass_()
    assert entry["pods"] == [] and world.gated() == [pod["metadata"]["name"]]


async def test_waits_are_audited_once_per_why_and_counted(now: datetime) -> None:
    world = World(
        [*cluster(c=0), *held_job("older", 2, now), *held_job("newer", 2, now + timedelta(1))],
        now,
    )
    first = await world.pass_()
    assert [(e["outcome"], e["job"]["name"]) for e in first] == [
        ("released", "older"),
        ("held", "newer"),
    ]
    assert "1st in line" in first[1]["detail"]
    (held_event,) = events.build(first[1], instance="podium-0", now=now)
    assert held_event["reason"] == events.GANG_HELD and "1st in line" in held_event["note"]
    assert world.meter.gangs_held._value.get() == 1
    assert await world.pass_() == []  # the same why: not audited again


async def test_held_pods_say_why_their_gang_waits_once_it_holds_and_only_when_it_changes(
    now: datetime,
) -> None:
    """The why is written on a gang's pods once two periodic passes in a row say the same, not
    at the first pass that sees it: a gang still arriving, or a line that moves, is not patched
    pass after pass (issue 28: those writes competed with a burst's admissions)."""
    world = World(
        [*cluster(c=0), *held_job("older", 2, now), *held_job("newer", 2, now + timedelta(1))],
        now,
    )
    await world.pass_()  # older released, newer's why new
    patched = [c for c in world.api.calls if c[:2] == ("patch", "Pod")]
    assert not [name for _, _, name in patched if name.startswith("newer")]
    assert not any(labels.HELD_WHY in p["metadata"]["annotations"] for p in world.pods("newer"))
    await world.pass_()  # the same why again: now it is said
    patched = [c for c in world.api.calls if c[:2] == ("patch", "Pod")]
    assert sorted(name for _, _, name in patched if name.startswith("newer")) == [
        "newer-master-0",
        "newer-worker-0",
    ]
    whys = {p["metadata"]["annotations"].get(labels.HELD_WHY) for p in world.pods("newer")}
    (why,) = whys
    assert why is not None and "zone-a, has 8 nvidia.com/gpu free; 1st in line" in why
    # Nothing changed: no write at all, the view showing the annotation or not.
    calls = len(world.api.calls)
    await world.pass_()
    assert len(world.api.calls) == calls
    # The why changes (room went): the pods keep the old why for a pass, then one patch each.
    for hog in hogs("a", range(1)):
        world.api.put(hog)
    calls = len(world.api.calls)
    await world.pass_()
    assert not [c for c in world.api.calls[calls:] if c[:2] == ("patch", "Pod")]
    await world.pass_()
    assert len([c for c in world.api.calls[calls:] if c[:2] == ("patch", "Pod")]) == 2
    whys = {p["metadata"]["annotations"].get(labels.HELD_WHY) for p in world.pods("newer")}
    assert len(whys) == 1 and whys != {why}
    world.api.store.objects.pop(("", "Pod", "other", "hog-a-0"))
    for pod in world.pods("older"):
        world.api.store.objects.pop(("", "Pod", NS, pod["metadata"]["name"]))
    (released,) = await world.pass_()
    assert released["job"]["name"] == "newer" and world.gated("newer") == []
    assert all(labels.HELD_WHY not in p["metadata"]["annotations"] for p in world.pods("newer"))


async def test_a_gang_arriving_pod_by_pod_is_said_once_whole_or_once_held_long(
    now: datetime,
) -> None:
    """A gang whose why changes at every pass (its pods still coming) says nothing until the why
    holds; one held ``SAY_ANYWAY_SECONDS`` or more says every new why at once."""
    job = held_job("slow", 4, now)
    full = [*hogs("a", range(1)), *hogs("b", range(2)), *hogs("c", range(8))]
    world = World([*cluster(), *full, *job[:2]], now)  # the job and its first pod
    for pod in job[2:]:
        await world.pass_()
        assert not [c for c in world.api.calls if c[:2] == ("patch", "Pod")]
        world.api.put(pod)
    await world.pass_()  # whole now: "needs … in one zone", said once it holds
    assert not [c for c in world.api.calls if c[:2] == ("patch", "Pod")]
    # (Every node is taken; empty, zone-c would hold it: no too-big.)
    assert await world.pass_() == []  # the why is unchanged: not audited again ...
    whys = {p["metadata"]["annotations"].get(labels.HELD_WHY) for p in world.pods("slow")}
    assert len(whys) == 1 and None not in whys  # ... and now written on every pod
    # Held long: a new why (zone-b's room grew, too little still) is written at the pass that
    # sees it.
    world.now = now + timedelta(seconds=releaser.SAY_ANYWAY_SECONDS)
    calls = len(world.api.calls)
    world.api.store.objects.pop(("", "Pod", "other", "hog-b-0"))
    await world.pass_()
    patched = [c for c in world.api.calls[calls:] if c[:2] == ("patch", "Pod")]
    assert len(patched) == 4
    assert {p["metadata"]["annotations"].get(labels.HELD_WHY) for p in world.pods("slow")} != whys


async def test_nothing_happens_unless_leading(now: datetime) -> None:
    world = World([*cluster(), *held_job("llama", 1, now)], now)
    world.releaser.is_leader = lambda: False
    assert await world.pass_() == [] and world.api.calls == []


def test_the_reconciler_leaves_a_held_gang_to_the_releaser(now: datetime) -> None:
    objects = [*cluster(), *held_job("llama", 2, now)]
    view = ClusterView.from_objects(objects, zone_label=HOLD.zone_label, kept=adapters.KEPT)
    owned = reconcile.Owned(decisions=[], policies=[])
    actions = reconcile.plan(view, HOLD, owned=owned, now=now, tuning=reconcile.Tuning())
    assert actions == []


async def test_an_admins_release_is_audited_as_theirs(now: datetime) -> None:
    objects = [*cluster(), *hogs("c", range(5)), *held_job("llama", 4, now)]
    objects[len(objects) - 5]["metadata"]["annotations"] = {
        labels.RELEASE: "zone",
        labels.RELEASED_BY: "alice",
    }
    world = World(objects, now)
    (entry,) = await world.pass_()
    assert (entry["outcome"], entry["reason"], entry["user"], entry["zone"]) == (
        "released",
        "admin",
        "alice",
        "zone-c",
    )
    assert world.gated() == []


async def test_a_gang_decided_again_gets_its_record_and_policy_for_the_new_zone(
    now: datetime,
) -> None:
    world = World([*cluster(), *held_job("llama", 2, now)], now)
    # The leader wrote the record and policy for zone-b, then died before any pod was ungated.
    world.api.fail = lambda op, key: (
        errors.ApiError("down") if op == "get" and key[1] == "Pod" else None
    )
    (first,) = await world.pass_()
    assert first["zone"] == "zone-b" and first["pods"] == [] and len(world.gated()) == 2
    # zone-b fills up meanwhile: the gang is decided again, into zone-c, record and policy both.
    for hog in hogs("b", range(2)):
        world.api.put(hog)
    world.api.fail = twins.no_fault
    (again,) = await world.pass_()
    assert again["zone"] == "zone-c" and len(again["pods"]) == 2
    assert [e["outcome"] for e in again["effects"]] == ["replaced", "replaced"]
    (policy,) = [o for (_, k, _, _), o in world.api.objects.items() if k == "CiliumNetworkPolicy"]
    assert policy["spec"]["endpointSelector"]["matchLabels"][labels.ZONE] == "zone-c"
    (record,) = [
        o
        for (_, k, _, _), o in world.api.objects.items()
        if k == "ConfigMap" and o["metadata"].get("labels", {}).get(labels.COMPONENT) == "decision"
    ]
    assert record["data"]["zone"] == "zone-c"


async def test_a_view_that_lags_behind_a_release_never_moves_the_gang(now: datetime) -> None:
    world = World([*cluster(), *held_job("llama", 2, now)], now)
    before = copy.deepcopy(list(world.api.objects.values()))
    (first,) = await world.pass_()
    assert first["zone"] == "zone-b" and world.gated() == []
    # The watch has delivered the record but not yet the pods' release, and zone-b looks full:
    # planned from that view, the gang would be decided again, into zone-c.
    records = [o for o in world.api.objects.values() if o["kind"] == "ConfigMap"]
    lagging = [*before, *records, *hogs("b", range(2))]
    world.releaser.view = lambda: ClusterView.from_objects(
        lagging, zone_label=HOLD.zone_label, kept=adapters.KEPT
    )
    # The replica that released the pods plans nothing until its view shows them released.
    assert await world.pass_() == []
    # Another replica, leading now, does not know what this one released: the apiserver does.
    successor = dataclasses.replace(world.releaser)
    (second,) = await successor.run_once()
    assert second["zone"] == "zone-c" and second["result"].startswith("failed: ")
    assert "is released already" in second["result"]
    (record,) = records
    assert world.api.objects[("", "ConfigMap", NS, record["metadata"]["name"])]["data"]["zone"] == (
        "zone-b"
    )
    (policy,) = [o for (_, k, _, _), o in world.api.objects.items() if k == "CiliumNetworkPolicy"]
    assert policy["spec"]["endpointSelector"]["matchLabels"][labels.ZONE] == "zone-b"
    assert {p["metadata"]["labels"][labels.ZONE] for p in world.pods("llama")} == {"zone-b"}


async def test_a_view_that_never_catches_up_stops_the_passes_only_for_a_while(
    now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watch that lags for good is a fault of its own: after ``CATCH_UP_SECONDS`` the
    releaser plans again, and what the apiserver says keeps each released pod where it is."""
    world = World([*cluster(), *held_job("llama", 2, now), *held_job("next", 1, now)], now)
    stale = world.view()
    assert sorted(e["zone"] for e in await world.pass_()) == ["zone-a", "zone-b"]
    zones = {p["metadata"]["name"]: p["metadata"]["labels"][labels.ZONE] for p in world.pods()}
    world.releaser.view = lambda: stale
    assert await world.pass_() == []
    monkeypatch.setattr(releaser, "CATCH_UP_SECONDS", -1.0)
    again = await world.pass_()
    assert len(again) == 2 and all(e["pods"] == [] for e in again)
    assert {p["metadata"]["name"]: p["metadata"]["labels"][labels.ZONE] for p in world.pods()} == (
        zones
    )


async def test_an_event_that_frees_room_wakes_the_releaser_only_while_a_gang_is_held(
    now: datetime,
) -> None:
    world = World([*cluster(), *held_job("j", 2, now)], now)
    deleted = {"kind": "Pod", "metadata": {"name": "x", "namespace": NS}, "spec": {}}
    world.releaser.notice("MODIFIED", {"kind": "Node"})
    assert not world.releaser.wake.is_set()
    world.releaser.notice("DELETED", deleted)
    assert world.releaser.wake.is_set()

    idle = World(cluster(), now)
    idle.releaser.notice("DELETED", deleted)
    assert not idle.releaser.wake.is_set()


async def test_a_woken_pass_releases_but_says_nothing_about_the_gangs_that_wait(
    now: datetime,
) -> None:
    """Why a gang waits is said by the periodic passes only: events would multiply those writes."""
    world = World(
        [*cluster(a=1, b=1, c=1), *held_job("fits", 1, now), *held_job("big", 4, now)], now
    )
    entries = await world.releaser.release_now()
    assert [e["outcome"] for e in entries] == ["released"]
    assert world.gated("big") and not world.gated("fits")
    assert not any(labels.HELD_WHY in p["metadata"].get("annotations", {}) for p in world.pods())
    assert [e["outcome"] for e in await world.pass_()] == ["held"]


async def test_a_woken_pass_waits_until_the_view_shows_the_pods_it_released(now: datetime) -> None:
    """Right after a release the watch may not have delivered the ungated pods yet: the view
    would count their room as free. A woken pass then releases nothing; once the view shows
    them, it goes on."""
    world = World([*cluster(a=1, b=1, c=1), *held_job("first", 1, now)], now)
    stale = world.view()
    assert [e["outcome"] for e in await world.releaser.release_now()] == ["released"]
    for obj in held_job("second", 1, now):
        world.api.put(obj)
    fresh = world.view()
    world.releaser.view = lambda: stale_with(stale, fresh)
    assert await world.releaser.release_now() == []
    world.releaser.view = world.view
    assert [e["outcome"] for e in await world.releaser.release_now()] == ["released"]


def stale_with(stale: ClusterView, fresh: ClusterView) -> ClusterView:
    """``fresh`` but with the pods ``stale`` still shows gated put back as they were there."""
    for pod in stale.pods_in(NS):
        if pod["spec"].get("schedulingGates"):
            fresh.apply("MODIFIED", pod)
    return fresh


class Overlapping(twins.InMemoryObjects):
    """The twin, each call taking ``delay``, noting how many pods are being ungated at once (from
    a pod's GET to the end of its PATCH) each time one starts."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay=delay)
        self.busy = 0
        self.at_start: list[int] = []

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        if kind == "Pod":
            self.busy += 1
            self.at_start.append(self.busy)
        try:
            return await super().get(api_version, kind, namespace, name)
        except errors.ApiError:
            self.busy -= kind == "Pod"
            raise

    async def json_patch(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().json_patch(*args, **kwargs)
        finally:
            self.busy -= 1


def overlapping(world: World, delay: float = 0.001) -> Overlapping:
    api = Overlapping(delay)
    api.store = world.api.store
    world.api = world.releaser.api = api
    return api


async def test_a_gang_is_ungated_one_pod_first_then_in_a_window_up_to_the_bound(
    now: datetime,
) -> None:
    """Slow start: the first pod alone, then each pod released lets one more start, never more
    than ``UNGATE_PARALLELISM`` at once; every pod released, listed in the plan's order."""
    world = World([*cluster(), *held_job("big", 40, now, gpus=1)], now)
    (planned,) = release.plan(world.view(), HOLD, now=now).releases
    api = overlapping(world)
    (entry,) = await world.pass_()
    assert entry["result"] == "released" and world.gated() == []
    assert entry["pods"] == [p.name for p in planned.pods] and len(planned.pods) == 40
    assert api.at_start[:3] == [1, 1, 2]  # the first pod alone, then two
    assert max(api.at_start) == releaser.UNGATE_PARALLELISM
    assert len(api.at_start) == 40 and api.busy == 0


async def test_a_failed_patch_stops_new_pods_but_lets_those_in_flight_finish(
    now: datetime,
) -> None:
    """One pod's PATCH fails mid-way: no pod starts after it, those in flight are released and
    remembered, the entry says it stopped, and the next pass completes the gang."""
    world = World([*cluster(), *held_job("big", 40, now, gpus=1)], now)
    api = overlapping(world)
    bad = "big-worker-9"
    api.fail = lambda op, key: (
        errors.ApiError("denied") if (op, key[1], key[3]) == ("patch", "Pod", bad) else None
    )
    (entry,) = await world.pass_()
    assert entry["result"] == "failed: denied" and bad not in entry["pods"]
    started = len(api.at_start)
    assert 10 < started < 40 and len(entry["pods"]) == started - 1
    assert sorted(world.gated()) == sorted(
        p["metadata"]["name"] for p in world.pods() if p["metadata"]["name"] not in entry["pods"]
    )
    remembered = {k.name for k in world.releaser.memory.ungated}
    assert remembered == set(entry["pods"])
    api.fail = twins.no_fault
    (done,) = await world.pass_()
    assert done["reason"] == "completed" and len(done["pods"]) == 40 - len(entry["pods"])
    assert world.gated() == []


async def test_the_memory_holds_the_pods_ungated_until_the_view_shows_them(now: datetime) -> None:
    world = World([*cluster(), *held_job("llama", 3, now)], now)
    stale = world.view()
    await world.pass_()
    assert sorted(k.name for k in world.releaser.memory.ungated) == sorted(
        p["metadata"]["name"] for p in world.pods("llama")
    )
    world.releaser.view = lambda: stale
    assert await world.pass_() == [] and len(world.releaser.memory.ungated) == 3
    world.releaser.view = world.view
    await world.pass_()
    assert world.releaser.memory.ungated == {}


class Saying(twins.InMemoryObjects):
    """The twin, each call taking ``delay``, noting how many merge patches are in flight."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay=delay)
        self.busy = 0
        self.most = 0

    async def merge_patch(self, *args: Any, **kwargs: Any) -> Any:
        self.busy += 1
        self.most = max(self.most, self.busy)
        try:
            return await super().merge_patch(*args, **kwargs)
        finally:
            self.busy -= 1


async def test_held_pods_are_annotated_a_bounded_few_at_once_and_a_failure_stops_none(
    now: datetime,
) -> None:
    world = World([*cluster(), *held_job("huge", 20, now)], now)
    api = Saying(0.001)
    api.store = world.api.store
    world.api = world.releaser.api = api
    api.fail = lambda op, key: (
        errors.ApiError("down") if (op, key[3]) == ("patch", "huge-worker-3") else None
    )
    (wait,) = await world.pass_()
    assert wait["outcome"] == "held"
    assert api.most == releaser.UNGATE_PARALLELISM
    said = {
        p["metadata"]["name"]
        for p in world.pods("huge")
        if p["metadata"]["annotations"].get(labels.HELD_WHY) == wait["detail"]
    }
    assert len(said) == 19 and "huge-worker-3" not in said
    # The failed one is tried again on the next pass, and only it.
    api.fail = twins.no_fault
    calls = len(api.calls)
    await world.pass_()
    assert [c for c in api.calls[calls:] if c[0] == "patch"] == [("patch", "Pod", "huge-worker-3")]
