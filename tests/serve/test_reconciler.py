"""The reconciler (webhook/serve/reconciler.py) carrying its plan (webhook/core/reconcile.py,
tests/core/test_reconcile.py) out against the in-memory API twin: guarded writes through
podium's writer, two-pass deletion, audit entries, leadership, metrics."""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.core.test_reconcile import (
    NOW,
    TUNING,
    World,
    ago,
    before_zone_labels,
    job_wide,
    make_world,
    spoof,
)
from tests.scenarios import NS, base_cluster
from webhook.core import adapters, audit, labels, reconcile
from webhook.core.view import ClusterView
from webhook.kube import errors, twins
from webhook.serve import reconciler
from webhook.serve.audit import MemorySink
from webhook.serve.metrics import Metrics


@pytest.fixture
def world() -> World:
    return make_world()


@dataclasses.dataclass
class Live:
    world: World
    api: twins.InMemoryObjects
    sink: MemorySink
    rec: reconciler.Reconciler
    clock: list[datetime]
    view: dict[str, ClusterView]
    leading: list[bool]


@pytest.fixture
def live(world: World) -> Live:
    api = twins.InMemoryObjects()
    api.put(world.job)
    api.put(world.record)
    api.put(world.policy)
    sink = MemorySink()
    clock = [NOW]
    view = {"now": world.view()}
    leading = [True]
    rec = reconciler.Reconciler(
        view=lambda: view["now"],
        ready=lambda: True,
        api=api,
        settings=world.settings,
        sink=sink,
        tuning=TUNING,
        is_leader=lambda: leading[0],
        clock=lambda: clock[0],
    )
    return Live(world, api, sink, rec, clock, view, leading)


def stored(live: Live, kind: str) -> dict[str, Any] | None:
    name = live.world.record["metadata"]["name"]
    group = "cilium.io" if kind == "CiliumNetworkPolicy" else ""
    return live.api.objects.get((group, kind, NS, name))


async def test_executor_recreates_a_deleted_policy_and_audits_it(live: Live) -> None:
    del live.api.objects[
        ("cilium.io", "CiliumNetworkPolicy", NS, live.world.policy["metadata"]["name"])
    ]
    records = await live.rec.run_once()
    assert [(r["outcome"], r["action"], r["reason"], r["result"]) for r in records] == [
        ("reconcile", "create", "missing-policy", "created")
    ]
    assert live.sink.entries == records
    assert records[0]["audit"] == audit.MARKER
    assert records[0]["job"]["kind"] == "PyTorchJob"
    assert stored(live, "CiliumNetworkPolicy") is not None
    assert await live.rec.run_once() == []  # converged


async def test_executor_rebuilds_a_gang_whose_record_and_policy_were_both_deleted(
    live: Live,
) -> None:
    name = live.world.record["metadata"]["name"]
    del live.api.objects[("cilium.io", "CiliumNetworkPolicy", NS, name)]
    del live.api.objects[("", "ConfigMap", NS, name)]
    records = await live.rec.run_once()
    assert [(r["action"], r["reason"], r["result"]) for r in records] == [
        ("create", "missing-record", "created"),
        ("create", "missing-policy", "created"),
    ]
    assert {r["job"]["name"] for r in records} == {live.world.job["metadata"]["name"]}
    assert stored(live, "ConfigMap") is not None
    assert stored(live, "CiliumNetworkPolicy") is not None
    assert await live.rec.run_once() == []  # converged


async def test_executor_patches_an_edited_policy_back(live: Live) -> None:
    key = ("cilium.io", "CiliumNetworkPolicy", NS, live.world.policy["metadata"]["name"])
    live.api.objects[key]["spec"]["endpointSelector"] = {"matchLabels": {}}
    live.api.objects[key]["spec"]["ingressDeny"] = [{"fromEntities": ["world"]}]
    (record,) = await live.rec.run_once()
    assert (record["action"], record["result"]) == ("repair", "repaired")
    assert live.api.objects[key]["spec"] == live.world.policy["spec"]


async def test_executor_marks_then_deletes_after_the_grace(live: Live) -> None:
    live.view["now"] = live.world.view(pods=False)
    first = await live.rec.run_once()
    assert {(r["action"], r["result"]) for r in first} == {("mark", "marked")}
    record = stored(live, "ConfigMap")
    assert record is not None
    assert record["metadata"]["annotations"][reconcile.ORPHAN_SINCE] == NOW.isoformat(
        timespec="seconds"
    )
    live.clock[0] = NOW + timedelta(seconds=60)
    assert await live.rec.run_once() == []
    live.clock[0] = NOW + timedelta(seconds=121)
    last = await live.rec.run_once()
    assert {(r["action"], r["reason"], r["result"]) for r in last} == {
        ("delete", "no-pods", "deleted")
    }
    assert stored(live, "ConfigMap") is None
    assert stored(live, "CiliumNetworkPolicy") is None


async def test_a_gang_whose_pods_arrive_after_the_mark_is_kept(live: Live) -> None:
    live.view["now"] = live.world.view(pods=False)
    await live.rec.run_once()
    live.view["now"] = live.world.view()
    live.clock[0] = NOW + timedelta(seconds=300)
    assert {(r["action"], r["result"]) for r in await live.rec.run_once()} == {
        ("unmark", "unmarked")
    }
    record = stored(live, "ConfigMap")
    assert record is not None and reconcile.ORPHAN_SINCE not in record["metadata"]["annotations"]
    assert await live.rec.run_once() == []


async def test_a_write_based_on_a_stale_read_is_a_conflict_not_an_overwrite(live: Live) -> None:
    live.view["now"] = live.world.view(pods=False)
    owned = await live.rec.list_owned()
    actions = reconcile.plan(
        live.view["now"], live.world.settings, owned=owned, now=NOW, tuning=TUNING
    )
    name = live.world.record["metadata"]["name"]
    await live.api.merge_patch("v1", "ConfigMap", NS, name, {"data": {"zone": "zone-a"}})
    results = [await live.rec.execute(a, now=NOW) for a in actions]
    assert [r["result"] for r in results] == ["conflict", "marked"]


async def test_the_cache_saying_job_gone_is_checked_against_the_apiserver(live: Live) -> None:
    live.view["now"] = live.world.view(job=False)
    live.clock[0] = NOW
    for obj in list(live.api.objects.values()):
        if obj["kind"] != "PyTorchJob":
            obj["metadata"].setdefault("annotations", {})[reconcile.ORPHAN_SINCE] = ago(600)
    records = await live.rec.run_once()
    assert {r["result"] for r in records} == {"kept: the job exists"}
    assert stored(live, "ConfigMap") is not None


async def test_only_the_leader_and_only_when_synced(live: Live) -> None:
    del live.api.objects[
        ("cilium.io", "CiliumNetworkPolicy", NS, live.world.policy["metadata"]["name"])
    ]
    live.leading[0] = False
    assert await live.rec.run_once() == []
    assert live.api.calls == []
    live.leading[0] = True
    live.rec.ready = lambda: False
    assert await live.rec.run_once() == []


async def test_a_missing_policy_crd_is_reported_not_raised(world: World) -> None:
    api = twins.InMemoryObjects(missing_kinds=frozenset({"CiliumNetworkPolicy"}))
    api.put(world.record)
    rec = reconciler.Reconciler(
        view=world.view,
        ready=lambda: True,
        api=api,
        settings=world.settings,
        sink=MemorySink(),
        clock=lambda: NOW,
    )
    (record,) = await rec.run_once()
    assert (record["action"], record["result"]) == ("create", "resource-missing")


async def test_an_api_failure_is_audited(live: Live) -> None:
    del live.api.objects[
        ("cilium.io", "CiliumNetworkPolicy", NS, live.world.policy["metadata"]["name"])
    ]
    live.api.fail = lambda op, _k: (
        errors.ApiError("403: forbidden", status=403) if op == "create" else None
    )
    (record,) = await live.rec.run_once()
    assert record["result"] == "failed: 403: forbidden"
    assert record["error"] == "403: forbidden"


async def test_a_failed_write_and_every_pass_are_counted(live: Live) -> None:
    live.rec.meter = meter = Metrics()
    del live.api.objects[
        ("cilium.io", "CiliumNetworkPolicy", NS, live.world.policy["metadata"]["name"])
    ]
    live.api.fail = lambda op, _k: (
        errors.ApiError("403: forbidden", status=403) if op == "create" else None
    )
    await live.rec.run_once()
    assert meter.write_failures.labels(source="reconciler")._value.get() == 1
    assert meter.reconcile_passes._value.get() == 1
    assert meter.reconcile_last_pass._value.get() == NOW.timestamp()
    live.leading[0] = False  # a replica that does not lead completes no pass
    live.clock[0] = NOW + timedelta(minutes=1)
    await live.rec.run_once()
    assert meter.reconcile_passes._value.get() == 1
    assert meter.reconcile_last_pass._value.get() == NOW.timestamp()


@pytest.mark.parametrize(
    ("nodes", "phases", "split"),
    [
        (("c-1", "c-2"), ("Running", "Running"), False),
        (("a-1", "b-1"), ("Running", "Running"), True),
        (("a-1", "b-1"), ("Running", "Succeeded"), False),  # what has finished holds nothing
        (("a-1", None), ("Running", "Pending"), False),  # not bound yet
    ],
    ids=["one-zone", "two-zones", "one-finished", "one-pending"],
)
async def test_split_gangs_are_those_running_in_more_than_one_zone(
    live: Live, nodes: tuple[str | None, ...], phases: tuple[str, ...], split: bool
) -> None:
    for pod, node, phase in zip(live.world.pods, nodes, phases, strict=True):
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": phase}
    view = live.world.view()
    gang = (NS, live.world.gang.key)
    assert reconcile.split_gangs(view) == ([gang] if split else [])
    live.view["now"] = view
    live.rec.meter = meter = Metrics()
    await live.rec.run_once()
    assert meter.gangs_split._value.get() == (1 if split else 0)


async def test_executor_removes_a_copied_label_audits_it_and_reports_it(live: Live) -> None:
    pod = spoof(live.world)
    live.api.put(pod)
    live.view["now"] = ClusterView.from_objects(
        base_cluster(live.world.job, *live.world.pods, pod), zone_label="x", kept=adapters.KEPT
    )
    seen: list[audit.AuditEntry] = []
    live.rec.observe = seen.append
    (record,) = await live.rec.run_once()
    assert (record["action"], record["reason"], record["result"]) == (
        "unlabel",
        "label-disowned",
        "unlabelled",
    )
    assert (record["pod"], record["namespace"]) == ("spy", NS)
    assert record["job"]["uid"] == live.world.job["metadata"]["uid"]
    assert seen == [record] and live.sink.entries == [record]
    stored_pod = live.api.objects[("", "Pod", NS, "spy")]
    assert labels.JOB not in stored_pod["metadata"]["labels"]


async def test_executor_labels_a_bound_pod_with_its_nodes_zone(live: Live) -> None:
    old = before_zone_labels(live.world, "c-1", "c-2")
    for pod in old.pods:
        live.api.put(pod)
    live.api.put(job_wide(live.world))
    live.view["now"] = old.view()
    records = await live.rec.run_once()
    assert [(r["action"], r["reason"], r["result"], r["pod"]) for r in records] == [
        ("label", "zone-known", "labelled", p["metadata"]["name"]) for p in old.pods
    ]
    for pod in old.pods:
        stored_pod = live.api.objects[("", "Pod", NS, pod["metadata"]["name"])]
        assert stored_pod["metadata"]["labels"][labels.ZONE] == "zone-c"


async def test_with_writable_namespaces_it_lists_its_objects_there_only(live: Live) -> None:
    """rbac.scope namespaced: podium may read its records and policies only in the namespaces
    it writes in, so the reconciler lists each of those and never across all namespaces (the
    apiserver would refuse that list with a 403)."""
    elsewhere = copy.deepcopy(live.world.record)
    elsewhere["metadata"]["namespace"] = "elsewhere"
    live.api.put(elsewhere)

    lists: list[tuple[str, str]] = []

    def cluster_wide_refused(op: str, key: tuple[str, str, str, str]) -> errors.ApiError | None:
        if op != "list":
            return None
        lists.append((key[1], key[2]))
        return None if key[2] else errors.ApiError("403: configmaps is forbidden", status=403)

    live.api.fail = cluster_wide_refused
    live.rec.settings = dataclasses.replace(
        live.world.settings, writable_namespaces=frozenset({NS, "other"})
    )
    owned = await live.rec.list_owned()
    assert [r["metadata"]["namespace"] for r in owned.decisions] == [NS]
    assert [p["metadata"]["namespace"] for p in owned.policies] == [NS]
    assert sorted(lists) == sorted(
        (kind, ns) for kind in ("ConfigMap", "CiliumNetworkPolicy") for ns in (NS, "other")
    )
    # Without the setting: one list across all namespaces per kind, which sees both records.
    live.api.fail = twins.no_fault
    live.rec.settings = live.world.settings
    owned = await live.rec.list_owned()
    assert sorted(r["metadata"]["namespace"] for r in owned.decisions) == ["elsewhere", NS]
