# ruff: noqa: E501 - the metrics text is quoted as the apiserver exposes it
"""The burst study's report (``bench/latency``): the committed tables are what the report code
makes of the committed raw results, and the figures are read from the apiserver's histogram as
it is exposed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.latency import burst, report

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"

METRICS = """\
# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit",le="0.005"} 3
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit",le="0.025"} 4
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit",le="+Inf"} 4
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit"} 0.02
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit"} 4
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other.example",operation="CREATE",rejected="false",type="admit",le="0.005"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other.example",operation="CREATE",rejected="false",type="admit",le="0.025"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other.example",operation="CREATE",rejected="false",type="admit",le="+Inf"} 9
apiserver_admission_webhook_admission_duration_seconds_sum{name="other.example",operation="CREATE",rejected="false",type="admit"} 90
apiserver_admission_webhook_admission_duration_seconds_count{name="other.example",operation="CREATE",rejected="false",type="admit"} 9
"""


def _results() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DOCS / burst.RESULTS).read_text())
    return data


def test_the_committed_tables_are_rendered_from_the_committed_results() -> None:
    document = (DOCS / burst.DOCUMENT).read_text()
    assert report.document(_results(), document) == document
    assert report.markdown(_results()) in document


def test_the_committed_run_has_both_modes_and_every_pod() -> None:
    runs = {run["mode"]: run for run in _results()["runs"]}
    assert set(runs) == set(burst.MODES)
    spec = _results()["spec"]
    for run in runs.values():
        assert run["pods"] == spec["gangs"] * spec["pods"]
        assert run["histogram"]["count"] >= run["pods"]


def test_only_podiums_webhook_is_read_and_the_5ms_share_comes_from_its_bucket() -> None:
    hist = burst.histogram(METRICS)
    assert hist == {"buckets": {"0.005": 3, "0.025": 4, "+Inf": 4}, "count": 4, "sum": 0.02}
    assert report.share_within(hist) == 0.75
    assert report.mean_ms(hist) == 5.0


def test_the_burst_is_what_the_histogram_gained() -> None:
    before = burst.histogram(METRICS)
    after = {"buckets": {"0.005": 5, "0.025": 8, "+Inf": 10}, "count": 10, "sum": 0.5}
    gained = burst.difference(after, before)
    assert gained == {"buckets": {"0.005": 2, "0.025": 4, "+Inf": 6}, "count": 6, "sum": 0.48}
    assert report.share_within(gained) == 2 / 6


def test_no_calls_or_no_such_bucket_is_shown_as_missing_not_zero() -> None:
    empty = {"buckets": {}, "count": 0, "sum": 0.0}
    assert report.share_within(empty) is None and report.mean_ms(empty) is None
    assert report.share_within({"buckets": {"0.01": 1}, "count": 1, "sum": 0.001}) is None


def _event(verb: str, resource: str, agent: str, namespace: str = "ns", **ref: str) -> Any:
    return {
        "verb": verb,
        "userAgent": agent,
        "objectRef": {"resource": resource, "namespace": namespace, **ref},
        "responseStatus": {"code": 201},
    }


def test_writes_count_podiums_not_the_bench_nor_the_control_plane() -> None:
    events = [
        _event("create", "configmaps", "OpenAPI-Generator/37.0.2/python"),  # before the burst
        _event("create", "pods", "OpenAPI-Generator/37.0.2/python"),
        _event("create", "pytorchjobs", "OpenAPI-Generator/37.0.2/python"),
        _event("patch", "pods", "kube-scheduler/v1.37.2", subresource="status"),
        _event("create", "configmaps", "kube-controller-manager/v1.37.2"),
        _event("get", "configmaps", "OpenAPI-Generator/37.0.2/python"),
        _event("create", "ciliumnetworkpolicies", "OpenAPI-Generator/37.0.2/python", "other"),
        _event("create", "configmaps", "OpenAPI-Generator/37.0.2/python"),
        _event("patch", "pods", "OpenAPI-Generator/37.0.2/python"),
    ]
    assert burst._writes(events, "ns", since=1) == {
        "create configmaps 201": 1,
        "patch pods 201": 1,
    }
