"""The admission server on any JSON at any path of a valid review: never a 5xx.

The same strategy as ``podium review``'s (tests/ops/test_review_any_json.py), against the whole
app in memory, in the pin and the hold mode. The answer is a valid AdmissionReview response or a
400 that says why; and a change that leaves the pod shaped as the apiserver sends pods (checked
against the Kubernetes types, `webhook.ops.shapes`) is decided, never failed open.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests import anyjson
from tests.builders import PIN
from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from tests.serve.test_server import Client, check_answer, connected, post
from webhook.core import adapters, reviews
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import twins
from webhook.ops import shapes
from webhook.serve import admission, audit, server

JOB = pytorchjob()
CASES: dict[str, int] = {"200": 0, "400": 0, "failed open": 0}
IN_POD = {("metadata",), ("spec",)}


def base_review() -> dict[str, Any]:
    """A review of a worker of ``JOB``, with the pod fields podium reads filled in."""
    pod = pytorch_pod(JOB, "worker", 1).obj()
    spec = pod["spec"]
    spec["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "1"}}},
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"memory": "1Gi"}}},
    ]
    spec["overhead"] = {"cpu": "100m"}
    spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": []}]}
                ]
            }
        }
    }
    pod["metadata"].setdefault("annotations", {})["example.com/a"] = "b"
    return reviews.review_for_pod(pod, uid="any-json")


BASE = base_review()
PATHS = sorted(anyjson.paths(BASE), key=repr)


@pytest.fixture(scope="module")
def clients() -> Iterator[dict[str, Client]]:
    """One app per mode for every example (the api twin accumulates the objects it creates)."""
    apps = {}
    for mode, settings in (("pin", PIN), ("hold", Settings())):
        view = ClusterView.from_objects(
            base_cluster(JOB), zone_label=settings.zone_label, kept=adapters.KEPT
        )
        admitter = admission.Admitter(
            view=lambda view=view: view,
            api=twins.InMemoryApi(),
            settings=settings,
            sink=audit.MemorySink(),
        )
        apps[mode] = server.create_app(admitter=admitter, ready=lambda: True)
    with connected(apps["pin"]) as pin, connected(apps["hold"]) as hold:
        yield {"pin": pin, "hold": hold}


@hsettings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changed=anyjson.changed(BASE, PATHS), mode=st.sampled_from(["pin", "hold"]))
def test_any_json_at_any_path_gets_an_answer(
    clients: dict[str, Client], changed: tuple[Any, list[anyjson.Path]], mode: str
) -> None:
    doc, where = changed
    body = json.dumps(doc).encode()
    response = post(clients[mode], body)
    check_answer(response, reviews.request_uid(body))
    CASES[str(response.status_code)] += 1
    if response.status_code != 200:
        return
    warnings = response.json()["response"].get("warnings", [])
    failed_open = any("internal error" in w for w in warnings)
    CASES["failed open"] += failed_open
    in_pod = all(p[:2] == ("request", "object") and p[2:3] in IN_POD for p in where)
    if in_pod and shapes.problem(doc["request"]["object"], "V1Pod", "") is None:
        assert not failed_open, warnings  # a pod the apiserver could send is decided


@pytest.mark.parametrize("containers", [[None], 7, "x", {"": ""}, [7], [{"resources": 3}]])
@pytest.mark.parametrize("mode", ["pin", "hold"])
def test_containers_that_are_not_containers_get_a_400(
    clients: dict[str, Client], containers: Any, mode: str
) -> None:
    """The shapes of the crash in ``podium review``: the server names the field in a 400."""
    doc = json.loads(json.dumps(BASE))
    doc["request"]["object"]["spec"]["containers"] = containers
    response = post(clients[mode], json.dumps(doc).encode())
    assert response.status_code == 400
    assert "request.object.spec.containers" in response.json()["error"]


def test_report_cases() -> None:
    """After the property test (file order): how many answers were 200 and 400."""
    print(f"\nserver cases: {CASES}")  # shown with -s
