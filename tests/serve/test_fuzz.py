"""Bad input against the whole server app (in memory, through httpx's ASGITransport): envelopes
(apiVersion, kind, uid, operation, subresource) and pod shapes (generateName only, no or several
owners, existing affinity, conflicting zone selectors, unicode and over-long labels) and bodies
near and above 3 MiB. The promise: no 5xx, no escaped exception, always a valid AdmissionReview
answer (whose patch applies to the pod) or a clear 4xx.

How many cases ran is written to the terminal at the end of the module (and hypothesis prints
its own numbers with ``--hypothesis-show-statistics``)."""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, reviews
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import twins
from webhook.serve import admission, audit, server

COUNTS: collections.Counter[str] = collections.Counter()
JOB = pytorchjob(workers=3)
OTHER_JOB = pytorchjob("other", workers=1)
ZONE_KEY = "topology.kubernetes.io/zone"
FAIL_OPEN = "podium could not finish"


class App:
    def __init__(self) -> None:
        settings = Settings()
        objects = base_cluster(JOB, OTHER_JOB)
        view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
        self.sink = audit.MemorySink()
        admitter = admission.Admitter(
            view=lambda: view, api=twins.InMemoryApi(), settings=settings, sink=self.sink
        )
        self.app = server.create_app(admitter=admitter, ready=lambda: True)
        self.runner = asyncio.Runner()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://podium"
        )

    def post(self, body: bytes, content_type: str = "application/json") -> httpx.Response:
        return self.runner.run(
            self.client.post("/mutate", content=body, headers={"content-type": content_type})
        )

    def close(self) -> None:
        self.runner.run(self.client.aclose())
        self.runner.close()


@pytest.fixture(scope="module")
def app(request: pytest.FixtureRequest) -> Iterator[App]:
    served = App()
    yield served
    served.close()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(COUNTS.items()))
        reporter.write_line(f"\ntest_fuzz cases — {counts}")


# -- strategies --------------------------------------------------------------------------------

unicode_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
label_keys = (
    st.sampled_from(["app", "podium.dev/job", "team", "x" * 64, "a/b/c", "ü"]) | unicode_text
)
label_values = st.sampled_from(["", "v", "z" * 63, "z" * 64, "é", "v" * 10_000]) | unicode_text
zones = st.sampled_from(["zone-a", "zone-b", "zone-c", "zone-x", ""])


def owner(obj: dict[str, Any], controller: bool) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
    }


owners = st.sampled_from(
    [
        "none",
        "job",
        "job-not-controller",
        "two-controllers",
        "job-and-others",
        "unknown-kind",
        "wrong-uid",
    ]
)

requirement = st.fixed_dictionaries(
    {
        "key": st.sampled_from([ZONE_KEY, "kubernetes.io/hostname", "gpu"]),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Bogus"]),
        "values": st.lists(zones, max_size=3),
    }
)
affinities = st.one_of(
    st.none(),
    st.builds(
        lambda terms: {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        },
        st.lists(
            st.fixed_dictionaries(
                {"matchExpressions": st.lists(requirement, max_size=3)},
                optional={"matchFields": st.just([])},
            ),
            max_size=3,
        ),
    ),
    st.just(
        {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchExpressions": [
                                {"key": ZONE_KEY, "operator": "In", "values": ["zone-a"]}
                            ]
                        },
                    }
                ]
            }
        }
    ),
    st.just(
        {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {}, "topologyKey": ZONE_KEY}
                ]
            }
        }
    ),
)

pod_shapes = st.fixed_dictionaries(
    {
        "rtype": st.sampled_from(["master", "worker"]),
        "index": st.integers(0, 5),
        "owners": owners,
    },
    optional={
        "generate_name_only": st.just(True),
        "labels": st.dictionaries(label_keys, label_values, max_size=4),
        "annotations": st.dictionaries(
            st.sampled_from(["podium.dev/zone", "podium.dev/reason", "podium.dev/skip", "ü"]),
            st.sampled_from(["true", "zone-a", "", "ü" * 5]),
            max_size=3,
        ),
        "affinity": affinities,
        "node_selector": st.dictionaries(st.sampled_from([ZONE_KEY, "gpu"]), zones, max_size=2),
        "host_network": st.booleans(),
        "requests": st.dictionaries(
            st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
            st.sampled_from(["1", "500m", "1Gi", "0", "1e3", "-1", "9" * 30]),
            max_size=3,
        ),
        "tolerations": st.lists(
            st.fixed_dictionaries(
                {
                    "key": st.sampled_from(["gpu", ""]),
                    "operator": st.sampled_from(["Exists", "Equal"]),
                }
            ),
            max_size=2,
        ),
    },
)


def build_pod(shape: dict[str, Any]) -> dict[str, Any]:
    pod = pytorch_pod(JOB, shape["rtype"], shape["index"]).obj()
    meta, spec = pod["metadata"], pod["spec"]
    match shape["owners"]:
        case "none":
            meta.pop("ownerReferences")
        case "job-not-controller":
            meta["ownerReferences"] = [owner(JOB, False)]
        case "two-controllers":
            meta["ownerReferences"] = [owner(OTHER_JOB, True), owner(JOB, True)]
        case "job-and-others":
            meta["ownerReferences"] = [owner(OTHER_JOB, False), owner(JOB, True)]
        case "unknown-kind":
            meta["ownerReferences"] = [{**owner(JOB, True), "kind": "Mystery"}]
        case "wrong-uid":
            meta["ownerReferences"] = [{**owner(JOB, True), "uid": "not-the-job"}]
    if shape.get("generate_name_only"):
        meta["generateName"] = meta.pop("name") + "-"
    meta["labels"].update(shape.get("labels", {}))
    meta["annotations"] = {**meta.get("annotations", {}), **shape.get("annotations", {})}
    if shape.get("affinity") is not None:
        spec["affinity"] = shape["affinity"]
    if shape.get("node_selector"):
        spec["nodeSelector"] = shape["node_selector"]
    if shape.get("host_network"):
        spec["hostNetwork"] = True
    if shape.get("requests"):
        spec["containers"][0]["resources"] = {"requests": shape["requests"]}
    if shape.get("tolerations"):
        spec["tolerations"] = shape["tolerations"]
    return pod


envelopes = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["admission.k8s.io/v1beta1", "admission.k8s.io/v2", ""]),
        "kind": st.sampled_from(["AdmissionReviewList", "Pod", ""]),
        "drop_uid": st.just(True),
        "uid": unicode_text,
        "operation": st.sampled_from(["UPDATE", "DELETE", "CONNECT", "PATCH"]),
        "subResource": st.sampled_from(["status", "binding", "ephemeralcontainers", "exec"]),
        "dryRun": st.booleans(),
        "requestKind": st.sampled_from(["Deployment", "Binding", "PodExecOptions"]),
    },
)


def build_review(pod: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    doc = reviews.review_for_pod(copy.deepcopy(pod), uid="fuzz")
    req = doc["request"]
    for key in ("apiVersion", "kind"):
        if key in env:
            doc[key] = env[key]
    for key in ("uid", "operation", "subResource", "dryRun"):
        if key in env:
            req[key] = env[key]
    if env.get("drop_uid"):
        req.pop("uid")
    if "requestKind" in env:
        req["kind"] = {"group": "", "version": "v1", "kind": env["requestKind"]}
    if req.get("operation") == "UPDATE":
        req["oldObject"] = copy.deepcopy(pod)
    if req.get("operation") == "DELETE":
        req["oldObject"], req["object"] = req["object"], None
    return doc


def check(response: httpx.Response, doc: dict[str, Any], pod: dict[str, Any]) -> str:
    """Assert the promise; return what kind of answer it was."""
    assert response.status_code < 500, response.text
    assert response.status_code in (200, 400), response.text
    body = response.json()
    if response.status_code == 400:
        assert isinstance(body["error"], str) and body["error"]
        return "400"
    uid = doc["request"]["uid"]
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    resp = body["response"]
    assert resp["uid"] == uid
    assert ("patch" in resp) == ("patchType" in resp)
    if any(FAIL_OPEN in w for w in resp.get("warnings", [])):
        assert "patch" not in resp
        return "200 fail-open"
    if "patch" not in resp:
        return "200 unchanged" if resp["allowed"] else "200 denied"
    ops = orjson.loads(base64.b64decode(resp["patch"]))
    patched = jsonpatch.apply_patch(pod, ops)  # the apiserver would apply it: it must apply
    terms = (
        ((patched["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    facts = resp.get("auditAnnotations") or {}
    zone = facts.get("zone") if facts.get("outcome") == "pinned" else None
    if zone:
        assert patched["metadata"]["annotations"]["podium.dev/zone"] == zone
        # Terms are ORed: every one of them must carry the zone, or the pin can be bypassed.
        assert terms and all(
            {"key": ZONE_KEY, "operator": "In", "values": [zone]} in t.get("matchExpressions", [])
            for t in terms
        ), terms
    return "200 patched"


# -- the properties ------------------------------------------------------------------------------


@hsettings(max_examples=700)
@given(shape=pod_shapes)
def test_any_pod_shape_in_a_create_gets_a_valid_answer(app: App, shape: dict[str, Any]) -> None:
    pod = build_pod(shape)
    doc = build_review(pod, {})
    outcome = check(app.post(json.dumps(doc).encode()), doc, pod)
    COUNTS["pod shapes"] += 1
    COUNTS[f"pod shapes → {outcome}"] += 1
    # The apiserver can send every one of these shapes (validation runs after mutating
    # admission): each must be decided, none may make podium fail open.
    assert outcome != "200 fail-open"


@hsettings(max_examples=500)
@given(shape=pod_shapes, env=envelopes)
def test_any_envelope_gets_a_valid_answer_or_a_clear_400(
    app: App, shape: dict[str, Any], env: dict[str, Any]
) -> None:
    pod = build_pod(shape)
    doc = build_review(pod, env)
    response = app.post(json.dumps(doc).encode())
    if "drop_uid" in env or env.get("uid") == "":
        assert response.status_code == 400
    elif env.keys() & {"apiVersion", "kind"}:
        assert response.status_code == 400, response.text
    outcome = check(response, doc, pod)
    assert outcome != "200 fail-open"
    COUNTS["envelopes"] += 1
    COUNTS[f"envelopes → {outcome}"] += 1
    if response.status_code == 200 and (
        env.get("operation") in ("DELETE", "CONNECT") or "subResource" in env
    ):
        assert "patch" not in response.json()["response"]  # nothing but pod creations is mutated


# -- huge bodies -------------------------------------------------------------------------------

MiB = 1024 * 1024


def padded_review(size: int) -> bytes:
    """A valid review for a job pod whose body is exactly ``size`` bytes (an annotation pads)."""
    pod = pytorch_pod(JOB, "worker", 0).obj()
    pod["metadata"]["annotations"]["padding"] = ""
    base = len(orjson.dumps(reviews.review_for_pod(pod, uid="huge")))
    pod["metadata"]["annotations"]["padding"] = "p" * (size - base)
    body = orjson.dumps(reviews.review_for_pod(pod, uid="huge"))
    assert len(body) == size
    return body


@pytest.mark.parametrize(
    ("size", "status"),
    [
        (3 * MiB - 4096, 200),
        (3 * MiB, 200),
        (3 * MiB + 1, 413),
        (6 * MiB, 413),
    ],
    ids=["3MiB-4KiB", "3MiB", "3MiB+1", "6MiB"],
)
def test_huge_bodies(app: App, size: int, status: int) -> None:
    body = padded_review(size)
    response = app.post(body)
    assert response.status_code == status, response.text[:200]
    COUNTS["huge bodies"] += 1
    if status == 200:
        assert response.json()["response"]["uid"] == "huge"
    else:
        assert "exceeds" in response.json()["error"]


def test_a_huge_body_without_a_length_is_cut_off(app: App) -> None:
    """Streamed (chunked, no Content-Length): refused once the bytes read pass the limit."""

    async def chunks() -> Any:
        for _ in range(8):
            yield b" " * MiB

    response = app.runner.run(
        app.client.post("/mutate", content=chunks(), headers={"content-type": "application/json"})
    )
    assert response.status_code == 413
    COUNTS["huge bodies"] += 1


def test_the_audit_trail_saw_no_exception(app: App) -> None:
    """Runs last in the module: nothing the fuzzers sent escaped as an internal error."""
    assert COUNTS["pod shapes"] > 0
    internal = [r for r in app.sink.entries if "internal error" in str(r.get("error", ""))]
    assert internal == []
