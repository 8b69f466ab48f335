"""The HTTP edge (webhook/serve/server.py, webhook/serve/metrics.py, ``podium serve``):
status codes, fail-open,
readiness, metrics, a property test over hostile bodies, and one real TLS socket."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import json
import logging
import socket
import ssl
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from fastapi import FastAPI
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from tests.builders import PIN
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook import certs
from webhook.core import adapters, reviews
from webhook.core.view import ClusterView
from webhook.kube import cache, errors, twins
from webhook.kube import client as kube_client
from webhook.ops import cli
from webhook.serve import admission, audit, server, tls
from webhook.serve.metrics import Metrics

JSON_HEADERS = {"content-type": "application/json"}


@dataclasses.dataclass
class World:
    app: FastAPI
    admitter: admission.Admitter
    api: twins.InMemoryApi
    sink: audit.MemorySink
    metrics: Metrics
    ready: list[bool]


def make_world(*, ready: bool = True, objects: list[dict[str, Any]] | None = None) -> World:
    settings = PIN
    pj = pytorchjob()
    view = ClusterView.from_objects(
        objects or base_cluster(pj), zone_label=settings.zone_label, kept=adapters.KEPT
    )
    api = twins.InMemoryApi()
    sink = audit.MemorySink()
    metrics = Metrics()
    admitter = admission.Admitter(
        view=lambda: view, api=api, settings=settings, sink=sink, observe=metrics.observe
    )
    flag = [ready]
    app = server.create_app(
        admitter=admitter,
        ready=lambda: flag[0],
        pending=lambda: [] if flag[0] else ["pods: connection refused"],
        metrics=metrics,
    )
    return World(app, admitter, api, sink, metrics, flag)


def pod_review(uid: str = "uid-1", **pod_changes: Any) -> dict[str, Any]:
    pod = pytorch_pod(pytorchjob(), "master").obj()
    pod.update(pod_changes)
    return reviews.review_for_pod(pod, uid=uid)


def the_job_pod_review(world: World, uid: str = "uid-1") -> dict[str, Any]:
    """A review for a pod of the very job in ``world``'s snapshot."""
    pj = next(o for o in world.admitter.view().objects() if o.get("kind") == "PyTorchJob")
    return reviews.review_for_pod(pytorch_pod(dict(pj), "master").obj(), uid=uid)


@pytest.fixture
def world() -> World:
    return make_world()


class Client:
    """Synchronous calls into the ASGI app in memory (httpx's ASGITransport on a private loop),
    so property tests can stay plain functions."""

    def __init__(self, app: FastAPI) -> None:
        self._runner = asyncio.Runner()
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://podium"
        )

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self._runner.run(self._client.post(path, **kwargs))

    def get(self, path: str) -> httpx.Response:
        return self._runner.run(self._client.get(path))

    def close(self) -> None:
        self._runner.run(self._client.aclose())
        self._runner.close()


@contextlib.contextmanager
def connected(app: FastAPI) -> Iterator[Client]:
    client = Client(app)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def client(world: World) -> Iterator[Client]:
    with connected(world.app) as test_client:
        yield test_client


def post(client: Client, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    return client.post(
        "/mutate", content=body, headers=JSON_HEADERS if headers is None else headers
    )


def decoded_patch(resp: dict[str, Any]) -> list[dict[str, Any]]:
    patch: list[dict[str, Any]] = orjson.loads(base64.b64decode(resp["patch"]))
    return patch


def assert_valid_answer(answer: dict[str, Any], uid: str) -> dict[str, Any]:
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    resp: dict[str, Any] = answer["response"]
    assert resp["uid"] == uid
    assert resp["allowed"] is True
    assert ("patch" in resp) == ("patchType" in resp)
    if "patch" in resp:
        assert resp["patchType"] == "JSONPatch"
        ops = decoded_patch(resp)
        assert ops and all(isinstance(op, dict) and {"op", "path"} <= op.keys() for op in ops)
    for warning in resp.get("warnings", []):
        assert isinstance(warning, str) and len(warning) <= reviews.MAX_WARNING
    return resp


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


# -- admissions ------------------------------------------------------------------------------


def test_a_pytorchjob_pod_is_pinned_with_a_json_patch(world: World, client: Client) -> None:
    response = post(client, orjson.dumps(the_job_pod_review(world)))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    resp = assert_valid_answer(response.json(), "uid-1")
    affinity = [op for op in decoded_patch(resp) if op["path"].startswith("/spec/affinity")]
    assert affinity, decoded_patch(resp)
    assert resp["auditAnnotations"]["outcome"] == "pinned"
    assert {key[1] for key in world.api.objects} == {"ConfigMap", "CiliumNetworkPolicy"}
    assert [r["outcome"] for r in world.sink.entries] == ["pinned"]


def test_a_content_type_with_parameters_is_json(world: World, client: Client) -> None:
    body = orjson.dumps(the_job_pod_review(world))
    response = post(client, body, {"content-type": "Application/JSON; charset=utf-8"})
    assert response.status_code == 200


def test_a_pod_of_no_training_job_is_allowed_unchanged(client: Client) -> None:
    review = reviews.review_for_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {},
        }
    )
    resp = assert_valid_answer(post(client, orjson.dumps(review)).json(), "offline-review")
    assert "patch" not in resp


@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "text/plain"},
        {"content-type": "application/jsonx"},
        {"content-type": "application/yaml"},
        {},
    ],
)
def test_a_body_that_is_not_json_by_content_type_is_415(
    client: Client, headers: dict[str, str]
) -> None:
    response = post(client, orjson.dumps(pod_review()), headers)
    assert response.status_code == 415
    assert response.json() == {"error": "content type must be application/json"}


def test_a_declared_body_over_3_mib_is_413_before_reading(world: World, client: Client) -> None:
    headers = {**JSON_HEADERS, "content-length": str(server.MAX_BODY + 1)}
    response = post(client, b"{}", headers)
    assert response.status_code == 413
    assert "exceeds 3145728 bytes" in response.json()["error"]
    assert world.sink.entries == []


def test_an_undeclared_body_over_3_mib_is_413(world: World, client: Client) -> None:
    chunk = b" " * (1024 * 1024)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: sent chunked
        for _ in range(3):
            yield chunk
        yield b"  "

    response = client.post("/mutate", content=chunks(), headers=JSON_HEADERS)
    assert response.status_code == 413
    assert world.sink.entries == []


def test_a_body_of_exactly_3_mib_is_read(client: Client) -> None:
    body = orjson.dumps(pod_review())
    padded = body + b" " * (server.MAX_BODY - len(body))
    assert post(client, padded).status_code == 200


@pytest.mark.parametrize("value", ["ten", "-1"])
def test_a_bad_content_length_is_400(client: Client, value: str) -> None:
    response = post(client, b"{}", {**JSON_HEADERS, "content-length": value})
    assert response.status_code == 400


async def test_reading_stops_at_the_cap_without_buffering_the_rest() -> None:
    received = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b"x" * 1024, "more_body": True}  # endless

    scope = {"type": "http", "method": "POST", "headers": []}
    with pytest.raises(server._Refused) as refused:
        await server._read_body(scope, receive, 10 * 1024)
    assert refused.value.status == 413
    assert received == 11


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "malformed AdmissionReview: body is not JSON"),
        (b"[]", "malformed AdmissionReview: body must be a JSON object"),
        (
            orjson.dumps({**pod_review(), "kind": "Pod"}),
            "malformed AdmissionReview: expected apiVersion admission.k8s.io/v1",
        ),
        (
            orjson.dumps({**pod_review(), "request": {**pod_review()["request"], "uid": ""}}),
            "malformed AdmissionReview: request.uid must be a non-empty string",
        ),
    ],
)
def test_a_malformed_review_is_400_with_the_reason(
    client: Client, body: bytes, reason: str
) -> None:
    response = post(client, body)
    assert response.status_code == 400
    assert response.json()["error"].startswith(reason)


def test_an_api_error_fails_open(world: World, client: Client) -> None:
    world.api.fail = lambda _op, _m: errors.ApiError("etcdserver: request timed out", status=500)
    response = post(client, orjson.dumps(the_job_pod_review(world)))
    assert response.status_code == 200
    resp = assert_valid_answer(response.json(), "uid-1")
    assert "patch" not in resp
    assert resp["warnings"] == [
        "podium could not finish (Kubernetes API: etcdserver: request timed out); "
        "the pod was admitted unchanged"
    ]
    assert samples(world.metrics)[("podium_fail_open_total", ())] == 1


def test_an_unexpected_error_fails_open_when_the_uid_can_be_read(
    world: World, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(_body: bytes) -> admission.Answer:
        raise RuntimeError("bug")

    world.admitter.admit = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, "podium.server"):
        response = post(client, orjson.dumps(pod_review(uid="u-9")))
    assert response.status_code == 200
    resp = assert_valid_answer(response.json(), "u-9")
    assert "patch" not in resp and "internal error: RuntimeError" in resp["warnings"][0]
    assert "u-9" in caplog.text
    response = post(client, b'{"request": {}}')
    assert response.status_code == 500
    assert response.json() == {"error": "internal error: RuntimeError"}


# -- health, readiness, metrics ----------------------------------------------------------------


def test_healthz(client: Client) -> None:
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_is_503_until_the_cache_synced() -> None:
    world = make_world(ready=False)
    with connected(world.app) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json() == {
            "status": "not ready",
            "waitingFor": ["pods: connection refused"],
        }
        world.ready[0] = True
        response = client.get("/readyz")
        assert (response.status_code, response.json()) == (200, {"status": "ready"})


def test_metrics_count_admissions(world: World, client: Client) -> None:
    assert post(client, orjson.dumps(the_job_pod_review(world, uid="a"))).status_code == 200
    assert post(client, orjson.dumps(the_job_pod_review(world, uid="b"))).status_code == 200
    post(client, b"nope")
    post(client, b"{}", {"content-type": "text/plain"})
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    got = samples(world.metrics)
    zone = world.sink.entries[0]["zone"]
    reason = world.sink.entries[0]["reason"]
    assert got[("podium_admissions_total", (("outcome", "pinned"), ("reason", reason)))] == 2
    assert got[("podium_zone_decisions_total", (("zone", zone),))] == 2
    assert got[("podium_policies_created_total", (("kind", "CiliumNetworkPolicy"),))] == 1
    assert got[("podium_admission_duration_seconds_count", ())] == 2
    assert got[("podium_fail_open_total", ())] == 0
    assert got[("podium_cache_synced", ())] == 1
    assert got[("podium_rejected_requests_total", (("reason", "malformed"),))] == 1
    assert got[("podium_rejected_requests_total", (("reason", "unsupported-media-type"),))] == 1
    world.ready[0] = False
    assert samples(world.metrics)[("podium_cache_synced", ())] == 0


def test_two_apps_do_not_share_metrics() -> None:
    first, second = make_world(), make_world()
    with connected(first.app) as client:
        post(client, orjson.dumps(the_job_pod_review(first)))
    assert samples(first.metrics)[("podium_admission_duration_seconds_count", ())] == 1
    assert samples(second.metrics)[("podium_admission_duration_seconds_count", ())] == 0


async def test_the_lifespan_runs_the_watch_cache() -> None:
    settings = PIN
    pj = pytorchjob()
    lister = twins.InMemoryLister(base_cluster(pj))
    view = ClusterView(zone_label=settings.zone_label, kept=adapters.KEPT)
    watch_cache = cache.WatchCache(view, lister, backoff_initial=0.01)
    metrics = Metrics()
    admitter = admission.Admitter(
        view=lambda: view,
        api=twins.InMemoryApi(),
        settings=settings,
        sink=audit.MemorySink(),
        observe=metrics.observe,
    )
    app = server.create_app(
        admitter=admitter,
        ready=watch_cache.is_ready,
        pending=watch_cache.pending,
        metrics=metrics,
        lifespan=server.serving_lifespan(watch_cache, None),
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        app.api.router.lifespan_context(app.api),
        httpx.AsyncClient(transport=transport, base_url="http://podium") as client,
    ):
        await watch_cache.ready.wait()
        assert (await client.get("/readyz")).status_code == 200
        body = orjson.dumps(reviews.review_for_pod(pytorch_pod(pj, "master").obj(), uid="w"))
        response = await client.post("/mutate", content=body, headers=JSON_HEADERS)
        assert assert_valid_answer(response.json(), "w")["auditAnnotations"]["outcome"] == "pinned"
    assert not any(t.is_alive() for t in watch_cache._threads)


def test_logs_are_json_lines() -> None:
    formatter = server.JsonFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "podium.x", logging.ERROR, __file__, 1, "failed %s", ("it",), sys.exc_info()
        )
    doc = json.loads(formatter.format(record))
    assert doc["level"] == "error" and doc["logger"] == "podium.x"
    assert doc["message"] == "failed it" and "ValueError: boom" in doc["exception"]
    assert doc["time"].endswith("Z")


# -- property: whatever arrives, the server answers and never with 5xx ---------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)

PROPERTY_WORLD = make_world()
CASES: dict[str, int] = {"bodies": 0, "reviews": 0, "reviews answered 200": 0}


@pytest.fixture(scope="module")
def shared_client() -> Iterator[Client]:
    """One app and client for every hypothesis example (the api twin accumulates objects)."""
    with connected(PROPERTY_WORLD.app) as test_client:
        yield test_client


def check_answer(response: httpx.Response, uid: Any) -> None:
    assert response.status_code < 500, response.text
    assert response.status_code in (200, 400), response.text
    doc = response.json()
    if response.status_code == 400:
        assert isinstance(doc["error"], str) and doc["error"]
        return
    assert isinstance(uid, str) and uid
    assert_valid_answer(doc, uid)


@hsettings(max_examples=600)
@given(body=json_values.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=200))
def test_any_body_gets_an_answer(shared_client: Client, body: bytes) -> None:
    CASES["bodies"] += 1
    check_answer(post(shared_client, body), reviews.request_uid(body))


unicode_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20
)
#: Variations the apiserver can send: every one of them must be decided, never failed open.
possible = st.fixed_dictionaries(
    {},
    optional={
        "uid": unicode_text.filter(bool),
        "operation": st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]),
        "subResource": st.sampled_from(["", "status", "ephemeralcontainers", "binding"])
        | st.none(),
        "requestKind": st.sampled_from(["Pod", "Deployment", "Binding"]),
        "namespace": st.sampled_from([NS, "kube-system", "podium-system", "sandbox", ""])
        | unicode_text,
        "dryRun": st.booleans(),
        "object": st.none(),
        "userInfo": st.just({"username": "system:serviceaccount:kubeflow:training-operator"}),
        "labels": st.dictionaries(
            unicode_text.filter(bool),
            st.text(max_size=3) | st.just("v" * 70_000) | unicode_text,
            max_size=3,
        ),
        "annotations": st.dictionaries(
            st.sampled_from(["podium.dev/skip", "kubernetes.io/config.mirror", "x"]),
            st.sampled_from(["true", "false", ""]),
            max_size=2,
        ),
    },
)
#: Bodies nobody but an attacker or a bug would send: answered 400, or failed open.
hostile = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["admission.k8s.io/v1beta1", "v1", ""]) | st.none(),
        "kind": st.sampled_from(["AdmissionReview", "Pod", ""]) | st.none(),
        "uid": st.none() | st.just("") | st.integers(),
        "operation": st.sampled_from(["PATCH", "", "create"]) | st.integers(),
        "dryRun": st.none() | st.just("yes"),
        "object": st.integers() | st.lists(st.integers(), max_size=2) | unicode_text,
        "userInfo": st.none() | st.just("admin"),
        "labels_not_a_dict": st.just(True),
        "metadata": st.none() | st.just("m") | st.just({}),
        "spec": st.none() | st.just([]) | st.just({"containers": "x"}) | st.just({"affinity": 3}),
        "drop": st.sets(st.sampled_from(["request", "object", "uid", "kind", "userInfo"])),
    },
)
mutations = possible | st.tuples(possible, hostile).map(lambda pair: {**pair[0], **pair[1]})


IMPOSSIBLE_SHAPES = {"labels_not_a_dict", "metadata", "spec"}


def mutate_review(changes: dict[str, Any]) -> dict[str, Any]:
    pj = next(o for o in PROPERTY_WORLD.admitter.view().objects() if o.get("kind") == "PyTorchJob")
    doc = copy.deepcopy(reviews.review_for_pod(pytorch_pod(dict(pj), "worker", 1).obj(), uid="p"))
    req = doc["request"]
    pod = req["object"]
    for key in ("apiVersion", "kind"):
        if key in changes:
            doc[key] = changes[key]
    for key in ("uid", "operation", "subResource", "namespace", "dryRun", "userInfo"):
        if key in changes:
            req[key] = changes[key]
    if "requestKind" in changes:
        req["kind"] = {"group": "", "version": "v1", "kind": changes["requestKind"]}
    if "labels" in changes:
        pod["metadata"]["labels"].update(changes["labels"])
    if "annotations" in changes:
        pod["metadata"]["annotations"].update(changes["annotations"])
    if "labels_not_a_dict" in changes:
        pod["metadata"]["labels"] = ["a", "b"]
    if "spec" in changes:
        pod["spec"] = changes["spec"]
    if "metadata" in changes:
        pod["metadata"] = changes["metadata"]
    if "object" in changes:
        req["object"] = changes["object"]
    for key in changes.get("drop", ()):
        if key == "request":
            doc.pop("request")
        else:
            req.pop(key, None)
    return doc


@hsettings(max_examples=1000)
@given(changes=mutations)
def test_any_mutation_of_a_valid_review_gets_an_answer(
    shared_client: Client, changes: dict[str, Any]
) -> None:
    CASES["reviews"] += 1
    doc = mutate_review(changes)
    body = json.dumps(doc).encode()  # orjson refuses integers beyond 64 bits; the server must not
    response = post(shared_client, body)
    check_answer(response, reviews.request_uid(body))
    CASES["reviews answered 200"] += response.status_code == 200
    # Shapes the apiserver cannot send (it decodes the pod into its Go type first) may make the
    # decision fail; the server then fails open. Every shape it can send must be decided.
    if response.status_code == 200 and not changes.keys() & IMPOSSIBLE_SHAPES:
        warnings = response.json()["response"].get("warnings", [])
        assert not any("internal error" in w for w in warnings), warnings


def test_report_property_cases() -> None:
    """Runs after the property tests (file order) and prints how many cases they tried."""
    print(f"\nhypothesis cases: {CASES}")  # shown with -s


# -- one real socket, with TLS ------------------------------------------------------------------


@dataclasses.dataclass
class Served:
    url: str
    ca_file: Path
    server: uvicorn.Server
    world: World


@contextlib.contextmanager
def serving(tmp_path: Path, *, min_version: tls.TLSVersionName = "1.2") -> Iterator[Served]:
    ca = certs.issue_ca("podium-test-ca")
    leaf = certs.issue_serving(
        ca, service="podium", namespace="podium-system", extra_sans=("127.0.0.1",)
    )
    cert_file, key_file, ca_file = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.pem"
    cert_file.write_bytes(leaf.cert_pem())
    key_file.write_bytes(leaf.key_pem())
    ca_file.write_bytes(ca.cert_pem())
    context = tls.server_context(cert_file, key_file, min_version=min_version)
    reloader = tls.CertReloader(context, cert_file, key_file, interval=0.05)
    world = make_world()
    world.app.api.router.lifespan_context = server.serving_lifespan(None, reloader)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = server.server_config(
        world.app, host="127.0.0.1", port=port, ssl_context=context, log_config=None
    )
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert uv.started
    try:
        yield Served(f"https://127.0.0.1:{port}", ca_file, uv, world)
    finally:
        uv.should_exit = True
        thread.join(10)
        sock.close()
        assert not thread.is_alive()


def test_a_review_over_a_real_tls_socket(tmp_path: Path) -> None:
    with serving(tmp_path) as served:
        verify = ssl.create_default_context(cafile=str(served.ca_file))
        with httpx.Client(verify=verify, base_url=served.url) as client:
            body = orjson.dumps(the_job_pod_review(served.world, uid="tls-1"))
            response = client.post("/mutate", content=body, headers=JSON_HEADERS)
            tls_version = (
                response.extensions["network_stream"].get_extra_info("ssl_object").version()
            )
            assert tls_version in ("TLSv1.2", "TLSv1.3")
            resp = assert_valid_answer(response.json(), "tls-1")
            assert resp["patchType"] == "JSONPatch"
            assert client.get("/readyz").status_code == 200
            assert response.headers.get("server") is None
    assert served.server.should_exit


def test_a_tls_1_3_server_refuses_a_tls_1_2_client(tmp_path: Path) -> None:
    with serving(tmp_path, min_version="1.3") as served:
        verify = ssl.create_default_context(cafile=str(served.ca_file))
        verify.maximum_version = ssl.TLSVersion.TLSv1_2
        with httpx.Client(verify=verify) as client, pytest.raises(httpx.ConnectError):
            client.get(served.url + "/healthz")


# -- podium serve ----------------------------------------------------------------------------


def test_serve_needs_a_key_pair_unless_told_otherwise() -> None:
    result = CliRunner().invoke(cli.app, ["serve"])
    assert result.exit_code == 2
    assert "--cert-file and --key-file are required" in result.output


def test_serve_passes_its_options_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(server, "run", lambda **kw: seen.update(kw))
    monkeypatch.setenv("POD_NAMESPACE", "podium-from-env")
    certs.issue(tmp_path, service="podium", namespace="podium-system")
    cert, key = str(tmp_path / certs.LEAF_CERT), str(tmp_path / certs.LEAF_KEY)
    result = CliRunner().invoke(
        cli.app,
        [
            "serve",
            "--cert-file",
            cert,
            "--key-file",
            key,
            "--host",
            "127.0.0.1",
            "--port",
            "9443",
            "--tls-min-version",
            "1.3",
            "--audit-file",
            str(tmp_path / "a.log"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen["settings"].own_namespace == "podium-from-env"
    assert (seen["host"], seen["port"], seen["tls_min_version"]) == ("127.0.0.1", 9443, "1.3")
    assert seen["use_tls"] is True and seen["cert_file"] == Path(cert)
    assert seen["context"] is None  # the kubeconfig's current context
    result = CliRunner().invoke(cli.app, ["serve", "--no-tls", "--namespace", "ops"])
    assert result.exit_code == 0, result.output
    assert seen["settings"].own_namespace == "ops" and seen["use_tls"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--no-tls", "--tls-min-version", "1.1"], "'1.1' is not one of '1.2', '1.3'"),
        (
            ["--no-tls", "--kubeconfig", "/nonexistent/kubeconfig"],
            "Error: kubeconfig /nonexistent/kubeconfig not found",
        ),
        (
            ["--no-tls", "--kubeconfig", "/dev/null"],
            "cannot load a Kubernetes configuration from /dev/null",
        ),
    ],
)
def test_serve_refuses_what_it_cannot_use(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli.app, ["serve", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_mutate_answers_only_post(client: Client) -> None:
    response = client.get("/mutate")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert "POST" in response.json()["error"]


def test_forwarded_headers_are_not_trusted() -> None:
    """The apiserver calls podium directly: an X-Forwarded-For from anyone must not become the
    caller podium logs (uvicorn trusts it from 127.0.0.1 unless told not to)."""
    config = server.server_config(
        make_world().app, host="127.0.0.1", port=0, ssl_context=None, log_config=None
    )
    assert config.proxy_headers is False


class _Whoami:
    """Answers a SelfSubjectReview as the apiserver does, or fails like an old one."""

    def __init__(self, user: str | None) -> None:
        self.user = user
        self.created: list[Any] = []

    async def create(self, manifest: Any) -> dict[str, Any]:
        self.created.append(manifest)
        if self.user is None:
            raise errors.NotFound("selfsubjectreviews.authentication.k8s.io not found")
        return {**manifest, "status": {"userInfo": {"username": self.user, "groups": []}}}

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Any:
        raise NotImplementedError


async def test_podium_asks_the_apiserver_who_it_is(caplog: pytest.LogCaptureFixture) -> None:
    sa = "system:serviceaccount:podium-system:podium"
    api = _Whoami(sa)
    assert await server.who_am_i(api) == sa
    assert api.created == [{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}]
    with caplog.at_level(logging.WARNING, logger="podium.server"):
        assert await server.who_am_i(_Whoami(None)) == ""
    assert "own-user" in caplog.text


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        (("one", "other"), "--key-file {key} is not the private key of --cert-file {cert}"),
        (("one", "missing"), "--key-file {key}: No such file or directory"),
        (("missing", "one"), "--cert-file {cert}: No such file or directory"),
        (("key-as-cert", "one"), "--cert-file {cert} holds no PEM certificate"),
    ],
)
def test_serve_says_which_file_of_the_pair_is_wrong(
    tmp_path: Path, pair: tuple[str, str], message: str
) -> None:
    for name in ("one", "other"):
        certs.issue(tmp_path / name, service="podium", namespace="podium-system")
    (tmp_path / "key-as-cert").mkdir()
    (tmp_path / "key-as-cert" / certs.LEAF_CERT).write_bytes(
        (tmp_path / "one" / certs.LEAF_KEY).read_bytes()
    )
    cert = tmp_path / pair[0] / certs.LEAF_CERT
    key = tmp_path / pair[1] / certs.LEAF_KEY
    result = CliRunner().invoke(
        cli.app, ["serve", "--cert-file", str(cert), "--key-file", str(key)]
    )
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: {message.format(cert=cert, key=key)}")


def test_serve_connects_through_the_named_context(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(server, "run", lambda **kw: seen.update(kw))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": n, "cluster": {"server": f"https://{n}.example:6443"}}
                    for n in ("dev", "prod")
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": n, "context": {"cluster": n, "user": "u"}} for n in ("dev", "prod")
                ],
                "current-context": "dev",
            }
        )
    )
    args = ["serve", "--no-tls", "--kubeconfig", str(kubeconfig), "--context", "prod"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert (seen["kubeconfig"], seen["context"]) == (kubeconfig, "prod")
    api = kube_client.load_client(seen["kubeconfig"], seen["context"])
    assert api.configuration.host == "https://prod.example:6443"
    api.close()
    monkeypatch.undo()  # the real server: it loads the configuration before it binds anything
    missing = CliRunner().invoke(cli.app, [*args[:-1], "staging"])
    assert missing.exit_code == 2 and "staging" in missing.stderr
