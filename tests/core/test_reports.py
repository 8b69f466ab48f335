"""podium's Reports (webhook/core/reports.py), pure: one per opted-in namespace, one result per
job read from the view, bounded, the summary counting the results, valid for the real CRD
(testbed/crds/openreports.io_reports.yaml), and the same body for the same cluster. Written by the
leader against the API twin: tests/serve/test_reports.py."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import schemas
from tests.builders import namespace
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, labels, policies, reports
from webhook.core.policies import Manifest
from webhook.core.release import TOO_BIG_SPREAD
from webhook.core.settings import Settings
from webhook.core.view import ClusterView

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SHADOW = "team-s"
CRD = "openreports.io_reports.yaml"


def view_of(*objects: dict[str, Any]) -> ClusterView:
    return ClusterView.from_objects(
        objects, zone_label="topology.kubernetes.io/zone", kept=adapters.KEPT
    )


def shadow_job(name: str, nodes: list[str | None]) -> list[dict[str, Any]]:
    """A PyTorchJob in the shadow namespace and its pods as the operator created them (podium
    admitted them unchanged), each on the given node (None: not bound)."""
    pj = pytorchjob(name, workers=len(nodes) - 1)
    pj["metadata"]["namespace"] = SHADOW
    pj["metadata"]["creationTimestamp"] = NOW.isoformat()
    pods = []
    for index, node in enumerate(nodes):
        rtype, i = ("master", 0) if index == 0 else ("worker", index - 1)
        pod = pytorch_pod(pj, rtype, i).uid()
        if node:
            pod.bound(node)
        built = pod.obj()
        built["metadata"]["namespace"] = SHADOW
        pods.append(built)
    return [pj, *pods]


def enforced_job(
    name: str,
    nodes: list[str | None],
    *,
    zone: str | None = "zone-c",
    reason: str = "best-fit",
    decided: datetime = NOW,
    admitted: int | None = None,
    gated: bool = False,
) -> list[dict[str, Any]]:
    """A PyTorchJob in NS whose pods podium admitted (its label and annotations; the first
    ``admitted`` of them only), the record it wrote and its policy."""
    pj = pytorchjob(name, workers=len(nodes) - 1)
    uid = pj["metadata"]["uid"]
    pods = []
    for index, node in enumerate(nodes):
        rtype, i = ("master", 0) if index == 0 else ("worker", index - 1)
        pod = pytorch_pod(pj, rtype, i).uid()
        if admitted is None or index < admitted:
            pod.label(labels.JOB, uid).annotate(labels.ZONE, zone or "").annotate(
                labels.REASON, reason
            )
        if node:
            pod.bound(node)
        if gated:
            pod.gate()
        pods.append(pod.obj())
    gang = adapters.recognise(pods[0], NS, view_of(*base_cluster(pj, *pods)))
    assert gang is not None
    record = policies.build_record(
        gang=gang,
        namespace=NS,
        zone=zone,
        reason=reason,
        detail="",
        decided_at=decided.isoformat(timespec="seconds"),
    )
    policy = policies.build_policy(
        gang=gang,
        namespace=NS,
        mode=Settings().policy_mode,
        scope=Settings().policy_scope,
        zone=zone,
        record_zone=zone,
    )
    return [pj, *pods, *([] if gated else [record]), *([policy] if policy and not gated else [])]


def cluster(*objects: dict[str, Any]) -> ClusterView:
    return view_of(
        *base_cluster(namespace(SHADOW, enabled=False, **{labels.ENABLED: "shadow"})), *objects
    )


def build(view: ClusterView, **fields: Any) -> dict[str, Manifest]:
    return reports.build(view, Settings(**fields))


def only(body: Manifest) -> dict[str, Any]:
    (result,) = body["results"]
    return dict(result)


# -- which namespaces -------------------------------------------------------------------------


def test_one_report_per_opted_in_namespace_with_a_job_and_none_elsewhere() -> None:
    assert build(cluster()) == {}  # no job: nothing to report
    elsewhere = shadow_job("x", ["a-1"])
    for obj in elsewhere:
        obj["metadata"]["namespace"] = "sandbox"  # not opted in
    found = build(cluster(*shadow_job("s", ["a-1"]), *enforced_job("e", ["c-1"]), *elsewhere))
    assert sorted(found) == [NS, SHADOW]
    assert found[NS]["metadata"]["labels"][reports.MODE_LABEL] == "enforce"
    assert found[SHADOW]["metadata"]["labels"][reports.MODE_LABEL] == "shadow"
    for ns, body in found.items():
        assert body["metadata"]["name"] == reports.NAME and body["metadata"]["namespace"] == ns
        assert len(body["results"]) == 1 and sum(body["summary"].values()) == 1
        assert body["scope"] == {"apiVersion": "v1", "kind": "Namespace", "name": ns}
        assert not schemas.crd_errors(CRD, "v1alpha1", body)


def test_namespaces_podium_may_not_write_get_none() -> None:
    view = cluster(*shadow_job("s", ["a-1"]), *enforced_job("e", ["c-1"]))
    assert sorted(build(view, writable_namespaces=frozenset({SHADOW}))) == [SHADOW]


def test_report_max_results_zero_writes_none() -> None:
    assert build(cluster(*shadow_job("x", ["a-1", "b-1"])), report_max_results=0) == {}


# -- shadow -----------------------------------------------------------------------------------


def test_shadow_a_split_job_fails_and_says_podium_would_have_kept_it_together() -> None:
    body = build(cluster(*shadow_job("llama", ["a-1", "b-1"])))[SHADOW]
    result = only(body)
    assert result["result"] == "fail" and result["rule"] == "would-keep-together"
    assert "zone-a (1), zone-b (1)" in result["message"]
    assert result["properties"]["zones"] == "zone-a=1,zone-b=1"
    assert result["properties"]["mode"] == "shadow"
    assert result["resources"][0]["kind"] == "PyTorchJob"
    assert result["resources"][0]["name"] == "llama"
    assert result["timestamp"] == {"seconds": int(NOW.timestamp()), "nanos": 0}
    assert body["summary"] == {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    assert not schemas.crd_errors(CRD, "v1alpha1", body)


def test_shadow_one_zone_passes_and_unbound_is_skipped() -> None:
    body = build(cluster(*shadow_job("kept", ["c-1", "c-2"]), *shadow_job("new", [None, None])))[
        SHADOW
    ]
    by_job = {r["resources"][0]["name"]: r for r in body["results"]}
    assert by_job["kept"]["result"] == "pass" and "zone-c (2)" in by_job["kept"]["message"]
    assert by_job["new"]["result"] == "skip" and by_job["new"]["rule"] == "not-bound"
    assert body["summary"]["pass"] == 1 and body["summary"]["skip"] == 1


# -- enforce ----------------------------------------------------------------------------------


def test_enforce_a_pinned_job_in_its_zone_passes_with_its_record_and_policy() -> None:
    objects = enforced_job("llama", ["c-1", "c-2"])
    result = only(build(cluster(*objects))[NS])
    assert result["result"] == "pass" and result["rule"] == "one-zone"
    assert "pinned to zone-c (best-fit)" in result["message"]
    policy = next(o for o in objects if o["kind"] == "CiliumNetworkPolicy")
    assert policy["metadata"]["name"] in result["message"]
    assert result["properties"]["policies"] == policy["metadata"]["name"]
    assert result["properties"]["zone"] == "zone-c"


def test_enforce_a_split_job_fails() -> None:
    result = only(build(cluster(*enforced_job("llama", ["a-1", "c-1"])))[NS])
    assert result["result"] == "fail" and result["rule"] == "split"
    assert "podium recorded zone zone-c" in result["message"]
    assert result["severity"] == "high"


def test_enforce_a_gang_spread_on_purpose_warns() -> None:
    objects = enforced_job("big", ["a-1", "c-1"], zone=None, reason=TOO_BIG_SPREAD)
    result = only(build(cluster(*objects))[NS])
    assert (result["result"], result["rule"]) == ("warn", "spread")


def test_enforce_pods_admitted_without_podium_warn() -> None:
    result = only(build(cluster(*enforced_job("llama", ["c-1", "c-2"], admitted=1)))[NS])
    assert (result["result"], result["rule"]) == ("warn", "not-admitted")
    assert result["message"].startswith("1 of 2 pod(s) were admitted without podium")


def test_enforce_a_held_gang_is_skipped() -> None:
    result = only(build(cluster(*enforced_job("llama", [None, None], zone=None, gated=True)))[NS])
    assert (result["result"], result["rule"]) == ("skip", "held")
    assert result["properties"]["held"] == "2"


@pytest.mark.parametrize("on", ["job", "pod"])
def test_a_job_annotated_skip_is_skipped_not_blamed(on: str) -> None:
    objects = enforced_job("llama", ["a-1", "c-1"], admitted=0)
    target = objects[0] if on == "job" else objects[1]
    target["metadata"].setdefault("annotations", {})[labels.SKIP] = "true"
    result = only(build(cluster(*objects))[NS])
    assert (result["result"], result["rule"]) == ("skip", "skipped")


def test_enforce_a_gang_released_unpinned_warns() -> None:
    objects = enforced_job("llama", ["a-1", "a-1"], zone=None, reason="no-fit-unpinned")
    result = only(build(cluster(*objects))[NS])
    assert (result["result"], result["rule"]) == ("warn", "unpinned")


def test_a_job_of_another_namespace_is_not_in_this_report() -> None:
    found = build(cluster(*shadow_job("llama", ["a-1", "b-1"]), *enforced_job("e", ["c-1"])))
    assert [r["resources"][0]["name"] for r in found[NS]["results"]] == ["e"]


# -- bounds and stability ---------------------------------------------------------------------


def test_the_newest_decisions_are_kept_and_the_summary_counts_them() -> None:
    objects = [
        o
        for i in range(5)
        for o in enforced_job(f"job-{i}", ["c-1"], decided=NOW - timedelta(hours=i))
    ]
    body = build(cluster(*objects), report_max_results=3)[NS]
    assert [r["resources"][0]["name"] for r in body["results"]] == ["job-0", "job-1", "job-2"]
    assert body["summary"]["pass"] == 3 and sum(body["summary"].values()) == 3
    assert body["configuration"] == {"limits": {"maxResults": 3}}


def test_the_same_cluster_builds_the_same_body_and_same_says_so() -> None:
    objects = [*enforced_job("llama", ["c-1", "c-2"]), *shadow_job("s", ["a-1", "b-1"])]
    first, second = build(cluster(*objects)), build(cluster(*copy.deepcopy(objects)))
    assert first == second
    for ns, body in first.items():
        there = copy.deepcopy(body)
        there["metadata"].update(resourceVersion="7", uid="u", creationTimestamp="x")
        assert reports.same(there, second[ns])
        there["results"] = []
        assert not reports.same(there, second[ns])
    assert not reports.same(None, first[NS])


def test_rows_read_back_what_was_written() -> None:
    objects = [*enforced_job("llama", ["c-1", "c-2"]), *shadow_job("s", ["a-1", "b-1"])]
    bodies = build(cluster(*objects))
    found = reports.rows(list(bodies.values()))
    assert [(r.namespace, r.mode, r.job, r.result) for r in found] == [
        (NS, "enforce", "PyTorchJob/llama", "pass"),
        (SHADOW, "shadow", "PyTorchJob/s", "fail"),
    ]
    assert found[1].zones == "zone-a=1,zone-b=1"


# -- whatever the cluster holds ----------------------------------------------------------------

_FIELDS = ("gang", "zone", "reason", "decidedAt", "job", "jobUID", "demand", "zoneChooser")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(st.sampled_from(["a-1", "b-1", "c-1", "gone", None]), min_size=1, max_size=6),
    admitted=st.integers(0, 6),
    gated=st.booleans(),
    shadow=st.booleans(),
    max_results=st.integers(1, 4),
    data=st.dictionaries(st.sampled_from(_FIELDS), st.text(max_size=12), max_size=4),
)
def test_any_cluster_yields_valid_bounded_reports(
    nodes: list[str | None],
    admitted: int,
    gated: bool,
    shadow: bool,
    max_results: int,
    data: dict[str, str],
) -> None:
    """Whatever the pods' nodes, and whatever strings podium's record holds (a ConfigMap's data
    is strings, whoever edited it): one result per job at most ``max_results``, a summary that
    counts them, and a body the real CRD accepts."""
    objects = (
        shadow_job("s", nodes)
        if shadow
        else enforced_job("e", nodes, admitted=admitted, gated=gated)
    )
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            obj["data"].update(data)
    bodies = build(cluster(*objects), report_max_results=max_results)
    assert sum(len(body["results"]) for body in bodies.values()) == 1  # the one job
    for body in bodies.values():
        assert len(body["results"]) <= max_results
        counted = {r: sum(1 for x in body["results"] if x["result"] == r) for r in reports.RESULTS}
        assert body["summary"] == counted
        assert not schemas.crd_errors(CRD, "v1alpha1", body)


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"namespace": "x"}, "results": "nope"},
        {"metadata": {"namespace": "x"}, "results": [7, None, {"resources": "x"}]},
        {"metadata": {"namespace": "x"}, "results": [{"timestamp": {"seconds": 10**20}}]},
        {"metadata": {"namespace": "x"}, "results": [{"timestamp": {"seconds": True}}]},
    ],
)
def test_rows_of_any_report_never_raise(obj: dict[str, Any]) -> None:
    for row in reports.rows([obj]):
        assert row.namespace == "x" and row.decided is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "results",
                    "resources",
                    "properties",
                    "timestamp",
                    "seconds",
                    "result",
                    "kind",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(body=st.dictionaries(st.sampled_from(["results", "metadata", "summary"]), _json))
def test_rows_of_any_object_anyone_labelled_as_podiums_never_raise(body: dict[str, Any]) -> None:
    """``podium report --from-cluster`` reads whatever carries podium's labels: any JSON."""
    found = reports.rows([body])
    results = body.get("results")
    assert len(found) <= (len(results) if isinstance(results, list) else 0)
    assert all(isinstance(r.job, str) and isinstance(r.result, str) for r in found)
