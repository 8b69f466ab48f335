"""The watch cache (webhook/kube/cache.py) against its in-memory twin, and its real transport
(webhook/kube/kubeapi.py) against a fake apiserver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from kubernetes import client as k8s

from tests.builders import PodBuilder, job, namespace, node
from webhook.core.view import ClusterView
from webhook.kube import cache, kubeapi
from webhook.kube.cache import InMemoryLister, Resource, WatchCache
from webhook.serve import effects

ZONE_LABEL = "topology.kubernetes.io/zone"
NODES, PODS = cache.WATCHED[1], cache.WATCHED[2]
PYTORCH = next(r for r in cache.WATCHED if r.kind == "PyTorchJob")
RECORDS = next(r for r in cache.WATCHED if r.kind == "ConfigMap")
FAST = {"backoff_initial": 0.01, "backoff_cap": 0.05, "missing_retry": 0.05}


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
    snapshot = ClusterView(zone_label=ZONE_LABEL)
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
    return {p["metadata"]["name"] for p in watch_cache.snapshot.pods_in("team-a")}


# -- initial sync --------------------------------------------------------------------------------


async def test_initial_sync_fills_the_snapshot_with_typed_slim_objects() -> None:
    pytorchjob = job("kubeflow.org/v1", "PyTorchJob", "train")
    lister = InMemoryLister([namespace("team-a"), node("n1", "zone-a"), pod("p1"), pytorchjob])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        snap = watch_cache.snapshot
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
        original = watch_cache.snapshot.apply

        def spy(event: Any, obj: Any) -> None:
            threads.add(threading.get_ident())
            original(event, obj)

        watch_cache.snapshot.apply = spy  # type: ignore[method-assign]
        await synced(watch_cache)
        lister.put(pod("p2"))
        await eventually(lambda: "p2" in pod_names(watch_cache))
    assert threads == {threading.get_ident()}


# -- watch events --------------------------------------------------------------------------------


async def test_watch_events_add_modify_and_delete() -> None:
    lister = InMemoryLister([node("n1", "zone-a"), pod("p1")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        snap = watch_cache.snapshot
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
        with lister._lock:  # an ERROR event with code 500 on the open watch
            for stream in lister._streams[PODS]:
                stream.put(
                    cache.WatchEvent(
                        "ERROR", {"kind": "Status", "code": 500, "message": "internal error"}
                    )
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
        n1 = watch_cache.snapshot.node("n1")
        assert n1 is not None
        await eventually(lambda: lister.open_watches(PODS) == 1)
        # changes the cache never hears of, then the history is compacted
        lister.delete(pod("p1"), silently=True)
        lister.put(pod("p3", node_name="n1"), silently=True)
        lister.expire(PODS)
        await eventually(lambda: pod_names(watch_cache) == {"p2", "p3"})
        assert watch_cache.snapshot.free_on(n1)["nvidia.com/gpu"] == 6
        assert watch_cache.is_ready()
    assert sum(1 for c in lister.calls if c[:2] == ("list", "pods")) == 2


async def test_gone_as_an_http_status_relists() -> None:
    lister = InMemoryLister([pod("p1")])
    lister.failures[("watch", PODS)] = [cache.Gone("410: too old resource version", status=410)]
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
        assert watch_cache.snapshot.node("n1") is not None


# -- missing CRDs and readiness ---------------------------------------------------------------


async def test_a_missing_crd_does_not_block_readiness_and_is_picked_up_later() -> None:
    lister = InMemoryLister([pod("p1")])
    lister.missing.add(PYTORCH)
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        assert watch_cache.absent() == [PYTORCH.name] == ["pytorchjobs.kubeflow.org/v1"]
        lister.put(job("kubeflow.org/v1", "PyTorchJob", "train"))
        lister.missing.clear()  # the CRD gets installed
        await eventually(lambda: watch_cache.absent() == [])
        assert watch_cache.snapshot.get("kubeflow.org/v1", "PyTorchJob", "team-a", "train")


async def test_a_crd_that_goes_away_takes_its_objects_with_it() -> None:
    lister = InMemoryLister([job("kubeflow.org/v1", "PyTorchJob", "train")])
    async with running(lister) as watch_cache:
        await synced(watch_cache)
        snap = watch_cache.snapshot
        assert snap.get("kubeflow.org/v1", "PyTorchJob", "team-a", "train") is not None
        lister.missing.add(PYTORCH)
        lister.failures[("watch", PYTORCH)] = [cache.Missing("404", status=404)]
        lister.end_watches(PYTORCH)
        await eventually(lambda: watch_cache.absent() == [PYTORCH.name])
        assert snap.get("kubeflow.org/v1", "PyTorchJob", "team-a", "train") is None
        assert watch_cache.is_ready()


async def test_readiness_waits_for_a_resource_that_cannot_be_listed_yet() -> None:
    lister = InMemoryLister([pod("p1")])
    lister.failures[("list", PODS)] = [
        cache.ListerError("403: pods is forbidden", status=403) for _ in range(10_000)
    ]
    async with running(lister) as watch_cache:
        await eventually(lambda: watch_cache.pending() == ["pods: 403: pods is forbidden"])
        assert not watch_cache.is_ready()
        lister.failures.clear()  # RBAC fixed
        await synced(watch_cache)
        assert watch_cache.pending() == []
        assert pod_names(watch_cache) == {"p1"}


async def test_an_empty_resource_list_is_ready() -> None:
    async with running(InMemoryLister([], resources=[NODES]), resources=[NODES]) as watch_cache:
        await synced(watch_cache)


# -- stopping ------------------------------------------------------------------------------------


async def test_stop_ends_every_worker_promptly_even_while_watching() -> None:
    lister = InMemoryLister([pod("p1")])
    lister.missing.add(PYTORCH)  # one worker asleep between retries
    snapshot = ClusterView(zone_label=ZONE_LABEL)
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
    lister = InMemoryLister([pod("p1")], resources=[PODS])
    watch_cache = WatchCache(ClusterView(zone_label=ZONE_LABEL), lister, resources=[PODS], **FAST)

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
    assert PODS.path == "/api/v1/pods"
    assert PYTORCH.path == "/apis/kubeflow.org/v1/pytorchjobs"
    assert RECORDS.label_selector == "app.kubernetes.io/managed-by=podium"


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    backoff = cache.Backoff(initial=1.0, cap=4.0)
    delays = [backoff.next() for _ in range(5)]
    for got, want in zip(delays, [1, 2, 4, 4, 4], strict=True):
        assert want * 0.8 <= got <= want * 1.2
    backoff.reset()
    assert backoff.next() <= 1.2


# -- the real transport (webhook/kube/kubeapi.py) against a fake apiserver -------------------------

Handler = Callable[["_FakeHandler", str, dict[str, list[str]], bytes], None]


class _FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeApiServer

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append(
            (self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        handler = self.server.routes.get((self.command, parts.path))
        if handler is None:
            self.reply(
                404,
                {
                    "kind": "Status",
                    "code": 404,
                    "message": "the server could not find the requested resource",
                },
            )
            return
        handler(self, parts.path, parse_qs(parts.query), body)

    do_GET = do_POST = _dispatch

    def reply(self, status: int, doc: Any, *, raw: bytes | None = None) -> None:
        data = raw if raw is not None else orjson.dumps(doc)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream(self, lines: list[Any], *, hang: threading.Event | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for doc in lines:
            data = orjson.dumps(doc) + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        if hang is not None:
            hang.wait(10)
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeApiServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FakeHandler)
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def api_client(url: str) -> k8s.ApiClient:
    configuration = k8s.Configuration(host=url)
    configuration.api_key = {"BearerToken": "s3cret"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.retries = False
    return k8s.ApiClient(configuration)


def test_kube_lister_lists_pages_with_the_selector_and_a_token(apiserver: FakeApiServer) -> None:
    def configmaps(h: _FakeHandler, _p: str, query: dict[str, list[str]], _b: bytes) -> None:
        if "continue" not in query:
            h.reply(
                200,
                {
                    "metadata": {"resourceVersion": "7", "continue": "abc+/="},
                    "items": [{"metadata": {"name": "a"}}],
                },
            )
        else:
            h.reply(
                200, {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {"name": "b"}}]}
            )

    apiserver.routes[("GET", "/api/v1/configmaps")] = configmaps
    lister = kubeapi.KubeLister(api_client(apiserver.url), timeout=5)
    first = lister.list(RECORDS, limit=1, continue_=None)
    assert first == cache.Page([{"metadata": {"name": "a"}}], "7", "abc+/=")
    second = lister.list(RECORDS, limit=1, continue_=first.continue_)
    assert second == cache.Page([{"metadata": {"name": "b"}}], "7", None)
    (_, path1, headers, _), (_, path2, _, _) = apiserver.requests
    assert parse_qs(urlsplit(path1).query) == {
        "limit": ["1"],
        "labelSelector": ["app.kubernetes.io/managed-by=podium"],
    }
    assert parse_qs(urlsplit(path2).query)["continue"] == ["abc+/="]
    assert headers["authorization"] == "Bearer s3cret"


@pytest.mark.parametrize(
    ("status", "error", "code"),
    [
        (410, cache.Gone, 410),
        (404, cache.Missing, 404),
        (403, cache.ListerError, 403),
        (500, cache.ListerError, 500),
    ],
)
def test_kube_lister_maps_statuses(
    apiserver: FakeApiServer, status: int, error: type[cache.ListerError], code: int
) -> None:
    apiserver.routes[("GET", "/api/v1/pods")] = lambda h, _p, _q, _b: h.reply(
        status, {"kind": "Status", "code": status, "message": "nope"}
    )
    lister = kubeapi.KubeLister(api_client(apiserver.url), timeout=5)
    with pytest.raises(error) as caught:
        lister.list(PODS, limit=10, continue_=None)
    assert type(caught.value) is error and caught.value.status == code
    assert "nope" in str(caught.value)
    with pytest.raises(error):
        lister.watch(PODS, resource_version="1", timeout_seconds=5)


def test_kube_lister_reports_an_unreachable_apiserver_as_a_lister_error() -> None:
    with socket_closed_port() as port:
        lister = kubeapi.KubeLister(api_client(f"http://127.0.0.1:{port}"), timeout=2)
        with pytest.raises(cache.ListerError) as caught:
            lister.list(PODS, limit=10, continue_=None)
    assert type(caught.value) is cache.ListerError and caught.value.status is None


def test_kube_lister_streams_watch_events(apiserver: FakeApiServer) -> None:
    events = [
        {
            "type": "ADDED",
            "object": {"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "8"}},
        },
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}},
    ]
    apiserver.routes[("GET", "/api/v1/pods")] = lambda h, _p, _q, _b: h.stream(events)
    lister = kubeapi.KubeLister(api_client(apiserver.url), timeout=5)
    stream = lister.watch(PODS, resource_version="7", timeout_seconds=60)
    assert [(e.type, e.object) for e in stream] == [(e["type"], e["object"]) for e in events]
    query = parse_qs(urlsplit(apiserver.requests[0][1]).query)
    assert query == {
        "watch": ["true"],
        "allowWatchBookmarks": ["true"],
        "resourceVersion": ["7"],
        "timeoutSeconds": ["60"],
    }


def test_closing_a_kube_watch_from_another_thread_ends_a_blocked_read(
    apiserver: FakeApiServer,
) -> None:
    hang = threading.Event()
    first = {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "a"}}}
    apiserver.routes[("GET", "/api/v1/pods")] = lambda h, _p, _q, _b: h.stream([first], hang=hang)
    lister = kubeapi.KubeLister(api_client(apiserver.url), timeout=30)
    stream = lister.watch(PODS, resource_version="1", timeout_seconds=60)
    got: list[Any] = []
    failure: list[BaseException] = []

    def read() -> None:
        try:
            got.extend(stream)
        except cache.ListerError as err:
            failure.append(err)

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    stream.close()
    reader.join(5)
    hang.set()
    assert not reader.is_alive()
    assert time.monotonic() - started < 2
    assert [e.object["metadata"]["name"] for e in got] == ["a"]


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

    def route(h: _FakeHandler, _p: str, query: dict[str, list[str]], _b: bytes) -> None:
        if query.get("watch"):
            h.stream([added], hang=hang)
        else:
            h.reply(200, pods)

    apiserver.routes[("GET", "/api/v1/pods")] = route
    lister = kubeapi.KubeLister(api_client(apiserver.url), timeout=5)
    watch_cache = WatchCache(
        ClusterView(zone_label=ZONE_LABEL), lister, resources=[PODS, PYTORCH], **FAST
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


# -- kubeapi.KubeApi (the Api admissions use), same fake apiserver ------------------------------

CM_PATH = "/api/v1/namespaces/team-a/configmaps"
MANIFEST = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "rec", "namespace": "team-a"},
    "data": {"zone": "a"},
}


async def test_kube_api_creates_and_gets(apiserver: FakeApiServer) -> None:
    stored = {**MANIFEST, "metadata": {**MANIFEST["metadata"], "uid": "u1"}}
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: h.reply(201, stored)
    apiserver.routes[("GET", CM_PATH + "/rec")] = lambda h, _p, _q, _b: h.reply(200, stored)
    api = kubeapi.KubeApi(api_client(apiserver.url), timeout=2)
    assert await api.create(MANIFEST) == stored
    assert await api.get("v1", "ConfigMap", "team-a", "rec") == stored
    method, path, headers, body = apiserver.requests[0]
    assert (method, path, orjson.loads(body)) == ("POST", CM_PATH, MANIFEST)
    assert headers["authorization"] == "Bearer s3cret"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (409, effects.AlreadyExists),
        (404, effects.NotFound),
        (403, effects.ApiError),
        (500, effects.ApiError),
        (422, effects.ApiError),
    ],
)
async def test_kube_api_maps_statuses(
    apiserver: FakeApiServer, status: int, error: type[effects.ApiError]
) -> None:
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: h.reply(
        status, {"kind": "Status", "code": status, "message": "said no"}
    )
    api = kubeapi.KubeApi(api_client(apiserver.url), timeout=2)
    with pytest.raises(effects.ApiError) as caught:
        await api.create(MANIFEST)
    assert type(caught.value) is error and caught.value.status == status
    assert "said no" in str(caught.value)


async def test_kube_api_turns_a_hung_apiserver_into_an_api_error_within_its_timeout(
    apiserver: FakeApiServer,
) -> None:
    release = threading.Event()
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: release.wait(10)
    api = kubeapi.KubeApi(api_client(apiserver.url), timeout=0.3)
    started = time.monotonic()
    with pytest.raises(effects.ApiError) as caught:
        await api.create(MANIFEST)
    release.set()
    assert time.monotonic() - started < 2
    assert type(caught.value) is effects.ApiError and caught.value.status is None


async def test_kube_api_reports_garbage_and_unreachable_as_api_errors(
    apiserver: FakeApiServer,
) -> None:
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: h.reply(200, None, raw=b"<html>")
    api = kubeapi.KubeApi(api_client(apiserver.url), timeout=2)
    with pytest.raises(effects.ApiError, match="not JSON"):
        await api.create(MANIFEST)
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: h.reply(200, [1, 2])
    with pytest.raises(effects.ApiError, match="not an object"):
        await api.create(MANIFEST)
    with socket_closed_port() as port:
        api = kubeapi.KubeApi(api_client(f"http://127.0.0.1:{port}"), timeout=2)
        with pytest.raises(effects.ApiError):
            await api.get("v1", "ConfigMap", "team-a", "rec")


@pytest.mark.parametrize(
    ("api_version", "kind", "path"),
    [
        ("v1", "ConfigMap", "/api/v1/namespaces/ns/configmaps/x"),
        (
            "cilium.io/v2",
            "CiliumNetworkPolicy",
            "/apis/cilium.io/v2/namespaces/ns/ciliumnetworkpolicies/x",
        ),
        (
            "networking.k8s.io/v1",
            "NetworkPolicy",
            "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/x",
        ),
        ("kubeflow.org/v1", "PyTorchJob", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/x"),
        ("example.com/v1", "Policy", "/apis/example.com/v1/namespaces/ns/policies/x"),
        ("example.com/v1", "Gateway", "/apis/example.com/v1/namespaces/ns/gateways/x"),
        ("example.com/v1", "Ingress", "/apis/example.com/v1/namespaces/ns/ingresses/x"),
    ],
)
def test_paths_of_namespaced_kinds(api_version: str, kind: str, path: str) -> None:
    assert kubeapi.namespaced_path(api_version, kind, "ns", "x") == path


@contextlib.contextmanager
def socket_closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port


def test_load_client_reads_a_kubeconfig_with_a_pool_for_every_watch(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        orjson.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t0ken"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        ).decode()
    )
    api_client = kubeapi.load_client(kubeconfig)
    configuration = api_client.configuration
    assert configuration.host == "https://127.0.0.1:6443"
    assert configuration.connection_pool_maxsize > len(cache.WATCHED)
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer t0ken"
    with pytest.raises(kubeapi.ClientConfigError):
        kubeapi.load_client(tmp_path / "missing")
