"""The real client (webhook/kube/client.py) against a fake apiserver on 127.0.0.1.

The statuses and Status bodies are the apiserver's: k8s.io/apimachinery pkg/api/errors/errors.go
(``NewNotFound`` 404, ``NewAlreadyExists`` 409, ``NewConflict`` 409, ``NewResourceExpired`` 410)
and the watch protocol of k8s.io/apimachinery pkg/watch (one JSON event per line, an ``ERROR``
event carrying a Status)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.kube.apiserver import (
    FakeApiServer,
    FakeHandler,
    api_client,
    closed_port,
    running,
    status_body,
)
from webhook.kube import cache, client, errors
from webhook.kube.protocols import Page

PODS = next(r for r in cache.WATCHED if r.kind == "Pod")
RECORDS = next(r for r in cache.WATCHED if r.kind == "ConfigMap")
CM_PATH = "/api/v1/namespaces/team-a/configmaps"
MANIFEST = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "rec", "namespace": "team-a", "resourceVersion": "7"},
    "data": {"zone": "a"},
}


def objects(apiserver: FakeApiServer, timeout: float = 2) -> client.KubeObjects:
    return client.KubeObjects(api_client(apiserver.url), timeout=timeout)


def lister(apiserver: FakeApiServer, timeout: float = 5) -> client.KubeLister:
    return client.KubeLister(api_client(apiserver.url), timeout=timeout)


# -- paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "namespace", "name", "path"),
    [
        ("v1", "ConfigMap", "ns", "x", "/api/v1/namespaces/ns/configmaps/x"),
        ("v1", "ConfigMap", "ns", None, "/api/v1/namespaces/ns/configmaps"),
        ("v1", "ConfigMap", None, None, "/api/v1/configmaps"),
        ("v1", "Node", None, "n1", "/api/v1/nodes/n1"),
        ("v1", "Namespace", "", "team-a", "/api/v1/namespaces/team-a"),
        (
            "cilium.io/v2",
            "CiliumNetworkPolicy",
            "ns",
            "x",
            "/apis/cilium.io/v2/namespaces/ns/ciliumnetworkpolicies/x",
        ),
        (
            "cilium.io/v2",
            "CiliumClusterwideNetworkPolicy",
            None,
            None,
            "/apis/cilium.io/v2/ciliumclusterwidenetworkpolicies",
        ),
        (
            "networking.k8s.io/v1",
            "NetworkPolicy",
            "ns",
            "x",
            "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/x",
        ),
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            "ns",
            "x",
            "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/x",
        ),
        (
            "coordination.k8s.io/v1",
            "Lease",
            "ns",
            "l",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
        ),
        ("example.com/v1", "Policy", "ns", "x", "/apis/example.com/v1/namespaces/ns/policies/x"),
        ("example.com/v1", "Gateway", "ns", "x", "/apis/example.com/v1/namespaces/ns/gateways/x"),
        ("example.com/v1", "Ingress", "ns", "x", "/apis/example.com/v1/namespaces/ns/ingresses/x"),
    ],
)
def test_paths(
    api_version: str, kind: str, namespace: str | None, name: str | None, path: str
) -> None:
    assert client.path(api_version, kind, namespace=namespace, name=name) == path


def test_a_resource_is_listed_at_its_own_plural_across_namespaces() -> None:
    assert client.path_of_resource(PODS) == "/api/v1/pods"
    pytorch = next(r for r in cache.WATCHED if r.kind == "PyTorchJob")
    assert client.path_of_resource(pytorch) == "/apis/kubeflow.org/v1/pytorchjobs"


@given(namespace=st.text(min_size=1), name=st.text(min_size=1))
def test_names_are_one_path_segment_each(namespace: str, name: str) -> None:
    path = client.path("v1", "ConfigMap", namespace=namespace, name=name)
    _, api, version, namespaces, ns, plural, obj = path.split("/")
    assert (api, version, namespaces, plural) == ("api", "v1", "namespaces", "configmaps")
    assert (unquote(ns), unquote(obj)) == (namespace, name)


# -- the object calls ---------------------------------------------------------------------------


async def test_create_and_get_send_raw_json_with_the_token(apiserver: FakeApiServer) -> None:
    stored = {**MANIFEST, "metadata": {**MANIFEST["metadata"], "uid": "u1"}}
    apiserver.answer("POST", CM_PATH, 201, stored)
    apiserver.answer("GET", CM_PATH + "/rec", 200, stored)
    api = objects(apiserver)
    assert await api.create(MANIFEST) == stored
    assert await api.get("v1", "ConfigMap", "team-a", "rec") == stored
    method, path, headers, body = apiserver.requests[0]
    assert (method, path, orjson.loads(body)) == ("POST", CM_PATH, MANIFEST)
    assert headers["authorization"] == "Bearer s3cret"
    assert headers["content-type"] == "application/json"


async def test_list_follows_continue_tokens_and_types_the_items(apiserver: FakeApiServer) -> None:
    def route(h: FakeHandler, _p: str, query: dict[str, list[str]], _b: bytes) -> None:
        if "continue" not in query:
            items, meta = [{"metadata": {"name": "a"}}], {"continue": "tok/2="}
        else:
            items, meta = [{"metadata": {"name": "b"}}], {}
        h.reply(200, {"kind": "ConfigMapList", "metadata": meta, "items": items})

    apiserver.routes[("GET", CM_PATH)] = route
    got = await objects(apiserver).list("v1", "ConfigMap", namespace="team-a", label_selector="a=b")
    assert got == [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}},
    ]
    first, second = (parse_qs(urlsplit(r[1]).query) for r in apiserver.requests)
    assert first == {"limit": ["500"], "labelSelector": ["a=b"]}
    assert second == {"limit": ["500"], "labelSelector": ["a=b"], "continue": ["tok/2="]}


async def test_guarded_writes_carry_what_guards_them(apiserver: FakeApiServer) -> None:
    path = CM_PATH + "/rec"
    for method in ("PUT", "PATCH", "DELETE"):
        apiserver.answer(method, path, 200, MANIFEST)
    api = objects(apiserver)
    await api.replace(MANIFEST)
    await api.merge_patch(
        "v1", "ConfigMap", "team-a", "rec", {"metadata": {"resourceVersion": "7"}}
    )
    await api.delete("v1", "ConfigMap", "team-a", "rec", uid="u1", resource_version="7")
    (put, patch, delete) = apiserver.requests
    assert (put[0], put[1], orjson.loads(put[3])) == ("PUT", path, MANIFEST)
    assert patch[0] == "PATCH" and patch[2]["content-type"] == "application/merge-patch+json"
    assert orjson.loads(patch[3]) == {"metadata": {"resourceVersion": "7"}}
    assert delete[0] == "DELETE" and orjson.loads(delete[3]) == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u1", "resourceVersion": "7"},
    }


# -- statuses: one mapping for every call --------------------------------------------------------

CREATE_STATUSES = [
    (404, "NotFound", errors.NotFound),
    (409, "AlreadyExists", errors.AlreadyExists),
    (410, "Gone", errors.Gone),
    (403, "Forbidden", errors.ApiError),
    (422, "Invalid", errors.ApiError),
    (429, "TooManyRequests", errors.ApiError),
    (500, "InternalError", errors.ApiError),
]


@pytest.mark.parametrize(("status", "reason", "error"), CREATE_STATUSES)
async def test_create_maps_statuses(
    apiserver: FakeApiServer, status: int, reason: str, error: type[errors.ApiError]
) -> None:
    apiserver.answer("POST", CM_PATH, status, status_body(status, reason, "said no"))
    with pytest.raises(errors.ApiError) as caught:
        await objects(apiserver).create(MANIFEST)
    assert type(caught.value) is error and caught.value.status == status
    assert str(caught.value) == f"POST {CM_PATH}: {status}: said no"


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
async def test_a_409_on_a_guarded_write_is_a_conflict(
    apiserver: FakeApiServer, method: str
) -> None:
    apiserver.answer(method, CM_PATH + "/rec", 409, status_body(409, "Conflict", "modified"))
    api = objects(apiserver)
    calls = {
        "PUT": lambda: api.replace(MANIFEST),
        "PATCH": lambda: api.merge_patch("v1", "ConfigMap", "team-a", "rec", {}),
        "DELETE": lambda: api.delete("v1", "ConfigMap", "team-a", "rec", resource_version="7"),
    }
    with pytest.raises(errors.Conflict) as caught:
        await calls[method]()
    assert caught.value.status == 409


@pytest.mark.parametrize(
    ("status", "error"),
    [(410, errors.Gone), (404, errors.NotFound), (403, errors.ApiError), (500, errors.ApiError)],
)
def test_the_lister_maps_statuses_the_same_way(
    apiserver: FakeApiServer, status: int, error: type[errors.ApiError]
) -> None:
    apiserver.answer("GET", "/api/v1/pods", status, status_body(status, "", "nope"))
    with pytest.raises(errors.ApiError) as caught:
        lister(apiserver).list(PODS, limit=10, continue_=None)
    assert type(caught.value) is error and caught.value.status == status
    assert "nope" in str(caught.value)
    with pytest.raises(error):
        lister(apiserver).watch(PODS, resource_version="1", timeout_seconds=5)


@hsettings(max_examples=40)
@given(status=st.integers(400, 599), body=st.binary(max_size=300))
def test_any_error_answer_becomes_the_mapped_error_with_its_status(
    status: int, body: bytes
) -> None:
    """Whatever an apiserver or a proxy in front of it answers with an error status."""
    with running() as apiserver:
        apiserver.routes[("GET", CM_PATH + "/rec")] = lambda h, _p, _q, _b: h.reply(
            status, None, raw=body
        )
        api = client.KubeObjects(api_client(apiserver.url), timeout=2)
        with pytest.raises(errors.ApiError) as caught:
            asyncio.run(api.get("v1", "ConfigMap", "team-a", "rec"))
    expected = errors.error_for(status, "")
    assert type(caught.value) is type(expected) and caught.value.status == status
    assert str(caught.value).startswith(f"GET {CM_PATH}/rec: ")


async def test_an_error_body_that_is_not_a_status_is_quoted(apiserver: FakeApiServer) -> None:
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: h.reply(
        502, None, raw=b"<html>Bad Gateway</html>"
    )
    with pytest.raises(errors.ApiError, match="502: <html>Bad Gateway</html>"):
        await objects(apiserver).create(MANIFEST)
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: h.reply(503, None, raw=b"")
    with pytest.raises(errors.ApiError, match=r"HTTP 503$"):
        await objects(apiserver).create(MANIFEST)


async def test_a_2xx_answer_that_is_not_a_json_object_is_an_api_error(
    apiserver: FakeApiServer,
) -> None:
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: h.reply(200, None, raw=b"<html>")
    with pytest.raises(errors.ApiError, match="not JSON") as caught:
        await objects(apiserver).create(MANIFEST)
    assert caught.value.status is None
    apiserver.answer("POST", CM_PATH, 200, [1, 2])
    with pytest.raises(errors.ApiError, match="not an object"):
        await objects(apiserver).create(MANIFEST)
    apiserver.answer("GET", "/api/v1/pods", 200, {"kind": "PodList"})
    with pytest.raises(errors.ApiError, match="the list has no items"):
        lister(apiserver).list(PODS, limit=10, continue_=None)


async def test_an_unreachable_apiserver_is_an_api_error_without_status() -> None:
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}"
        with pytest.raises(errors.ApiError) as caught:
            await client.KubeObjects(api_client(url), timeout=2).get("v1", "ConfigMap", "a", "b")
        assert type(caught.value) is errors.ApiError and caught.value.status is None
        assert str(caught.value).startswith("GET /api/v1/namespaces/a/configmaps/b: ")
        with pytest.raises(errors.ApiError) as caught:
            client.KubeLister(api_client(url), timeout=2).list(PODS, limit=1, continue_=None)
        assert type(caught.value) is errors.ApiError and caught.value.status is None


async def test_a_hung_apiserver_is_an_api_error_within_the_timeout(
    apiserver: FakeApiServer,
) -> None:
    release = threading.Event()
    apiserver.routes[("POST", CM_PATH)] = lambda h, _p, _q, _b: release.wait(10)
    started = time.monotonic()
    with pytest.raises(errors.ApiError) as caught:
        await objects(apiserver, timeout=0.3).create(MANIFEST)
    release.set()
    assert time.monotonic() - started < 2
    assert type(caught.value) is errors.ApiError and caught.value.status is None


async def test_a_connection_dropped_mid_answer_is_an_api_error(apiserver: FakeApiServer) -> None:
    def half(h: FakeHandler, _p: str, _q: dict[str, list[str]], _b: bytes) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100")
        h.end_headers()
        h.wfile.write(b'{"kind":')
        h.close_connection = True

    apiserver.routes[("GET", CM_PATH + "/rec")] = half
    with pytest.raises(errors.ApiError) as caught:
        await objects(apiserver).get("v1", "ConfigMap", "team-a", "rec")
    assert caught.value.status is None


# -- the lister ---------------------------------------------------------------------------------


def test_list_pages_carry_the_selector_and_the_token(apiserver: FakeApiServer) -> None:
    def configmaps(h: FakeHandler, _p: str, query: dict[str, list[str]], _b: bytes) -> None:
        meta: dict[str, Any] = {"resourceVersion": "7"}
        if "continue" not in query:
            h.reply(200, {"metadata": {**meta, "continue": "abc+/="}, "items": [{"n": "a"}]})
        else:
            h.reply(200, {"metadata": meta, "items": [{"n": "b"}]})

    apiserver.routes[("GET", "/api/v1/configmaps")] = configmaps
    first = lister(apiserver).list(RECORDS, limit=1, continue_=None)
    assert first == Page([{"n": "a"}], "7", "abc+/=")
    second = lister(apiserver).list(RECORDS, limit=1, continue_=first.continue_)
    assert second == Page([{"n": "b"}], "7", None)
    (_, path1, headers, _), (_, path2, _, _) = apiserver.requests
    assert parse_qs(urlsplit(path1).query) == {
        "limit": ["1"],
        "labelSelector": ["app.kubernetes.io/managed-by=podium"],
    }
    assert parse_qs(urlsplit(path2).query)["continue"] == ["abc+/="]
    assert headers["authorization"] == "Bearer s3cret"


def test_a_watch_is_read_line_by_line(apiserver: FakeApiServer) -> None:
    events = [
        {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "a"}}},
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}},
        {"type": "ERROR", "object": status_body(410, "Expired", "too old resource version")},
    ]
    apiserver.routes[("GET", "/api/v1/pods")] = lambda h, _p, _q, _b: h.stream(events)
    stream = lister(apiserver).watch(PODS, resource_version="7", timeout_seconds=60)
    assert [(e.type, e.object) for e in stream] == [(e["type"], e["object"]) for e in events]
    assert parse_qs(urlsplit(apiserver.requests[0][1]).query) == {
        "watch": ["true"],
        "allowWatchBookmarks": ["true"],
        "resourceVersion": ["7"],
        "timeoutSeconds": ["60"],
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [(b"{not json\n", "a watch event is not JSON"), (b'{"type":"ADDED"}\n', "without object")],
)
def test_a_broken_watch_line_is_an_api_error_after_the_good_ones(
    apiserver: FakeApiServer, raw: bytes, message: str
) -> None:
    first = {"type": "ADDED", "object": {"metadata": {"name": "a"}}}
    apiserver.routes[("GET", "/api/v1/pods")] = lambda h, _p, _q, _b: h.stream([first], raw=raw)
    stream = lister(apiserver).watch(PODS, resource_version="1", timeout_seconds=60)
    got = []
    with pytest.raises(errors.ApiError, match=message):
        for event in stream:
            got.append(event.object)
    assert got == [first["object"]]


def test_closing_a_watch_from_another_thread_ends_a_blocked_read(
    apiserver: FakeApiServer,
) -> None:
    hang = threading.Event()
    first = {"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "a"}}}
    apiserver.routes[("GET", "/api/v1/pods")] = lambda h, _p, _q, _b: h.stream([first], hang=hang)
    stream = lister(apiserver, timeout=30).watch(PODS, resource_version="1", timeout_seconds=60)
    got: list[Any] = []
    failure: list[BaseException] = []

    def read() -> None:
        try:
            got.extend(stream)
        except errors.ApiError as err:
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


# -- the configuration --------------------------------------------------------------------------


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
    configuration = client.load_client(kubeconfig).configuration
    assert configuration.host == "https://127.0.0.1:6443"
    assert configuration.connection_pool_maxsize > len(cache.WATCHED)
    # writable-namespaces: three more watches per namespace, as many more connections
    many = cache.watched({f"ns{i}" for i in range(40)})
    assert len(many) > len(cache.WATCHED) + 100
    wide = client.load_client(kubeconfig, watches=len(many)).configuration
    assert wide.connection_pool_maxsize > len(many)
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer t0ken"
    with pytest.raises(client.ClientConfigError):
        client.load_client(tmp_path / "missing")
