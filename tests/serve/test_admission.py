"""Admissions end to end over the in-memory API twin: races, dry runs, and failing open."""

from __future__ import annotations

import asyncio
import base64
import random
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.builders import PIN, PodBuilder, pinning
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, labels, reviews
from webhook.core.audit import AuditEntry
from webhook.core.objects import key_of
from webhook.core.settings import PolicyMode, Settings, ZoneChooser
from webhook.core.view import ClusterView
from webhook.kube import errors, protocols, twins
from webhook.serve import admission, audit


def body_for(pod: dict[str, Any], *, uid: str = "u-1", dry_run: bool = False) -> bytes:
    doc = reviews.review_for_pod(pod, uid=uid, dry_run=dry_run)
    return orjson.dumps(doc)


def make(
    objects: list[dict[str, Any]],
    api: protocols.Api | None,
    now: datetime,
    settings: Settings | None = None,
) -> tuple[admission.Admitter, audit.MemorySink, ClusterView]:
    settings = settings or PIN
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    sink = audit.MemorySink()
    return (
        admission.Admitter(
            view=lambda: view, api=api, settings=settings, sink=sink, clock=lambda: now
        ),
        sink,
        view,
    )


def response(answer: admission.Answer) -> dict[str, Any]:
    assert answer.status == 200
    resp: dict[str, Any] = answer.body["response"]
    return resp


async def test_first_pod_creates_record_then_policy(now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    admitter, sink, _ = make(base_cluster(pj), api, now)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj())))
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert [c[:2] for c in api.calls] == [
        ("create", "ConfigMap"),
        ("create", "CiliumNetworkPolicy"),
    ]
    assert sink.entries[0]["effects"] == [
        {"kind": "ConfigMap", "name": resp["auditAnnotations"]["policy"], "outcome": "created"},
        {
            "kind": "CiliumNetworkPolicy",
            "name": resp["auditAnnotations"]["policy"],
            "outcome": "created",
        },
    ]


@pytest.mark.parametrize("seed", range(5))
async def test_concurrent_first_admissions_through_two_replicas_agree(
    seed: int, now: datetime
) -> None:
    """Every pod of one job admitted at once through two replicas whose views differ: one zone."""
    rng = random.Random(seed)
    pj = pytorchjob(workers=7)  # 64 GPUs: fits only zone-c, unless a replica's view says otherwise
    api = twins.InMemoryApi(delay=0.001)
    replica_a, sink_a, _ = make(base_cluster(pj), api, now)
    # Replica B's view is stale: zone-c looks full to it, so left alone it would pick another zone.
    hogs = [PodBuilder("other", name=f"hog-{i}").gpus(8).bound(f"c-{i}").obj() for i in range(8)]
    replica_b, sink_b, _ = make(base_cluster(pj, *hogs), api, now)
    pods = [pytorch_pod(pj, "master").obj()] + [
        pytorch_pod(pj, "worker", i).obj() for i in range(7)
    ]
    rng.shuffle(pods)
    answers = await asyncio.gather(
        *[
            rng.choice([replica_a, replica_b]).admit(body_for(p, uid=f"u-{i}"))
            for i, p in enumerate(pods)
        ]
    )
    zones = {response(a)["auditAnnotations"].get("zone") for a in answers}
    assert len(zones) == 1 and None not in zones
    kinds = sorted(k[1] for k in api.objects)
    assert kinds == ["CiliumNetworkPolicy", "ConfigMap"]
    records = sink_a.entries + sink_b.entries
    assert len(records) == 8 and {r["zone"] for r in records} == zones
    assert all(r["outcome"] == "pinned" for r in records)
    # The race really happened: all eight tried to create the record and one won. Replica B,
    # left alone, would have chosen another zone: its admissions followed the recorded one.
    outcomes = [e["outcome"] for r in records for e in r["effects"] if e["kind"] == "ConfigMap"]
    assert outcomes.count("created") == 1 and len(outcomes) == 8
    if zones == {"zone-c"}:
        assert outcomes.count("followed") == len(sink_b.entries)
    else:
        assert outcomes.count("followed") == len(sink_a.entries)


async def test_dry_run_creates_nothing_but_mutates(now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    admitter, sink, _ = make(base_cluster(pj), api, now)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj(), dry_run=True)))
    assert "patch" in resp and api.calls == [] and api.objects == {}
    assert sink.entries[0]["dryRun"] is True
    assert {e["outcome"] for e in sink.entries[0]["effects"]} == {"dry-run"}


@pytest.mark.parametrize(
    "fault",
    [
        errors.ApiError("Internal Server Error", status=500),
        errors.ApiError("Too Many Requests", status=429),
    ],
)
async def test_api_failure_fails_open(fault: errors.ApiError, now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    api.fail = lambda _op, _m: fault
    admitter, sink, _ = make(base_cluster(pj), api, now)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj(), uid="u-9")))
    assert resp["uid"] == "u-9" and resp["allowed"] is True
    assert "patch" not in resp
    assert resp["warnings"] == [
        f"podium could not finish (Kubernetes API: {fault}); the pod was admitted unchanged"
    ]
    assert (sink.entries[0]["outcome"], sink.entries[0]["reason"], sink.entries[0]["error"]) == (
        "fail-open",
        admission.API_ERROR,
        f"Kubernetes API: {fault}",
    )


async def test_a_forbidden_write_fails_open_and_says_what_to_bind(now: datetime) -> None:
    """rbac.scope: namespaced and a namespace that opted in without being listed: the
    apiserver refuses podium's write; the pod is admitted unchanged and the record says why."""
    pj = pytorchjob()
    api = twins.InMemoryApi()
    api.fail = lambda _op, _m: errors.ApiError("configmaps is forbidden", status=403)
    admitter, sink, _ = make(base_cluster(pj), api, now)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj())))
    assert resp["allowed"] is True and "patch" not in resp
    namespace = pj["metadata"]["namespace"]
    why = (
        f"Kubernetes API: configmaps is forbidden; podium may not write in namespace "
        f"{namespace}: bind ClusterRole podium-writer there (the chart's rbac.namespaces)"
    )
    assert resp["warnings"] == [f"podium could not finish ({why}); the pod was admitted unchanged"]
    assert (sink.entries[0]["outcome"], sink.entries[0]["error"]) == ("fail-open", why)


async def test_slow_api_fails_open_within_budget(now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi(delay=5)
    settings = pinning(time_budget_seconds=0.05)
    admitter, sink, _ = make(base_cluster(pj), api, now, settings)
    answer = await asyncio.wait_for(admitter.admit(body_for(pytorch_pod(pj).obj())), timeout=1)
    assert "patch" not in response(answer)
    assert sink.entries[0]["reason"] == admission.API_ERROR
    assert "did not answer within 0.05s" in sink.entries[0]["error"]


async def test_missing_cilium_crd_still_pins_and_warns(now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi(missing_kinds=frozenset({"CiliumNetworkPolicy"}))
    admitter, sink, _ = make(base_cluster(pj), api, now)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj())))
    assert resp["auditAnnotations"]["zone"] == "zone-c" and "patch" in resp
    assert "resource is not installed" in resp["warnings"][0]
    assert sink.entries[0]["effects"][1]["outcome"] == "skipped-crd-missing"


async def test_bug_in_the_decision_fails_open(
    now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    pj = pytorchjob()
    admitter, sink, _ = make(base_cluster(pj), twins.InMemoryApi(), now)

    def boom(*_: Any, **__: Any) -> Any:
        raise KeyError("surprise")

    monkeypatch.setattr("webhook.core.engine.decide", boom)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj())))
    assert resp["allowed"] is True and "patch" not in resp
    assert sink.entries[0]["error"] == "internal error: KeyError: 'surprise'"


async def test_no_api_configured_fails_open(now: datetime) -> None:
    pj = pytorchjob()
    admitter, _, _ = make(base_cluster(pj), None, now)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj())))
    assert "patch" not in resp and "no Kubernetes API configured" in resp["warnings"][0]


async def test_before_the_cache_has_synced_the_reason_says_so(now: datetime) -> None:
    """An empty view would answer namespace-not-enabled for every pod: say what it is instead."""
    pj = pytorchjob()
    admitter = admission.Admitter(
        view=lambda: ClusterView(zone_label=labels.ZONE_LABEL, kept=adapters.KEPT),
        api=twins.InMemoryApi(),
        settings=PIN,
        sink=(sink := audit.MemorySink()),
        clock=lambda: now,
        ready=lambda: False,
    )
    answer = await admitter.admit(body_for(pytorch_pod(pj).obj()))
    resp = response(answer)
    assert resp["allowed"] is True and "patch" not in resp
    assert "watch cache has not synced yet" in resp["warnings"][0]
    (record,) = sink.entries
    assert (record["outcome"], record["reason"]) == ("fail-open", "cache-not-synced")
    assert resp["auditAnnotations"]["outcome"] == "fail-open"


async def test_malformed_review_is_a_400(now: datetime) -> None:
    admitter, sink, _ = make(base_cluster(), twins.InMemoryApi(), now)
    answer = await admitter.admit(
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}'
    )
    assert (answer.status, answer.body) == (
        400,
        {"error": "malformed AdmissionReview: the review has no request object"},
    )
    assert sink.entries == []


async def test_audit_sink_failure_does_not_fail_the_admission(now: datetime) -> None:
    class Broken:
        def write(self, record: AuditEntry) -> None:
            raise OSError("disk full")

    pj = pytorchjob()
    settings = PIN
    view = ClusterView.from_objects(
        base_cluster(pj), zone_label=settings.zone_label, kept=adapters.KEPT
    )
    admitter = admission.Admitter(
        view=lambda: view, api=twins.InMemoryApi(), settings=settings, sink=Broken()
    )
    assert "patch" in response(await admitter.admit(body_for(pytorch_pod(pj).obj())))


async def test_later_pods_follow_the_record_after_capacity_changes(now: datetime) -> None:
    """Feeding the created objects back into the view: later pods keep the job's zone."""
    pj = pytorchjob(workers=1)
    api = twins.InMemoryApi()
    admitter, _, view = make(base_cluster(pj), api, now, pinning(policy_mode=PolicyMode.KUBERNETES))
    first = response(await admitter.admit(body_for(pytorch_pod(pj, "master").obj())))
    for obj in api.objects.values():
        view.apply("ADDED", obj)
    for i in range(2):  # zone-b (the best fit) is now full
        view.apply("ADDED", PodBuilder("other", name=f"hog-{i}").gpus(8).bound(f"b-{i + 1}").obj())
    second = response(await admitter.admit(body_for(pytorch_pod(pj, "worker", 0).obj())))
    assert first["auditAnnotations"]["zone"] == second["auditAnnotations"]["zone"] == "zone-b"
    assert second["auditAnnotations"]["reason"] == "recorded"
    assert sorted(k[1] for k in api.objects) == ["ConfigMap", "NetworkPolicy"]
    assert all(key_of(o)[2] == NS for o in api.objects.values())


async def test_trusted_label_is_the_policy_selector(now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    admitter, _, _ = make(base_cluster(pj), api, now)
    answer = await admitter.admit(body_for(pytorch_pod(pj).label(labels.JOB, "forged").obj()))
    assert answer.decision is not None and answer.decision.patched is not None
    key = answer.decision.patched["metadata"]["labels"][labels.JOB]
    policy = next(o for k, o in api.objects.items() if k[1] == "CiliumNetworkPolicy")
    assert (
        key
        == pj["metadata"]["uid"]
        == policy["spec"]["endpointSelector"]["matchLabels"][labels.JOB]
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"metadata": []}, "request.object.metadata must be an object"),
        (
            {"metadata": {"labels": ["a"]}},
            "request.object.metadata.labels must map strings to strings",
        ),
        (
            {"metadata": {"annotations": {"a": 1}}},
            "request.object.metadata.annotations must map strings",
        ),
        ({"metadata": {"ownerReferences": {"a": 1}}}, "ownerReferences must be a list of objects"),
        ({"spec": "none"}, "request.object.spec must be an object"),
    ],
)
async def test_misshapen_pod_is_a_400_that_names_the_field(
    change: dict[str, Any], message: str, now: datetime
) -> None:
    admitter, _, _ = make(base_cluster(), twins.InMemoryApi(), now)
    pod = {**PodBuilder().obj(), **change}
    answer = await admitter.admit(body_for(pod))
    assert answer.status == 400 and message in answer.body["error"]


async def test_fail_open_survives_a_broken_audit_builder(
    now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    api.fail = lambda _op, _m: errors.ApiError("boom", status=500)
    admitter, sink, _ = make(base_cluster(pj), api, now)

    def broken_build(**_: Any) -> Any:
        raise ValueError("bad record")

    monkeypatch.setattr("webhook.core.audit.build", broken_build)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj(), uid="u-7")))
    assert resp["uid"] == "u-7" and resp["allowed"] is True and "patch" not in resp
    assert sink.entries == []


async def test_label_tampering_update_is_refused_with_403(now: datetime) -> None:
    admitter, sink, _ = make(base_cluster(), twins.InMemoryApi(), now)
    doc = reviews.review_for_pod(
        PodBuilder(NS, name="p").label(labels.JOB, "other-job").obj(), uid="u-3"
    )
    doc["request"].update(operation="UPDATE", oldObject=PodBuilder(NS, name="p").obj())
    resp = response(await admitter.admit(orjson.dumps(doc)))
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    assert "cannot be changed afterwards" in resp["status"]["message"]
    assert sink.entries[0]["outcome"] == "denied"


async def test_requests_past_64_bits_are_decided_not_failed_open(now: datetime) -> None:
    pj = pytorchjob(workers=0)
    pod = pytorch_pod(pj).requests(cpu="999999999999999999999999999999").obj()
    api = twins.InMemoryApi()
    admitter, sink, _ = make(base_cluster(pj), api, now)
    resp = response(await admitter.admit(body_for(pod)))
    assert sink.entries[0]["outcome"] != "fail-open", sink.entries[0].get("error")
    assert "patch" in resp
    audit.FileSink(Path("/dev/null")).write(sink.entries[0])  # serialisable


# -- zone-chooser scheduler ----------------------------------------------------------------------

SCHEDULER = Settings(zone_chooser=ZoneChooser.SCHEDULER)


@pytest.mark.parametrize("seed", range(3))
async def test_scheduler_mode_every_pod_joins_one_podgroup_created_once(
    seed: int, now: datetime
) -> None:
    rng = random.Random(seed)
    pj = pytorchjob(workers=3)
    api = twins.InMemoryApi(delay=0.001)
    replicas = [make(base_cluster(pj), api, now, SCHEDULER) for _ in range(2)]
    pods = [pytorch_pod(pj, "master").obj()] + [
        pytorch_pod(pj, "worker", i).obj() for i in range(3)
    ]
    answers = await asyncio.gather(
        *[rng.choice(replicas)[0].admit(body_for(p, uid=f"u-{i}")) for i, p in enumerate(pods)]
    )
    groups = set()
    for answer in answers:
        patch = orjson.loads(base64.b64decode(response(answer)["patch"]))
        assert not any("affinity" in op["path"] for op in patch)
        groups |= {op["value"]["podGroupName"] for op in patch if "schedulingGroup" in op["path"]}
    assert len(groups) == 1
    assert sorted(k[1] for k in api.objects) == ["CiliumNetworkPolicy", "ConfigMap", "PodGroup"]
    records = [r for _, sink, _ in replicas for r in sink.entries]
    assert {r["outcome"] for r in records} == {"grouped"}
    created = [e["outcome"] for r in records for e in r["effects"] if e["kind"] == "PodGroup"]
    assert created.count("created") == 1 and len(created) == 4


async def test_scheduler_mode_dry_run_creates_nothing(now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    admitter, sink, _ = make(base_cluster(pj), api, now, SCHEDULER)
    resp = response(await admitter.admit(body_for(pytorch_pod(pj).obj(), dry_run=True)))
    assert "patch" in resp and api.calls == [] and api.objects == {}
    effects = sink.entries[0]["effects"]
    assert {e["kind"] for e in effects} == {"ConfigMap", "PodGroup", "CiliumNetworkPolicy"}
    assert {e["outcome"] for e in effects} == {"dry-run"}
