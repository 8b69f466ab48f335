"""The watch cache (webhook/kube/cache.py) against the in-memory twin of list and watch
(webhook/kube/twins.py), and once over the real client against a fake apiserver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.builders import PodBuilder, job, namespace, node
from tests.kube.apiserver import FakeApiServer, FakeHandler, api_client
from webhook.core import adapters, policies
from webhook.core.objects import ObjectKey
from webhook.core.view import ClusterView
from webhook.kube import cache, client, errors, twins
from webhook.kube.cache import WatchCache
from webhook.kube.protocols import Resource, WatchEvent
from webhook.kube.twins import InMemoryLister

ZONE_LABEL = "topology.kubernetes.io/zone"
NODES, PODS = cache.WATCHED[1], cache.WATCHED[2]
PYTORCH = next(r for r in cache.WATCHED if r.kind == "PyTorchJob")
RECORDS = next(r for r in cache.WATCHED if r.kind == "ConfigMap")
FAST = {"backoff_initial": 0.01, "backoff_cap": 0.05, "missing_retry": 0.05}


def failing(op: str, resource: Resource, *errs: errors.ApiError) -> twins.Fault:
    """A fault that raises ``errs`` from the next ``op`` calls on ``resource``, one each."""
    pending = list(errs)

    def fail(got: str, key: ObjectKey) -> errors.ApiError | None:
        if (got, key[:2]) == (op, (resource.group, resource.kind)) and pending:
            return pending.pop(0)
        return None

    return fail


def pod(name: str, node_name: str = "n1", **extra: Any) -> dict[str, Any]:
    obj = PodBuilder("team-a", name=name).gpus(1).bound(node_name).obj()
    obj["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    obj["status"].update(
        {
            "conditions": [{"type": "Ready", "status": "True"}],
            "podIP": "10.0.0.1",
            "containerStatuses": [{"name": "main", "ready": True}],
        }
    )
    obj.update(extra)
    return obj


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(lister: InMemoryLister, **options: Any) -> AsyncIterator[WatchCache]:
    snapshot = ClusterView(zone_label=ZONE_LABEL, kept=adapters.KEPT)
    watch_cache = WatchCache(snapshot, lister, **{**FAST, **options})
    watch_cache.start()
    try:
        yield watch_cache
    finally:
        await asyncio.to_thread(watch_cache.stop)


async def synced(watch_cache: WatchCache) -> WatchCache:
    await asyncio.wait_for(watch_cache.ready.wait(), 5)
    return watch_cache


def pod_names(watch_cache: WatchCache) -> set[str]:
    return {p["metadata"]["name"] for p in watch_cache.view.pods_in("team-a")}


# -- initial sync --------------------------------------------------------------------------------


async def test_initial_sync_fills_the_snapshot_with_typed_slim_objects() -> None:
    pytorchjob = job("kubeflow.org/v1", "PyTorchJob", "train")
    lister = InMemoryLister([namespace("team-a"), node("n1", "zone-a"), pod("p1"), pytorchjob])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        snap = watch_cache.view
        assert snap.namespace("team-a") is not None
        assert snap.get("kubeflow.org/v1", "PyTorchJob", "team-a", "train") is not None
        stored = snap.get("v1", "Pod", "team-a", "p1")
        assert stored is not None
        # list items of built-in types come without kind: the cache types them
        assert (stored["apiVersion"], stored["kind"]) == ("v1", "Pod")
        assert "managedFields" not in stored["metadata"]
        assert stored["status"] == {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        n1 = snap.node("n1")
        assert n1 is not None and n1.usable and n1.zone == "zone-a"
        assert snap.free_on(n1)["nvidia.com/gpu"] == 7
        assert watch_cache.pending() == [] and watch_cache.absent() == []


async def test_a_paged_list_brings_every_item() -> None:
    lister = InMemoryLister([pod(f"p{i}") for i in range(7)])
    async with running(lister, page_size=3) as watch_cache:
        await synced(watch_cache)
        assert pod_names(watch_cache) == {f"p{i}" for i in range(7)}
    pages = [c for c in lister.calls if c[:2] == ("list", "pods")]
    assert [c[2] for c in pages] == [None, "3", "6"]


async def test_the_snapshot_is_only_mutated_on_the_loop_thread() -> None:
    lister = InMemoryLister([pod("p1"), node("n1", "zone-a")])
    threads: set[int] = set()
    async with running(lister) as watch_cache:
        original = watch_cache.view.apply

        def spy(event: Any, obj: Any) -> None:
            threads.add(threading.get_ident())
            original(event, obj)

        watch_cache.view.apply = spy  # type: ignore[method-assign]
        await synced(watch_cache)
        lister.put(pod("p2"))
        await eventually(lambda: "p2" in pod_names(watch_cache))
    assert threads == {threading.get_ident()}


# -- watch events --------------------------------------------------------------------------------


async def test_listeners_see_each_watch_event_once_the_snapshot_holds_it() -> None:
    lister = InMemoryLister([pod("p1")])
    seen: list[tuple[str, str, bool]] = []
    async with running(lister) as watch_cache:

        def listener(event: str, obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            held = watch_cache.view.get("v1", "Pod", "team-a", name) is not None
            seen.append((event, name, held))

        watch_cache.listeners.append(listener)
        await synced(watch_cache)
        lister.put(pod("p2"))
        await eventually(lambda: ("ADDED", "p2", True) in seen)
        lister.delete(pod("p2"))
        await eventually(lambda: ("DELETED", "p2", False) in seen)
    assert [s for s in seen if s[1] == "p2"] == [("ADDED", "p2", True), ("DELETED", "p2", False)]


async def test_a_listener_that_raises_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lister = InMemoryLister([])
    seen: list[str] = []

    def broken(event: str, obj: dict[str, Any]) -> None:
        raise RuntimeError("a broken listener")

    async with running(lister) as watch_cache:
        watch_cache.listeners += [broken, lambda event, obj: seen.append(obj["metadata"]["name"])]
        await synced(watch_cache)
        lister.put(pod("p1"))
        await eventually(lambda: seen == ["p1"])
        assert "p1" in pod_names(watch_cache)
    assert any("listener of the pods watch failed" in r.getMessage() for r in caplog.records)


async def test_watch_events_add_modify_and_delete() -> None:
    lister = InMemoryLister([node("n1", "zone-a"), pod("p1")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        snap = watch_cache.view
        n1 = snap.node("n1")
        assert n1 is not None

        lister.put(pod("p2"))
        await eventually(lambda: pod_names(watch_cache) == {"p1", "p2"})
        assert snap.free_on(n1)["nvidia.com/gpu"] == 6

        finished = pod("p2")
        finished["status"]["phase"] = "Succeeded"
        lister.put(finished)
        await eventually(lambda: snap.free_on(n1)["nvidia.com/gpu"] == 7)

        lister.delete(pod("p1"))
        await eventually(lambda: pod_names(watch_cache) == {"p2"})
        assert snap.free_on(n1)["nvidia.com/gpu"] == 8


async def test_a_bookmark_moves_the_resume_point() -> None:
    lister = InMemoryLister([pod("p1")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        await eventually(lambda: lister.open_watches(PODS) == 1)
        rv = lister.bookmark(PODS)
        lister.end_watches(PODS)  # as the server's timeoutSeconds would
        await eventually(lambda: ("watch", "pods", rv) in lister.calls)
    assert sum(1 for c in lister.calls if c[:2] == ("list", "pods")) == 1


async def test_a_new_watch_resumes_after_the_last_event_without_relisting() -> None:
    lister = InMemoryLister([pod("p1")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        lister.put(pod("p2"))
        await eventually(lambda: "p2" in pod_names(watch_cache))
        lister.end_watches(PODS)
        lister.put(pod("p3"))  # while no watch is open: replayed from history
        await eventually(lambda: "p3" in pod_names(watch_cache))
    assert sum(1 for c in lister.calls if c[:2] == ("list", "pods")) == 1


async def test_a_watch_error_other_than_gone_rewatches_from_the_same_version() -> None:
    lister = InMemoryLister([pod("p1")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        await eventually(lambda: lister.open_watches(PODS) == 1)
        first = [c for c in lister.calls if c[:2] == ("watch", "pods")]
        lister.send(
            PODS, WatchEvent("ERROR", {"kind": "Status", "code": 500, "message": "internal error"})
        )
        await eventually(lambda: sum(1 for c in lister.calls if c[:2] == ("watch", "pods")) >= 2)
    watches = [c for c in lister.calls if c[:2] == ("watch", "pods")]
    assert watches[1][2] == first[0][2]
    assert sum(1 for c in lister.calls if c[:2] == ("list", "pods")) == 1


# -- 410 Gone: re-list and replace ------------------------------------------------------------


async def test_gone_as_a_watch_error_event_relists_and_drops_what_vanished() -> None:
    lister = InMemoryLister([node("n1", "zone-a"), pod("p1"), pod("p2")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        n1 = watch_cache.view.node("n1")
        assert n1 is not None
        await eventually(lambda: lister.open_watches(PODS) == 1)
        # changes the cache never hears of, then the history is compacted
        lister.delete(pod("p1"), silently=True)
        lister.put(pod("p3", node_name="n1"), silently=True)
        lister.expire(PODS)
        await eventually(lambda: pod_names(watch_cache) == {"p2", "p3"})
        assert watch_cache.view.free_on(n1)["nvidia.com/gpu"] == 6
        assert watch_cache.is_ready()
    assert sum(1 for c in lister.calls if c[:2] == ("list", "pods")) == 2


async def test_gone_as_an_http_status_relists() -> None:
    lister = InMemoryLister([pod("p1")])
    lister.fail = failing("watch", PODS, errors.Gone("410: too old resource version"))
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        await eventually(lambda: sum(1 for c in lister.calls if c[:2] == ("list", "pods")) == 2)
        lister.put(pod("p2"))
        await eventually(lambda: pod_names(watch_cache) == {"p1", "p2"})


async def test_a_relist_of_one_resource_leaves_the_others_alone() -> None:
    lister = InMemoryLister([node("n1", "zone-a"), pod("p1")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        await eventually(lambda: lister.open_watches(PODS) == 1)
        lister.delete(pod("p1"), silently=True)
        lister.expire(PODS)
        await eventually(lambda: pod_names(watch_cache) == set())
        assert watch_cache.view.node("n1") is not None


# -- missing CRDs and readiness ---------------------------------------------------------------


async def test_a_missing_crd_does_not_block_readiness_and_is_picked_up_later() -> None:
    lister = InMemoryLister([pod("p1")])
    lister.missing_kinds.add(PYTORCH.kind)
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        assert watch_cache.absent() == [PYTORCH.name] == ["pytorchjobs.kubeflow.org/v1"]
        lister.put(job("kubeflow.org/v1", "PyTorchJob", "train"))
        lister.missing_kinds.clear()  # the CRD gets installed
        await eventually(lambda: watch_cache.absent() == [])
        assert watch_cache.view.get("kubeflow.org/v1", "PyTorchJob", "team-a", "train")


async def test_a_crd_that_goes_away_takes_its_objects_with_it() -> None:
    lister = InMemoryLister([job("kubeflow.org/v1", "PyTorchJob", "train")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        snap = watch_cache.view
        assert snap.get("kubeflow.org/v1", "PyTorchJob", "team-a", "train") is not None
        lister.missing_kinds.add(PYTORCH.kind)  # the CRD is deleted: the next watch gets 404
        lister.end_watches(PYTORCH)
        await eventually(lambda: watch_cache.absent() == [PYTORCH.name])
        assert snap.get("kubeflow.org/v1", "PyTorchJob", "team-a", "train") is None
        assert watch_cache.is_ready()


async def test_readiness_waits_for_a_resource_that_cannot_be_listed_yet() -> None:
    lister = InMemoryLister([pod("p1")])
    forbidden = errors.ApiError("403: pods is forbidden", status=403)
    lister.fail = lambda op, key: forbidden if (op, key[1]) == ("list", "Pod") else None
    async with running(lister) as watch_cache:
        await eventually(lambda: watch_cache.pending() == ["pods: 403: pods is forbidden"])
        assert not watch_cache.is_ready()
        lister.fail = twins.no_fault  # RBAC fixed
        await synced(watch_cache)
        assert watch_cache.pending() == []
        assert pod_names(watch_cache) == {"p1"}


def crd(name: str, *, default_deny: bool = True) -> dict[str, Any]:
    """A CustomResourceDefinition with a (large) v2 schema, with or without enableDefaultDeny."""
    fields = {f"f{i}": {"type": "string", "description": "x" * 200} for i in range(200)}
    if default_deny:
        fields["enableDefaultDeny"] = {"type": "object"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {
            "group": "cilium.io",
            "versions": [
                {
                    "name": "v2",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"properties": {"spec": {"properties": fields}}}},
                }
            ],
        },
    }


async def test_the_cilium_crd_is_watched_by_name_and_kept_slim() -> None:
    name = "ciliumnetworkpolicies.cilium.io"
    lister = InMemoryLister([crd(name), crd("ciliumendpoints.cilium.io")])
    async with running(lister, resources=[cache.CILIUM_CRD]) as watch_cache:
        await synced(watch_cache)
        snap = watch_cache.view
        kept = snap.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name)
        assert kept is not None and len(str(kept)) < 1000
        assert policies.knows_default_deny(kept)
        assert (
            snap.get(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                "ciliumendpoints.cilium.io",
            )
            is None
        )
        lister.put(crd(name, default_deny=False))  # Cilium downgraded
        await eventually(
            lambda: (
                not policies.knows_default_deny(
                    snap.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name) or {}
                )
            )
        )


async def test_a_cilium_crd_podium_may_not_read_does_not_hold_readiness_back() -> None:
    lister = InMemoryLister([pod("p1")])
    forbidden = errors.ApiError("403: forbidden", status=403)
    lister.fail = lambda op, key: forbidden if key[1] == "CustomResourceDefinition" else None
    async with running(lister, resources=[PODS, cache.CILIUM_CRD]) as watch_cache:
        await synced(watch_cache)
        assert watch_cache.pending() == []


async def test_an_empty_resource_list_is_ready() -> None:
    async with running(InMemoryLister([]), resources=[NODES]) as watch_cache:
        await synced(watch_cache)


# -- stopping ------------------------------------------------------------------------------------


async def test_stop_ends_every_worker_promptly_even_while_watching() -> None:
    lister = InMemoryLister([pod("p1")])
    lister.missing_kinds.add(PYTORCH.kind)  # one worker asleep between retries
    snapshot = ClusterView(zone_label=ZONE_LABEL, kept=adapters.KEPT)
    watch_cache = WatchCache(snapshot, lister, missing_retry=60.0, watch_timeout=600)
    watch_cache.start()
    await synced(watch_cache)
    await eventually(lambda: lister.open_watches(PODS) == 1)
    started = time.monotonic()
    await asyncio.to_thread(watch_cache.stop)
    assert time.monotonic() - started < 1.0
    assert not any(t.is_alive() for t in watch_cache._threads)
    assert lister.open_watches(PODS) == 0


def test_workers_end_quietly_when_the_loop_is_gone() -> None:
    lister = InMemoryLister([pod("p1")])
    watch_cache = WatchCache(
        ClusterView(zone_label=ZONE_LABEL, kept=adapters.KEPT), lister, resources=[PODS], **FAST
    )

    async def start() -> None:
        watch_cache.start()
        await asyncio.wait_for(watch_cache.ready.wait(), 5)

    asyncio.run(start())  # the loop is closed when this returns
    lister.put(pod("p2"))  # the worker cannot hand this over any more, and ends
    watch_cache._threads[0].join(5)
    assert not watch_cache._threads[0].is_alive()
    watch_cache.stop()


# -- what is kept ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "status", "kept"),
    [
        (
            PODS,
            {"phase": "Running", "podIP": "1.2.3.4", "conditions": []},
            {"phase": "Running", "conditions": []},
        ),
        (
            NODES,
            {
                "allocatable": {"cpu": "1"},
                "images": [{"names": ["x"]}],
                "conditions": [],
                "nodeInfo": {},
            },
            {"allocatable": {"cpu": "1"}, "conditions": []},
        ),
        (
            PYTORCH,
            {"conditions": [{"type": "Running"}], "replicaStatuses": {}},
            {"conditions": [{"type": "Running"}], "replicaStatuses": {}},
        ),
    ],
)
def test_slim_drops_bookkeeping(
    resource: Resource, status: dict[str, Any], kept: dict[str, Any]
) -> None:
    obj = {
        "metadata": {
            "name": "x",
            "managedFields": [{}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "a": "b"},
        },
        "status": status,
    }
    assert cache.slim(resource, obj) == {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": "x", "annotations": {"a": "b"}},
        "status": kept,
    }


def test_every_watched_resource_has_a_distinct_name_and_path() -> None:
    names = [r.name for r in cache.WATCHED]
    assert len(set(names)) == len(names)
    paths = [client.path_of_resource(r) for r in cache.WATCHED]
    assert len(set(paths)) == len(paths)
    assert RECORDS.label_selector == "app.kubernetes.io/managed-by=podium"


def record(namespace: str, name: str = "r") -> dict[str, Any]:
    """A decision record of podium's (a ConfigMap with its managed-by label)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "podium"},
        },
    }


def test_writable_namespaces_watch_podiums_own_objects_per_namespace() -> None:
    """rbac.scope namespaced: records, policies and buffers are listed and watched in each writable
    namespace, at that namespace's path (which a RoleBinding there authorizes); the rest as
    before. No setting: WATCHED itself."""
    assert cache.watched() is cache.WATCHED
    scoped = cache.watched(frozenset({"ml", "cv"}))
    own = [r for r in scoped if (r.group, r.kind) in cache.OWN]
    assert [(r.kind, r.namespace) for r in own] == [
        (kind, ns)
        for kind in ("ConfigMap", "CiliumNetworkPolicy", "NetworkPolicy", "CapacityBuffer")
        for ns in ("cv", "ml")
    ]
    assert [r for r in scoped if r.namespace is None] == [
        r for r in cache.WATCHED if (r.group, r.kind) not in cache.OWN
    ]
    paths = {client.path_of_resource(r) for r in own}
    assert "/api/v1/namespaces/ml/configmaps" in paths
    assert "/apis/cilium.io/v2/namespaces/cv/ciliumnetworkpolicies" in paths
    names = [r.name for r in scoped]
    assert len(set(names)) == len(names) and "configmaps in ml" in names


async def test_a_namespaced_watch_sees_its_namespace_only() -> None:
    in_ml = next(r for r in cache.watched({"ml"}) if r.kind == "ConfigMap")
    lister = InMemoryLister([record("ml", "a"), record("cv", "b")])
    async with running(lister, resources=[in_ml]) as watch_cache:
        await synced(watch_cache)

        def records() -> set[tuple[str, str]]:
            return {
                (str(o["metadata"]["namespace"]), str(o["metadata"]["name"]))
                for o in watch_cache.view.objects()
                if o.get("kind") == "ConfigMap"
            }

        assert records() == {("ml", "a")}
        await eventually(lambda: lister.open_watches(in_ml) == 1)
        lister.put(record("cv", "c"))
        lister.put(record("ml", "d"))
        await eventually(lambda: ("ml", "d") in records())
        assert records() == {("ml", "a"), ("ml", "d")}
    assert ("list", "configmaps in ml", None) in lister.calls


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    backoff = cache.Backoff(initial=1.0, cap=4.0)
    delays = [backoff.next() for _ in range(5)]
    for got, want in zip(delays, [1, 2, 4, 4, 4], strict=True):
        assert want * 0.8 <= got <= want * 1.2
    backoff.reset()
    assert backoff.next() <= 1.2


# -- the cache over the real client, against a fake apiserver ----------------------------------


async def test_the_cache_over_the_real_transport(apiserver: FakeApiServer) -> None:
    hang = threading.Event()
    pods = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "5"},
        "items": [{"metadata": {"name": "p1", "namespace": "team-a"}, "spec": {}}],
    }
    added = {
        "type": "ADDED",
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p2", "namespace": "team-a", "resourceVersion": "6"},
            "spec": {},
        },
    }

    def route(h: FakeHandler, _p: str, query: dict[str, list[str]], _b: bytes) -> None:
        if query.get("watch"):
            h.stream([added], hang=hang)
        else:
            h.reply(200, pods)

    apiserver.routes[("GET", "/api/v1/pods")] = route
    lister = client.KubeLister(api_client(apiserver.url), timeout=5)
    watch_cache = WatchCache(
        ClusterView(zone_label=ZONE_LABEL, kept=adapters.KEPT),
        lister,
        resources=[PODS, PYTORCH],
        **FAST,
    )
    watch_cache.start()
    try:
        await synced(watch_cache)
        assert watch_cache.absent() == [PYTORCH.name]
        await eventually(lambda: pod_names(watch_cache) == {"p1", "p2"})
    finally:
        started = time.monotonic()
        await asyncio.to_thread(watch_cache.stop)
        hang.set()
    assert time.monotonic() - started < 2
