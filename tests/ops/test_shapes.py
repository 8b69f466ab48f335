"""`shapes.problem`: a hand-written object against the Kubernetes type the client generates."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest
import yaml

from scripts import podtypes as generator
from tests.scenarios import pytorch_pod, pytorchjob
from webhook.ops import podtypes, shapes


def pod(**spec: Any) -> dict[str, Any]:
    obj = pytorch_pod(pytorchjob(), "worker", 0).obj()
    obj["spec"].update(spec)
    return obj


def test_a_pod_as_the_apiserver_sends_it_passes() -> None:
    assert shapes.problem(pod(), "V1Pod", "") is None


@pytest.mark.parametrize(
    ("spec", "found"),
    [
        ({"containers": 7}, "spec.containers must be a list, not a number"),
        ({"containers": "x"}, "spec.containers must be a list, not a string"),
        ({"containers": {"": ""}}, "spec.containers must be a list, not an object"),
        ({"containers": [None]}, "spec.containers[0] must not be null"),
        ({"containers": [{"name": 1}]}, "spec.containers[0].name must be a string, not a number"),
        ({"containers": [{"name": "a", "env": [{"name": []}]}]}, "env[0].name must be a string"),
        ({"priority": True}, "spec.priority must be an integer, not a boolean"),
        ({"priority": 1.5}, "spec.priority must be an integer, not a number"),
        ({"nodeSelector": {"a": None}}, "spec.nodeSelector.a must not be null"),
        ({"tolerations": {"key": "a"}}, "spec.tolerations must be a list, not an object"),
        (
            {"containers": [{"name": "a", "resources": {"limits": {"cpu": []}}}]},
            "resources.limits.cpu must be a string or a number, not a list",
        ),
    ],
)
def test_a_wrong_json_type_is_named_with_its_path(spec: dict[str, Any], found: str) -> None:
    problem = shapes.problem(pod(**spec), "V1Pod", "")
    assert problem is not None and found in problem


def test_what_the_apiserver_takes_passes() -> None:
    quantities = {"limits": {"cpu": 2, "memory": "1Gi"}, "requests": {"cpu": 0.5}}
    assert shapes.problem(pod(overhead={"cpu": 1}), "V1Pod", "") is None
    assert (
        shapes.problem(pod(containers=[{"name": "a", "resources": quantities}]), "V1Pod", "")
        is None
    )
    assert shapes.problem(pod(affinity=None, schedulerName=None), "V1Pod", "") is None
    assert shapes.problem(pod(futureField={"any": ["thing"]}), "V1Pod", "") is None


def test_a_yaml_timestamp_is_a_timestamp() -> None:
    """YAML loads ``creationTimestamp: 2026-12-01T12:00:00Z`` as a datetime, not a string."""
    obj = yaml.safe_load("metadata: {name: p, creationTimestamp: 2026-12-01T12:00:00Z}")
    assert shapes.problem(obj, "V1Pod", "") is None
    assert shapes.problem({"metadata": {"name": obj["metadata"]["creationTimestamp"]}}, "V1Pod", "")


def test_the_path_starts_where_the_caller_says() -> None:
    problem = shapes.problem(pod(containers=7), "V1Pod", "request.object")
    assert problem == "request.object.spec.containers must be a list, not a number"


def test_without_nulls_drops_null_fields_and_keeps_null_items() -> None:
    value = {"a": None, "b": {"c": None, "d": 1}, "e": [None, {"f": None}]}
    assert shapes.without_nulls(value) == {"b": {"d": 1}, "e": [None, {}]}


def test_the_table_is_the_clients() -> None:
    """webhook/ops/podtypes.py is generated from the installed Kubernetes client. With the very
    version it was made from it must be identical; with another, every type and field both know
    must agree (a newer client may add fields: `python -m scripts.podtypes` takes them in)."""
    installed = generator.types()
    if kubernetes.__version__ == podtypes.CLIENT_VERSION:
        assert installed == podtypes.TYPES, "run python -m scripts.podtypes"
        return
    for name, fields in podtypes.TYPES.items():
        known = installed.get(name, {})
        assert {k: v for k, v in fields.items() if k in known} == {
            k: v for k, v in known.items() if k in fields
        }, name
