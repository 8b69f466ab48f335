"""The in-memory twins (webhook/kube/twins.py) answer as the apiserver does, where tests rely on it.

What the apiserver does, from k8s.io/apiserver pkg/registry/generic/registry/store.go (create
fails with AlreadyExists; an update or delete whose resourceVersion or uid precondition does not
match fails with Conflict; a missing object is NotFound) and k8s.io/apiserver
pkg/storage/cacher (a watch from a compacted resourceVersion gets a 410 Expired Status; with a
label selector, an object that stops matching is sent as DELETED, one that starts as ADDED)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.kube import errors, twins
from webhook.kube.protocols import Resource, WatchEvent

NS = "team-a"
MANAGED = "app.kubernetes.io/managed-by=podium"
RECORDS = Resource("v1", "ConfigMap", "configmaps", label_selector=MANAGED)
PODS = Resource("v1", "Pod", "pods")


def configmap(name: str = "rec", **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"zone": "a"}}


def managed(name: str = "rec") -> dict[str, Any]:
    return configmap(name, **{"app.kubernetes.io/managed-by": "podium"})


def drain(stream: Any, count: int) -> list[tuple[str, str]]:
    """The first ``count`` events of a watch: (type, name or resourceVersion)."""
    out: list[tuple[str, str]] = []
    for event in stream:
        meta = event.object.get("metadata") or {}
        out.append((event.type, meta.get("name") or str(event.object.get("code"))))
        if len(out) == count:
            break
    stream.close()
    return out


# -- create, get ---------------------------------------------------------------------------------


async def test_create_sets_what_the_server_sets_and_refuses_a_taken_name() -> None:
    api = twins.InMemoryObjects()
    created = await api.create({**managed(), "metadata": {**managed()["metadata"], "uid": "x"}})
    meta = created["metadata"]
    assert meta["uid"] != "x" and meta["creationTimestamp"] and meta["resourceVersion"] == "1"
    assert await api.get("v1", "ConfigMap", NS, "rec") == created
    with pytest.raises(errors.AlreadyExists) as caught:
        await api.create(managed())
    assert caught.value.status == 409
    assert [op for op, _, _ in api.calls] == ["create", "get", "create"]


async def test_a_missing_object_or_kind_is_not_found() -> None:
    api = twins.InMemoryObjects(missing_kinds={"CiliumNetworkPolicy"})
    with pytest.raises(errors.NotFound) as caught:
        await api.get("v1", "ConfigMap", NS, "nope")
    assert caught.value.status == 404
    policy = {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy", "metadata": {}}
    with pytest.raises(errors.NotFound):
        await api.create({**policy, "metadata": {"name": "p", "namespace": NS}})
    with pytest.raises(errors.NotFound):
        await api.list("cilium.io/v2", "CiliumNetworkPolicy")


async def test_what_comes_out_is_a_copy() -> None:
    api = twins.InMemoryApi()
    got = await api.create(managed())
    got["data"]["zone"] = "b"
    assert (await api.get("v1", "ConfigMap", NS, "rec"))["data"] == {"zone": "a"}


async def test_a_fault_is_raised_instead_of_the_answer() -> None:
    api = twins.InMemoryApi(delay=0.001)
    boom = errors.ApiError("500: etcdserver: request timed out", status=500)
    api.fail = lambda op, key: boom if (op, key[1]) == ("create", "ConfigMap") else None
    with pytest.raises(errors.ApiError) as caught:
        await api.create(managed())
    assert caught.value is boom and api.objects == {}


# -- guarded writes ------------------------------------------------------------------------------


async def test_a_replace_from_a_stale_read_is_a_conflict() -> None:
    api = twins.InMemoryObjects()
    first = await api.create(managed())
    second = await api.replace({**first, "data": {"zone": "b"}})
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    with pytest.raises(errors.Conflict) as caught:
        await api.replace({**first, "data": {"zone": "c"}})
    assert caught.value.status == 409
    assert (await api.get("v1", "ConfigMap", NS, "rec"))["data"] == {"zone": "b"}


async def test_a_merge_patch_merges_and_is_guarded_by_its_resource_version() -> None:
    api = twins.InMemoryObjects()
    first = await api.create({**managed(), "data": {"zone": "a", "gone": "x"}})
    rv = first["metadata"]["resourceVersion"]
    patch = {"metadata": {"resourceVersion": rv}, "data": {"gone": None, "new": "y"}}
    patched = await api.merge_patch("v1", "ConfigMap", NS, "rec", patch)
    assert patched["data"] == {"zone": "a", "new": "y"}
    with pytest.raises(errors.Conflict):
        await api.merge_patch("v1", "ConfigMap", NS, "rec", patch)
    unguarded = await api.merge_patch("v1", "ConfigMap", NS, "rec", {"data": {"zone": "b"}})
    assert unguarded["data"] == {"zone": "b", "new": "y"}


async def test_a_delete_checks_its_preconditions() -> None:
    api = twins.InMemoryObjects()
    first = await api.create(managed())
    meta = first["metadata"]
    await api.replace(first)
    with pytest.raises(errors.Conflict):  # the resourceVersion moved on
        await api.delete("v1", "ConfigMap", NS, "rec", resource_version=meta["resourceVersion"])
    with pytest.raises(errors.Conflict):  # another object of the same name
        await api.delete("v1", "ConfigMap", NS, "rec", uid="someone-else")
    await api.delete("v1", "ConfigMap", NS, "rec", uid=meta["uid"])
    with pytest.raises(errors.NotFound):
        await api.delete("v1", "ConfigMap", NS, "rec")


@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["read", "write"])), max_size=30))
def test_of_writers_racing_from_the_same_read_exactly_the_first_wins(
    steps: list[tuple[int, str]],
) -> None:
    """A model: a write succeeds iff nothing was written since the writer last read."""

    async def run() -> None:
        api = twins.InMemoryObjects()
        await api.create(managed())
        seen: dict[int, dict[str, Any]] = {}
        writes_since: dict[int, bool] = {}
        for writer, op in steps:
            if op == "read" or writer not in seen:
                seen[writer] = await api.get("v1", "ConfigMap", NS, "rec")
                writes_since[writer] = False
                continue
            try:
                await api.replace(seen[writer])
            except errors.Conflict:
                assert writes_since[writer]
            else:
                assert not writes_since[writer]
                writes_since = dict.fromkeys(writes_since, True)

    asyncio.run(run())


async def test_list_filters_by_namespace_and_selector() -> None:
    api = twins.InMemoryObjects()
    api.put(managed("a"))
    api.put(configmap("b"))
    api.put({**managed("c"), "metadata": {**managed("c")["metadata"], "namespace": "other"}})
    names = [o["metadata"]["name"] for o in await api.list("v1", "ConfigMap", namespace=NS)]
    assert names == ["a", "b"]
    selected = await api.list("v1", "ConfigMap", label_selector=MANAGED)
    # in namespace, then name order, as the apiserver's storage keys sort
    assert [o["metadata"]["name"] for o in selected] == ["c", "a"]
    with pytest.raises(ValueError, match="k=v"):
        await api.list("v1", "ConfigMap", label_selector="tier!=web")


# -- list and watch ------------------------------------------------------------------------------


async def test_writes_through_objects_come_out_of_a_shared_listers_watch() -> None:
    store = twins.Store()
    api, lister = twins.InMemoryObjects(store=store), twins.InMemoryLister(store=store)
    page = lister.list(RECORDS, limit=10, continue_=None)
    stream = lister.watch(RECORDS, resource_version=page.resource_version, timeout_seconds=5)
    created = await api.create(managed())
    await api.replace({**created, "data": {"zone": "b"}})
    await api.delete("v1", "ConfigMap", NS, "rec")
    assert drain(stream, 3) == [("ADDED", "rec"), ("MODIFIED", "rec"), ("DELETED", "rec")]


def test_a_selector_watch_sees_objects_enter_and_leave_it() -> None:
    lister = twins.InMemoryLister()
    stream = lister.watch(RECORDS, resource_version="0", timeout_seconds=5)
    lister.put(configmap("a"))  # not selected: nothing
    lister.put(managed("a"))  # starts matching
    lister.put(managed("a"))
    lister.put(configmap("a"))  # stops matching
    assert drain(stream, 3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert lister.list(RECORDS, limit=10, continue_=None).items == []


def test_a_watch_replays_what_came_after_its_resource_version() -> None:
    lister = twins.InMemoryLister([managed("a")])
    since = lister.list(RECORDS, limit=10, continue_=None).resource_version
    lister.put(managed("b"))
    lister.delete(managed("a"))
    stream = lister.watch(RECORDS, resource_version=since, timeout_seconds=5)
    assert drain(stream, 2) == [("ADDED", "b"), ("DELETED", "a")]


def test_a_watch_from_a_compacted_resource_version_gets_410() -> None:
    lister = twins.InMemoryLister([managed("a")])
    old = lister.list(RECORDS, limit=10, continue_=None).resource_version
    lister.put(managed("b"))
    open_stream = lister.watch(RECORDS, resource_version=old, timeout_seconds=5)
    lister.expire(RECORDS)
    assert drain(open_stream, 2) == [("ADDED", "b"), ("ERROR", "410")]
    (event,) = list(lister.watch(RECORDS, resource_version=old, timeout_seconds=0.2))
    assert event.type == "ERROR" and event.object["reason"] == "Expired"
    assert type(errors.error_for(event.object["code"], "")) is errors.Gone


def test_list_pages_and_types_like_the_apiserver() -> None:
    lister = twins.InMemoryLister([managed(f"r{i}") for i in range(5)])
    first = lister.list(RECORDS, limit=2, continue_=None)
    assert [o["metadata"]["name"] for o in first.items] == ["r0", "r1"]
    assert "kind" not in first.items[0]  # list items of built-in types come without kind
    tokens = [first.continue_]
    while tokens[-1]:
        tokens.append(lister.list(RECORDS, limit=2, continue_=tokens[-1]).continue_)
    assert tokens == ["2", "4", None]


def test_missing_kinds_and_faults_reach_the_lister() -> None:
    lister = twins.InMemoryLister()
    lister.missing_kinds.add("Pod")
    with pytest.raises(errors.NotFound):
        lister.list(PODS, limit=1, continue_=None)
    with pytest.raises(errors.NotFound):
        lister.watch(PODS, resource_version="0", timeout_seconds=1)
    lister.missing_kinds.clear()
    lister.fail = lambda op, _key: errors.Gone("too old") if op == "watch" else None
    with pytest.raises(errors.Gone):
        lister.watch(PODS, resource_version="0", timeout_seconds=1)
    assert [c[0] for c in lister.calls] == ["list", "watch", "watch"]


def test_events_sent_by_hand_and_the_end_of_watches() -> None:
    lister = twins.InMemoryLister()
    stream = lister.watch(PODS, resource_version="0", timeout_seconds=5)
    assert lister.open_watches(PODS) == 1
    rv = lister.bookmark(PODS)
    lister.send(PODS, WatchEvent("ERROR", {"kind": "Status", "code": 500}))
    lister.end_watches(PODS)
    assert [(e.type, e.object.get("metadata", {}).get("resourceVersion")) for e in stream] == [
        ("BOOKMARK", rv),
        ("ERROR", None),
    ]
    stream.close()
    assert lister.open_watches(PODS) == 0
