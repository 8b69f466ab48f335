"""Kubernetes Events from audit records: which events, on which object, posted off the admission
path through a bounded queue (drops counted), with a fake poster in place of the apiserver."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest

from tests.builders import PIN, pinning
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, audit, reviews
from webhook.core.settings import NoFit, Settings
from webhook.core.view import ClusterView
from webhook.kube import errors, protocols, twins
from webhook.serve import admission, events, server
from webhook.serve.audit import MemorySink
from webhook.serve.metrics import Metrics

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class FakePoster:
    """Records what would be POSTed; ``fail`` decides per event whether the call raises."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.posted: list[events.Event] = []
        self.delay = delay
        self.fail: Callable[[events.Event], Exception | None] = lambda _e: None
        self.names: set[str] = set()

    async def __call__(self, event: events.Event) -> dict[str, Any]:
        await asyncio.sleep(self.delay)
        if (err := self.fail(event)) is not None:
            raise err
        name = event["metadata"]["name"]
        if name in self.names:  # as the apiserver: names are unique per namespace
            raise errors.AlreadyExists(f"events {name!r} already exists", status=409)
        self.names.add(name)
        self.posted.append(event)
        return event

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.posted]


def assert_valid(event: events.Event) -> None:
    """What the apiserver's events.k8s.io/v1 validation checks on create."""
    meta = event["metadata"]
    assert DNS_SUBDOMAIN.match(meta["name"]) and len(meta["name"]) <= 253, meta["name"]
    assert event["apiVersion"] == "events.k8s.io/v1" and event["kind"] == "Event"
    assert QUALIFIED_NAME.match(event["reportingController"])
    assert 0 < len(event["reportingInstance"]) <= 128
    assert 0 < len(event["action"]) <= 128 and 0 < len(event["reason"]) <= 128
    assert len(event["note"].encode()) <= 1024
    assert event["type"] in ("Normal", "Warning")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", event["eventTime"])
    assert event["regarding"]["namespace"] == meta["namespace"]
    assert not {"firstTimestamp", "lastTimestamp", "count", "source"} & event.keys()


def body_for(pod: dict[str, Any], *, uid: str = "u-1", dry_run: bool = False) -> bytes:
    return orjson.dumps(reviews.review_for_pod(pod, uid=uid, dry_run=dry_run))


def admitter_for(
    objects: list[dict[str, Any]],
    api: protocols.Api | None,
    now: datetime,
    recorder: events.EventRecorder,
    settings: Settings | None = None,
) -> admission.Admitter:
    settings = settings or PIN
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    return admission.Admitter(
        view=lambda: view,
        api=api,
        settings=settings,
        sink=MemorySink(),
        clock=lambda: now,
        observe=recorder.observe,
    )


@pytest.fixture
def poster() -> FakePoster:
    return FakePoster()


@pytest.fixture
def recorder(poster: FakePoster, now: datetime) -> events.EventRecorder:
    return events.EventRecorder(poster, instance="podium-7d9f-abcde", clock=lambda: now)


async def drain(recorder: events.EventRecorder) -> None:
    """Run the poster until the queue is empty, then stop it."""
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))
    for _ in range(1000):
        await asyncio.sleep(0)
        if not recorder.queue:
            break
    await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)


def record(**overrides: Any) -> audit.AuditEntry:
    base: audit.AuditEntry = {
        "requestUID": "u-1",
        "namespace": "team-a",
        "pod": "llama-worker-",
        "outcome": "pinned",
        "reason": "best-fit",
        "detail": "the whole gang (32 GPUs) fits in zone-b",
        "zone": "zone-b",
        "job": {
            "framework": "pytorchjob",
            "kind": "PyTorchJob",
            "name": "llama",
            "uid": "1f2d3819-0000-4000-8000-000000000001",
            "gang": "1f2d3819-0000-4000-8000-000000000001",
        },
        "effects": [
            {"kind": "ConfigMap", "name": "podium-pytorchjob-llama-1", "outcome": "created"},
            {
                "kind": "CiliumNetworkPolicy",
                "name": "podium-pytorchjob-llama-1",
                "outcome": "created",
            },
        ],
        "dryRun": False,
        "warnings": [],
    }
    return {**base, **overrides}


# -- which events, on which object -------------------------------------------------------------


async def test_the_first_pod_of_a_job_reports_the_zone_and_the_policy_on_the_job(
    now: datetime, poster: FakePoster, recorder: events.EventRecorder
) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    admitter = admitter_for(base_cluster(pj), api, now, recorder)
    answer = await admitter.admit(body_for(pytorch_pod(pj).obj()))
    assert answer.entry is not None
    zone = answer.entry["zone"]
    await drain(recorder)
    assert poster.reasons() == ["ZonePinned", "PolicyCreated"]
    pinned, policy = poster.posted
    meta = pj["metadata"]
    for event in poster.posted:
        assert_valid(event)
        assert event["type"] == "Normal"
        assert event["metadata"]["namespace"] == NS
        assert event["regarding"] == {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "name": meta["name"],
            "namespace": NS,
            "uid": meta["uid"],
        }
        assert event["reportingController"] == "podium.dev/webhook"
        assert event["reportingInstance"] == "podium-7d9f-abcde"
    assert zone and zone in pinned["note"] and answer.entry["reason"] in pinned["note"]
    assert pinned["related"]["kind"] == "ConfigMap"
    assert policy["related"] == {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "name": answer.entry["effects"][1]["name"],
        "namespace": NS,
    }
    assert {k for k in api.objects if k[1] == "Event"} == set()  # events go to the poster only


async def test_later_pods_of_the_job_report_nothing(
    now: datetime, poster: FakePoster, recorder: events.EventRecorder
) -> None:
    pj = pytorchjob(workers=3)
    admitter = admitter_for(base_cluster(pj), twins.InMemoryApi(), now, recorder)
    for index, role in enumerate(["master", "worker", "worker", "worker"]):
        pod = pytorch_pod(pj, role, max(index - 1, 0)).obj()
        await admitter.admit(body_for(pod, uid=f"u-{index}"))
    await drain(recorder)
    assert poster.reasons() == ["ZonePinned", "PolicyCreated"]


async def test_dry_runs_report_nothing(
    now: datetime, poster: FakePoster, recorder: events.EventRecorder
) -> None:
    pj = pytorchjob()
    admitter = admitter_for(base_cluster(pj), twins.InMemoryApi(), now, recorder)
    await admitter.admit(body_for(pytorch_pod(pj).obj(), dry_run=True))
    assert not recorder.queue
    assert events.build(record(dryRun=True), instance="i", now=now) == []


async def test_a_missing_policy_crd_is_one_warning_per_job(
    now: datetime, poster: FakePoster, recorder: events.EventRecorder
) -> None:
    pj = pytorchjob(workers=2)
    api = twins.InMemoryApi(missing_kinds=frozenset({"CiliumNetworkPolicy"}))
    admitter = admitter_for(base_cluster(pj), api, now, recorder)
    for index in range(3):
        pod = pytorch_pod(pj, "worker", index).obj()
        await admitter.admit(body_for(pod, uid=f"u-{index}"))
    await drain(recorder)
    assert poster.reasons() == ["ZonePinned", "PolicyMissing"]
    missing = poster.posted[1]
    assert_valid(missing)
    assert missing["type"] == "Warning"
    assert "CiliumNetworkPolicy is not installed" in missing["note"]


async def test_failing_open_is_a_warning_on_the_job(
    now: datetime, poster: FakePoster, recorder: events.EventRecorder
) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    api.fail = lambda _op, _m: errors.ApiError("etcdserver: request timed out", status=500)
    admitter = admitter_for(base_cluster(pj), api, now, recorder)
    for index in range(3):  # a burst of fail-opens for one job: one event per minute
        pod = pytorch_pod(pj, "worker", index).obj()
        await admitter.admit(body_for(pod, uid=f"u-{index}"))
    await drain(recorder)
    assert poster.reasons() == ["FailOpen"]
    (event,) = poster.posted
    assert_valid(event)
    assert event["type"] == "Warning"
    assert event["regarding"]["uid"] == pj["metadata"]["uid"]
    assert "etcdserver: request timed out" in event["note"]
    a_minute_later = events.build(
        record(outcome="fail-open", reason="fail-open", effects=[]),
        instance="i",
        now=now + timedelta(minutes=1),
    )
    assert a_minute_later[0]["metadata"]["name"] != event["metadata"]["name"]


async def test_a_fail_open_without_a_job_reports_nothing(now: datetime) -> None:
    assert events.build(record(outcome="fail-open", job=None), instance="i", now=now) == []
    assert events.build(record(namespace=""), instance="i", now=now) == []


def test_following_a_recorded_zone_reports_under_the_same_name_as_creating_it(
    now: datetime,
) -> None:
    created = events.build(record(), instance="a", now=now)
    followed = events.build(
        record(
            reason="recorded",
            effects=[{"kind": "ConfigMap", "name": "podium-x", "outcome": "followed"}],
        ),
        instance="b",
        now=now,
    )
    assert [e["reason"] for e in followed] == ["ZonePinned"]
    # Two replicas report the same decision: the apiserver keeps one (AlreadyExists).
    assert followed[0]["metadata"]["name"] == created[0]["metadata"]["name"]
    exists = events.build(
        record(effects=[{"kind": "ConfigMap", "name": "podium-x", "outcome": "exists"}]),
        instance="b",
        now=now,
    )
    assert exists == []


def test_no_fit_reasons_are_warnings_and_unpinned_gangs_are_reported(now: datetime) -> None:
    (pinned, _policy) = events.build(
        record(reason="no-fit-most-free", detail="no zone has room for 64 GPUs"),
        instance="i",
        now=now,
    )
    assert (pinned["reason"], pinned["type"]) == ("ZonePinned", "Warning")
    (unpinned, _policy) = events.build(
        record(outcome="unpinned", reason="no-fit-unpinned", zone=None), instance="i", now=now
    )
    assert (unpinned["reason"], unpinned["type"]) == ("Unpinned", "Warning")
    assert_valid(unpinned)


def test_a_gang_left_to_the_scheduler_is_reported_as_grouped_not_unpinned(now: datetime) -> None:
    (grouped, _policy) = events.build(
        record(outcome="grouped", reason="scheduler-chooses", zone=None), instance="i", now=now
    )
    assert (grouped["reason"], grouped["type"]) == ("Grouped", "Normal")
    assert "kube-scheduler places the whole gang in one zone" in grouped["note"]
    assert_valid(grouped)


async def test_an_unpinned_job_through_the_admitter(
    now: datetime, poster: FakePoster, recorder: events.EventRecorder
) -> None:
    pj = pytorchjob(workers=20)  # 168 GPUs fit no zone
    settings = pinning(no_fit=NoFit.UNPINNED)
    admitter = admitter_for(base_cluster(pj), twins.InMemoryApi(), now, recorder, settings)
    answer = await admitter.admit(body_for(pytorch_pod(pj).obj()))
    assert answer.entry is not None and answer.entry["outcome"] == "unpinned"
    await drain(recorder)
    assert "Unpinned" in poster.reasons()


def test_a_removed_copied_label_is_a_warning_on_the_pod(now: datetime) -> None:
    """The reconciler's records call for one event: the label it removed; nothing else."""
    unlabelled = record(
        outcome="reconcile",
        reason="label-disowned",
        detail="removed podium.dev/job=1f2d3819-… from pod spy: no job in its controller chain",
        pod="spy",
        zone=None,
        action="unlabel",
        result="unlabelled",
        effects=[{"kind": "Pod", "name": "spy", "namespace": "team-a", "outcome": "unlabelled"}],
    )
    (event,) = events.build(unlabelled, instance="podium-0", now=now)
    assert_valid(event)
    assert (event["reason"], event["type"], event["action"]) == (
        events.JOB_LABEL_REMOVED,
        "Warning",
        "RemoveLabel",
    )
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "spy",
        "namespace": "team-a",
    }
    assert event["related"]["name"] == "llama" and "pod spy" in event["note"]
    failed = {**unlabelled, "result": "failed: forbidden"}
    created = record(outcome="reconcile", action="create", result="created")
    assert events.build(failed, instance="p", now=now) == []
    assert events.build(created, instance="p", now=now) == []


def test_kubernetes_network_policies_are_reported_too(now: datetime) -> None:
    rec = record(
        effects=[
            {"kind": "NetworkPolicy", "name": "podium-pytorchjob-llama-1", "outcome": "created"}
        ]
    )
    (policy,) = events.build(rec, instance="i", now=now)
    assert policy["related"]["apiVersion"] == "networking.k8s.io/v1"


def test_regarding_names_the_jobs_api_version_from_the_record(now: datetime) -> None:
    job = {"framework": "mpijob", "kind": "MPIJob", "name": "j", "uid": "u", "gang": "u"}
    (pinned, _) = events.build(record(job=job), instance="i", now=now)
    assert "apiVersion" not in pinned["regarding"]  # kubectl matches kind, name and uid
    with_version = {**job, "apiVersion": "kubeflow.org/v2beta1"}
    (pinned, _) = events.build(record(job=with_version), instance="i", now=now)
    assert pinned["regarding"]["apiVersion"] == "kubeflow.org/v2beta1"


def test_a_trainjobs_events_regard_the_trainjob_not_its_jobset(now: datetime) -> None:
    """The gang (and the objects' owner) is the TrainJob's JobSet; people look at the TrainJob."""
    job = {
        "framework": "trainjob",
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": "tune",
        "uid": "js-uid",
        "gang": "js-uid",
        "shown": {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": "tune",
            "uid": "tj-uid",
        },
    }
    built = events.build(record(job=job), instance="i", now=now)
    assert [e["reason"] for e in built] == ["ZonePinned", "PolicyCreated"]
    for event in built:
        assert event["regarding"] == {**job["shown"], "namespace": NS}
        assert event["metadata"]["name"].startswith("podium-jobset-tune-")
    assert "TrainJob/tune" in built[0]["note"]


def test_long_names_and_notes_stay_within_the_apiservers_limits(now: datetime) -> None:
    job = {"framework": "jobset", "kind": "JobSet", "name": "n" * 253, "uid": "u", "gang": "u"}
    built = events.build(record(job=job, detail="é" * 2000), instance="x" * 300, now=now)
    assert [e["reason"] for e in built] == ["ZonePinned", "PolicyCreated"]
    for event in built:
        assert_valid(event)
    assert built[0]["note"].endswith("...")


# -- the queue and the poster ------------------------------------------------------------------


def test_observe_only_queues(poster: FakePoster, recorder: events.EventRecorder) -> None:
    recorder.observe(record())
    assert [e["reason"] for e in recorder.queue] == ["ZonePinned", "PolicyCreated"]
    assert poster.posted == []


def test_observe_never_raises_on_a_damaged_record(recorder: events.EventRecorder) -> None:
    recorder.observe({"job": {"name": 5}, "namespace": object(), "effects": "nonsense"})
    recorder.observe({"job": "x"})
    recorder.observe({})
    assert not recorder.queue


async def test_a_full_queue_drops_the_oldest_and_counts_it(now: datetime) -> None:
    poster = FakePoster()
    meter = Metrics()
    recorder = events.EventRecorder(
        poster,
        instance="i",
        queue_size=3,
        clock=lambda: now,
        on_drop=lambda reason: meter.events_dropped.labels(reason=reason).inc(),
    )
    for n in range(3):  # six events into a queue of three
        job = {"kind": "PyTorchJob", "name": f"job-{n}", "uid": f"u{n}", "gang": f"u{n}"}
        recorder.observe(record(job=job))
    assert recorder.dropped == 3
    assert [e["regarding"]["name"] for e in recorder.queue] == ["job-1", "job-2", "job-2"]
    assert b'podium_events_dropped_total{reason="queue-full"} 3.0' in meter.render()
    await drain(recorder)
    assert len(poster.posted) == 3


async def test_failed_posts_are_dropped_with_a_log_line_and_posting_goes_on(
    now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    poster = FakePoster()
    poster.fail = lambda e: (
        errors.ApiError("403: forbidden", status=403) if e["reason"] == "ZonePinned" else None
    )
    dropped: list[str] = []
    recorder = events.EventRecorder(poster, instance="i", clock=lambda: now, on_drop=dropped.append)
    recorder.observe(record())
    await drain(recorder)
    assert poster.reasons() == ["PolicyCreated"]
    assert dropped == ["post-failed"]
    assert "dropped event ZonePinned" in caplog.text and "403: forbidden" in caplog.text


async def test_a_slow_apiserver_costs_one_timeout_per_event(now: datetime) -> None:
    poster = FakePoster(delay=5)
    dropped: list[str] = []
    recorder = events.EventRecorder(
        poster, instance="i", timeout=0.05, clock=lambda: now, on_drop=dropped.append
    )
    recorder.observe(record())
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))
    for _ in range(100):
        await asyncio.sleep(0.02)
        if len(dropped) == 2:
            break
    stop.set()
    await asyncio.wait_for(task, 5)
    assert dropped == ["post-failed", "post-failed"]


async def test_already_existing_events_are_no_drop_and_are_not_posted_again(
    now: datetime, poster: FakePoster
) -> None:
    dropped: list[str] = []
    a = events.EventRecorder(poster, instance="a", clock=lambda: now, on_drop=dropped.append)
    b = events.EventRecorder(poster, instance="b", clock=lambda: now, on_drop=dropped.append)
    a.observe(record())
    b.observe(record())  # another replica reports the same decision
    await drain(a)
    await drain(b)
    assert poster.reasons() == ["ZonePinned", "PolicyCreated"]
    assert dropped == []
    a.observe(record())  # a replica that posted a name once does not call again
    assert not a.queue


async def test_admissions_never_wait_for_the_poster(now: datetime) -> None:
    poster = FakePoster(delay=10)
    recorder = events.EventRecorder(poster, instance="i", clock=lambda: now)
    pj = pytorchjob()
    admitter = admitter_for(base_cluster(pj), twins.InMemoryApi(), now, recorder)
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))
    answer = await asyncio.wait_for(admitter.admit(body_for(pytorch_pod(pj).obj())), 1)
    assert answer.status == 200
    stop.set()
    task.cancel()  # the fake post sleeps 10 s; the real one is bounded by the timeout
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_events_observed_from_another_thread_wake_the_poster(
    now: datetime, poster: FakePoster, recorder: events.EventRecorder
) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.run(stop))
    await asyncio.sleep(0.01)
    thread = threading.Thread(target=recorder.observe, args=(record(),))
    thread.start()
    thread.join()
    for _ in range(100):
        if len(poster.posted) == 2:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert poster.reasons() == ["ZonePinned", "PolicyCreated"]


# -- wiring ------------------------------------------------------------------------------------


@pytest.fixture
async def lifespan_recorder(
    poster: FakePoster, recorder: events.EventRecorder
) -> AsyncIterator[events.EventRecorder]:
    recorder.observe(record())  # queued before the server started
    async with server.serving_lifespan(None, None, recorder)(None):  # type: ignore[arg-type]
        yield recorder


async def test_the_server_lifespan_runs_the_poster(
    lifespan_recorder: events.EventRecorder, poster: FakePoster
) -> None:
    for _ in range(100):
        if len(poster.posted) == 2:
            break
        await asyncio.sleep(0.01)
    assert poster.reasons() == ["ZonePinned", "PolicyCreated"]


@pytest.mark.parametrize("reason", ["coordinator-placed", "members-placed"])
def test_a_job_whose_pods_ran_already_says_the_new_pods_follow_them(
    reason: str, now: datetime
) -> None:
    """A job with pods running before podium admitted it (``core.running``): those pods were
    never pinned, so the event does not say every pod was."""
    detail = "the coordinator runs in zone-b; 3 pod(s) of the job already run (zone-b: 3)"
    (pinned, _policy) = events.build(record(reason=reason, detail=detail), instance="i", now=now)
    assert pinned["reason"] == "ZonePinned" and pinned["type"] == "Normal"
    assert pinned["note"].startswith(
        "the new pods of PyTorchJob/llama are pinned to zone zone-b, where its running pods are ("
    )
    assert "every pod" not in pinned["note"]
    assert_valid(pinned)
