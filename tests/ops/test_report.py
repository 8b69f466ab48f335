"""``podium report`` (webhook/ops/report.py): shadow decisions beside where the pods ran — which
jobs split where podium would have kept them together, the GPU-hours they held, namespaces
ranked by what enforcing would gain."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.builders import namespace, pinning
from tests.ops.conftest import UNREACHABLE
from tests.scenarios import NS, pytorch_pod, pytorchjob, zones_8_16_64
from webhook.core import adapters, audit, engine, labels, reviews
from webhook.core.settings import NoFit, Settings
from webhook.core.view import ClusterView
from webhook.ops import report
from webhook.ops.cli import app

SETTINGS = Settings()
NODE_ZONE = {"a-1": "zone-a", "b-1": "zone-b", "b-2": "zone-b", "c-0": "zone-c", "c-1": "zone-c"}


def cluster(*extra: dict[str, Any], ns: str = NS) -> list[dict[str, Any]]:
    return [namespace(ns, enabled=False, **{labels.ENABLED: "shadow"}), *zones_8_16_64(), *extra]


def shadow_entry(
    pod: dict[str, Any], objects: list[dict[str, Any]], at: datetime, settings: Settings = SETTINGS
) -> audit.AuditEntry:
    """The audit entry podium writes for the pod's admission in a shadow namespace."""
    request = reviews.from_document(reviews.review_for_pod(pod))
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    decision = engine.decide(request, view, settings, now=at)
    assert decision.shadow
    return audit.build(request=request, decision=decision, time=at, latency_ms=1.0)


def ran(pod: dict[str, Any], node: str, start: datetime, end: datetime | None = None) -> Any:
    """The pod bound to ``node`` at ``start``, finished at ``end`` (else running)."""
    out = {**pod, "spec": {**pod["spec"], "nodeName": node}}
    out["status"] = {
        "phase": "Succeeded" if end else "Running",
        "startTime": start.isoformat(),
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": start.isoformat()}
        ],
    }
    if end:
        terminated = {"terminated": {"finishedAt": end.isoformat(), "exitCode": 0}}
        out["status"]["containerStatuses"] = [{"name": "main", "state": terminated}]
    return out


def test_names_exactly_the_jobs_that_split_where_podium_would_have_kept_them(now: datetime) -> None:
    hour = timedelta(hours=1)
    split, kept = pytorchjob("split", workers=1), pytorchjob("kept", workers=1)
    pods = {
        name: pytorch_pod(job, rtype, 0).obj()
        for name, job, rtype in [
            ("split-m", split, "master"),
            ("split-w", split, "worker"),
            ("kept-m", kept, "master"),
            ("kept-w", kept, "worker"),
        ]
    }
    objects = cluster(split, kept)
    entries = [shadow_entry(p, objects, now - 3 * hour) for p in pods.values()]
    live = [
        *objects,
        ran(pods["split-m"], "a-1", now - 2 * hour),  # the scheduler split it: zone-a and zone-b
        ran(pods["split-w"], "b-1", now - 2 * hour),
        ran(pods["kept-m"], "c-0", now - 2 * hour, now - hour),  # one zone, finished
        ran(pods["kept-w"], "c-1", now - 2 * hour, now - hour),
    ]
    result = report.build(entries, live, SETTINGS, now=now)
    by_job = {j.intent.name: j for j in result.jobs}
    assert [j.intent.name for j in result.split] == ["split"]
    assert by_job["split"].zones == {"zone-a": 1, "zone-b": 1}
    assert by_job["split"].intent.zone == "zone-b"  # 16 GPUs: best fit of zone-b (16), zone-c
    assert by_job["split"].gpu_hours == 2 * 8 * 2.0  # two 8-GPU pods, bound two hours ago
    assert (by_job["kept"].verdict, by_job["kept"].gpu_hours) == (report.ONE_ZONE, 2 * 8 * 1.0)
    (team,) = result.namespaces
    assert (team.jobs, team.split, team.split_gpu_hours, team.gpu_hours) == (2, 1, 32.0, 48.0)
    doc = result.as_dict()
    assert doc["split"] == 1 and doc["splitGpuHours"] == 32.0
    assert [j["split"] for j in doc["jobs"]] == [False, True]  # sorted by job: kept, split


def test_a_job_podium_would_have_left_unpinned_split_anyway(now: datetime) -> None:
    big = pytorchjob("big", workers=9)  # 80 GPUs: no zone fits
    unpinned = pinning(no_fit=NoFit.UNPINNED)
    master, worker = pytorch_pod(big, "master", 0).obj(), pytorch_pod(big, "worker", 0).obj()
    objects = cluster(big)
    entries = [shadow_entry(master, objects, now, unpinned)]
    live = [*objects, ran(master, "a-1", now), ran(worker, "b-1", now)]
    (job,) = report.build(entries, live, unpinned, now=now).jobs
    assert (job.intent.outcome, job.verdict) == ("unpinned", report.SPLIT_ANYWAY)


def test_the_first_decision_of_a_job_is_the_one_it_would_have_followed(now: datetime) -> None:
    """Later pods of a shadow job see no record: they follow the pods already placed."""
    job = pytorchjob("j", workers=1)
    master, worker = pytorch_pod(job, "master").obj(), pytorch_pod(job, "worker").obj()
    objects = cluster(job)
    first = shadow_entry(master, objects, now)
    later = shadow_entry(worker, [*objects, ran(master, "a-1", now)], now + timedelta(seconds=5))
    assert (first["zone"], later["zone"]) == ("zone-b", "zone-a")
    (intent,) = report.intents([later, first]).values()
    assert intent.zone == "zone-b"


def test_jobs_whose_pods_are_gone_or_unbound(now: datetime) -> None:
    gone, waiting = pytorchjob("gone", workers=0), pytorchjob("waiting", workers=0)
    objects = cluster(gone, waiting)
    pod = pytorch_pod(waiting, "master").obj()
    entries = [
        shadow_entry(pytorch_pod(gone, "master").obj(), objects, now),
        shadow_entry(pod, objects, now),
    ]
    jobs = {
        j.intent.name: j for j in report.build(entries, [*objects, pod], SETTINGS, now=now).jobs
    }
    assert (jobs["gone"].verdict, jobs["waiting"].verdict) == (report.GONE, report.NOT_BOUND)
    assert jobs["waiting"].gpu_hours == 0


def test_enforce_mode_entries_and_dry_runs_are_no_shadow_decisions(now: datetime) -> None:
    job = pytorchjob("j", workers=0)
    entry = shadow_entry(pytorch_pod(job, "master").obj(), cluster(job), now)
    enforced = {k: v for k, v in entry.items() if k != "shadow"}
    assert report.intents([enforced, {**entry, "dryRun": True}]) == {}


def test_namespaces_that_would_gain_most_come_first(now: datetime) -> None:
    def total(ns: str, split: int, hours: float) -> report.NamespaceTotal:
        return report.NamespaceTotal(ns, split, split, hours, hours)

    def job(ns: str, name: str, zones: list[str], hours: float) -> report.JobReport:
        intent = report.Intent(ns, name, "PyTorchJob", name, name, "pinned", "best-fit", "z", now)
        pods = tuple(report.PodRun(f"{name}-{i}", z, 8, now, now) for i, z in enumerate(zones))
        return report.JobReport(intent, pods, hours)

    jobs = [
        job("small", "s", ["a", "b"], 1.0),
        job("big", "b1", ["a", "b"], 3.0),
        job("big", "b2", ["a", "a"], 50.0),  # not split: gains nothing
        job("none", "n", ["a"], 9.0),
    ]
    ranked = report._totals(jobs)
    assert [t.namespace for t in ranked] == ["big", "small", "none"]
    assert ranked[0] == report.NamespaceTotal("big", 2, 1, 3.0, 53.0)


@given(
    gpus=st.integers(0, 16),
    bound=st.integers(0, 10_000),
    ran_for=st.one_of(st.none(), st.integers(-100, 10_000)),
    zone=st.sampled_from([None, "zone-a"]),
)
def test_gpu_hours_are_gpus_times_the_bound_time_and_never_negative(
    gpus: int, bound: int, ran_for: int | None, zone: str | None
) -> None:
    now = datetime(2026, 12, 2, 12, 0, tzinfo=datetime.now().astimezone().tzinfo)
    start = now - timedelta(seconds=bound)
    end = None if ran_for is None else start + timedelta(seconds=ran_for)
    hours = report.PodRun("p", zone, gpus, start, end).gpu_hours(now)
    expected = gpus * max(((end or now) - start).total_seconds(), 0) / 3600 if zone else 0.0
    assert hours == expected and hours >= 0


def test_pod_run_reads_binding_end_and_requests_from_the_pod(now: datetime) -> None:
    job = pytorchjob("j", workers=0)
    pod = ran(pytorch_pod(job, "master", gpus=4).obj(), "c-0", now - timedelta(hours=1), now)
    assert report.pod_run(pod, NODE_ZONE, "nvidia.com/gpu") == report.PodRun(
        pod["metadata"]["name"], "zone-c", 4, now - timedelta(hours=1), now
    )
    deleted = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": now.isoformat()}}
    deleted["status"] = {**pod["status"], "phase": "Running"}
    assert report.pod_run(deleted, NODE_ZONE, "nvidia.com/gpu").end == now
    pending = {**pod, "spec": {k: v for k, v in pod["spec"].items() if k != "nodeName"}}
    pending["status"] = {"phase": "Pending"}
    assert report.pod_run(pending, NODE_ZONE, "nvidia.com/gpu").zone is None


def test_the_command_refuses_an_input_without_shadow_decisions(tmp_path: Path) -> None:
    trail = tmp_path / "audit.jsonl"
    trail.write_text(json.dumps({"audit": audit.MARKER, "time": "2026-12-01T00:00:00+00:00"}))
    result = CliRunner().invoke(app, ["report", str(trail)])
    assert result.exit_code == 2
    assert "no shadow-mode decision in the input" in result.stderr


def test_the_command_says_in_one_line_that_it_cannot_read_the_cluster(
    now: datetime, tmp_path: Path, unreachable_kubeconfig: Path
) -> None:
    job = pytorchjob("j", workers=1)
    trail = tmp_path / "audit.jsonl"
    trail.write_text(json.dumps(shadow_entry(pytorch_pod(job, "master").obj(), cluster(job), now)))
    args = ["report", str(trail), "--kubeconfig", str(unreachable_kubeconfig)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [UNREACHABLE]
