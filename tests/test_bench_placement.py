"""The placement study (bench/placement): the committed tables are what the report code makes of
the committed numbers, the numbers are what the analysis makes of the committed raw runs, and the
analysis counts what it says it counts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from bench.placement import analysis, arms, kueue, report, runner, study, trace
from webhook.core.settings import HoldOrder, Settings, ZoneChooser

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


def _results() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DOCS / study.RESULTS).read_text())
    return data


# -- the committed study --------------------------------------------------------------------------


def test_the_committed_tables_are_rendered_from_the_committed_numbers() -> None:
    document = (DOCS / study.DOCUMENT).read_text()
    assert report.MARKERS.embed(document, report.markdown(_results())) == document


def test_the_committed_numbers_are_computed_from_the_committed_runs() -> None:
    records = {(r["arm"], r["seed"]): r for r in study.load_records(DOCS)}
    results = _results()
    assert {(r["arm"], r["seed"]) for r in results["runs"]} == set(records)
    for run in results["runs"]:
        assert run["metrics"] == analysis.metrics(records[(run["arm"], run["seed"])]), run["arm"]


def test_a_store_saves_runs_and_reads_them_back_as_earlier_runs(tmp_path: Path) -> None:
    """`study.Store` round trip on two committed runs: saved into a new ``--out``, they come
    back as the earlier runs of the same trace (numbers computed again), and a run with another
    trace finds none."""
    results = _results()
    wanted = results["runs"][:2]
    keys = [study.key(r) for r in wanted]
    by_key = {study.key(r): r for r in study.load_records(DOCS)}
    runs = {k: dict(r) for k, r in zip(keys, wanted, strict=True)}
    records = {k: by_key[k] for k in keys}
    saved = study.STORE.save(tmp_path, results["params"], results["arms"], runs, records)
    assert [study.key(r) for r in saved["runs"]] == keys
    again, raw = study.STORE.earlier(tmp_path, results["params"])
    assert set(again) == set(keys) and raw == records
    assert all(again[k]["metrics"] == runs[k]["metrics"] for k in keys)
    other = {**results["params"], "jobs": results["params"]["jobs"] + 1}
    assert study.STORE.earlier(tmp_path, other) == ({}, {})


def test_the_committed_study_runs_each_of_its_arms_on_the_same_seeds_of_one_trace() -> None:
    results = _results()
    seeds = {run["seed"] for run in results["runs"]}
    assert len(seeds) >= 2
    assert set(results["arms"]) <= set(arms.ARMS)
    # Round one's four default arms at least; the newer ones once the full study has run.
    assert {"default", "self-affinity", "podium", "scheduler"} <= set(results["arms"])
    for arm in results["arms"]:
        assert {r["seed"] for r in results["runs"] if r["arm"] == arm} == seeds
    spec = study.spec_of(results["params"])
    assert spec.jobs >= 150
    for seed in seeds:  # the recorded trace is the one its parameters generate
        jobs = trace.generate(seed, spec)
        assert results["params"]["offered_load"][str(seed)] == round(trace.offered_load(jobs), 4)
    for record in study.load_records(DOCS):
        jobs = trace.generate(record["seed"], spec)
        assert [(j["name"], j["pods"], j["gpus_per_pod"]) for j in record["jobs"]] == [
            (j.name, j.pods, j.gpus_per_pod) for j in jobs
        ]


# -- the trace ------------------------------------------------------------------------------------


def test_a_seed_gives_the_same_trace_and_every_job_fits_one_zone() -> None:
    jobs = trace.generate(7)
    assert jobs == trace.generate(7)
    assert jobs != trace.generate(8)
    assert len(jobs) == trace.TraceSpec().jobs
    assert all(2 <= j.pods <= 32 and 1 <= j.gpus_per_pod <= 8 for j in jobs)
    assert all(j.gpus <= trace.largest_zone() for j in jobs)
    arrivals = [j.arrival_s for j in jobs]
    assert arrivals == sorted(arrivals)
    assert trace.capacity() == 200


# -- the analysis ---------------------------------------------------------------------------------


def _record(jobs: list[dict[str, Any]], pods: list[list[Any]], end: float) -> dict[str, Any]:
    """A run record; each job's ``attempts`` default to one attempt made at 0."""
    return {
        "arm": "test",
        "seed": 0,
        "end_s": end,
        "horizon_s": end,
        "capacity_gpus": 10,
        "zones": {"a": 5, "b": 5},
        "jobs": [
            {
                "name": f"j{i}",
                "arrival_s": 0.0,
                "submitted_s": 0.0,
                "duration_s": 5.0,
                "reason": None,
                "attempts": [_attempt(0)],
                **job,
            }
            for i, job in enumerate(jobs)
        ],
        "pods": pods,
    }


def _attempt(number: int, whole: float | None = None, outcome: str | None = None) -> dict[str, Any]:
    return {"attempt": number, "created_s": 0.0, "whole_s": whole, "outcome": outcome}


def test_a_whole_gang_in_one_zone_is_useful_from_its_last_pod_on() -> None:
    # 2 pods × 2 GPUs: bound at 1 and 3, whole (Running) at 4, deleted at 10.
    record = _record(
        [{"pods": 2, "gpus_per_pod": 2, "attempts": [_attempt(0, 4.0, "finished")]}],
        [[0, "a", 0.5, 1.0, 1.5, 10.0, None, 0], [0, "a", 0.5, 3.0, 4.0, 10.0, None, 0]],
        end=10.0,
    )
    m = analysis.metrics(record)
    # stranded: (4 - 1) + (4 - 3) = 4 pod-seconds × 2 GPUs; useful: 2 × 6 s × 2 GPUs.
    assert m["stranded_gpu_h"] == pytest.approx(analysis.sim_hours(8.0))
    assert m["useful_gpu_h"] == pytest.approx(analysis.sim_hours(24.0))
    assert m["useful_share"] == pytest.approx(24.0 / (10 * 10.0))
    assert (m["split_jobs"], m["whole_one_zone"], m["finished"], m["never_whole"]) == (0, 1, 1, 0)
    assert m["wait_p50_min"] == pytest.approx(analysis.sim_minutes(4.0))
    assert (m["stuck_partial"], m["attempts"], m["failed_timeout"]) == (0, 1, 0)


def test_a_split_gang_is_stranded_all_along_even_when_whole() -> None:
    record = _record(
        [{"pods": 2, "gpus_per_pod": 1, "attempts": [_attempt(0, 2.0, "split")]}],
        [[0, "a", 0.0, 1.0, 2.0, 8.0, None, 0], [0, "b", 0.0, 1.0, 2.0, 8.0, None, 0]],
        end=10.0,
    )
    m = analysis.metrics(record)
    assert (m["split_jobs"], m["whole_one_zone"], m["failed_split"]) == (1, 0, 1)
    assert m["useful_gpu_h"] == 0
    assert m["stranded_gpu_h"] == pytest.approx(analysis.sim_hours(14.0))


def test_a_retry_that_lands_in_one_zone_counts_from_the_jobs_arrival() -> None:
    # Attempt 0 times out half placed (1 pod of 2, 6 s); attempt 1 is whole at 9.
    record = _record(
        [
            {
                "pods": 2,
                "gpus_per_pod": 1,
                "attempts": [_attempt(0, None, "timeout"), _attempt(1, 9.0, "finished")],
            }
        ],
        [
            [0, "a", 0.0, 1.0, 1.5, 7.0, None, 0],
            [0, None, 0.0, None, None, 7.0, None, 0],
            [0, "b", 7.0, 8.0, 8.5, 14.0, None, 1],
            [0, "b", 7.0, 8.5, 9.0, 14.0, None, 1],
        ],
        end=20.0,
    )
    m = analysis.metrics(record)
    assert (m["attempts"], m["failed_timeout"], m["finished"], m["split_jobs"]) == (2, 1, 1, 0)
    assert m["wait_p50_min"] == pytest.approx(analysis.sim_minutes(9.0))
    assert m["stranded_gpu_h"] == pytest.approx(analysis.sim_hours(6.0 + 1.0 + 0.5))
    assert m["useful_gpu_h"] == pytest.approx(analysis.sim_hours(10.0))
    held_partial_min = analysis.sim_minutes(6.0)
    assert m["stuck_partial"] == int(held_partial_min > analysis.STUCK_SIM_MINUTES)


def test_a_partial_gang_held_past_the_limit_is_stuck_and_stranded_until_the_end() -> None:
    limit_s = analysis.STUCK_SIM_MINUTES / trace.SIM_MINUTES_PER_SECOND
    end = 2 * limit_s + 1
    record = _record(
        [{"pods": 3, "gpus_per_pod": 4}, {"pods": 2, "gpus_per_pod": 1}],
        [[0, "a", 0.0, 1.0, 1.5, None, None, 0], [0, None, 0.0, None, None, None, None, 0]],
        end=end,
    )
    m = analysis.metrics(record)
    assert m["stuck_partial"] == 1
    assert m["never_whole"] == 2
    assert m["stranded_gpu_h"] == pytest.approx(analysis.sim_hours(4 * (end - 1.0)))
    assert m["wait_p50_min"] is None


def test_what_the_watch_saw_after_the_run_ended_is_not_counted() -> None:
    record = _record(
        [{"pods": 2, "gpus_per_pod": 1}],
        [[0, "a", 1.0, 12.0, 12.1, None, None, 0], [0, "a", 1.0, 9.0, 9.5, None, None, 0]],
        end=10.0,
    )
    m = analysis.metrics(record)
    assert m["stranded_gpu_h"] == pytest.approx(analysis.sim_hours(1.0))
    assert m["bound_peak_per_s"] == 1
    assert sum(analysis.timeline(record, step_s=0.5)["stranded"]) * 0.5 == pytest.approx(1.0)


def test_a_gang_bound_at_once_is_never_partial() -> None:
    view = analysis.job_views(
        _record(
            [{"pods": 2, "gpus_per_pod": 1, "attempts": [_attempt(0, 1.0)]}],
            [[0, "a", 0.0, 0.5, 1.0, 9.0, "j0", 0], [0, "a", 0.0, 0.5, 1.0, 9.0, "j0", 0]],
            end=10.0,
        )
    )[0]
    assert view.attempts[0].longest_partial_s() == 0.0


def test_the_timeline_adds_up_to_the_metrics() -> None:
    record = _record(
        [{"pods": 2, "gpus_per_pod": 2, "attempts": [_attempt(0, 4.0, "finished")]}],
        [[0, "a", 0.5, 1.0, 1.5, 10.0, None, 0], [0, "a", 0.5, 3.0, 4.0, 10.0, None, 0]],
        end=12.0,
    )
    series = analysis.timeline(record, step_s=0.5)
    assert sum(series["useful"]) * 0.5 == pytest.approx(24.0)
    assert sum(series["stranded"]) * 0.5 == pytest.approx(8.0)
    assert max(series["zone:a"]) == 4
    assert max(series["zone:b"]) == 0


def _gated(row: list[Any], gates: str | None, ungated: float | None) -> list[Any]:
    return [*row, gates, ungated]


def test_the_wait_is_broken_down_by_gang_size() -> None:
    record = _record(
        [
            {"pods": 2, "gpus_per_pod": 1, "attempts": [_attempt(0, 3.0, "finished")]},
            {"pods": 2, "gpus_per_pod": 1, "attempts": [_attempt(0, 5.0, "finished")]},
            {"pods": 4, "gpus_per_pod": 1},
        ],
        [
            *([[0, "a", 0.0, 1.0, 3.0, 8.0, None, 0]] * 2),
            *([[1, "b", 0.0, 1.0, 5.0, 8.0, None, 0]] * 2),
        ],
        end=10.0,
    )
    by_size = analysis.metrics(record)["wait_by_size"]
    assert by_size["2"] == {
        "jobs": 2,
        "whole": 2,
        "p50_min": analysis.sim_minutes(3.0),
        "p95_min": analysis.sim_minutes(5.0),
    }
    assert by_size["4"] == {"jobs": 1, "whole": 0, "p50_min": None, "p95_min": None}
    assert set(by_size) == {str(n) for n in analysis.GANG_SIZES}


def test_gated_demand_is_held_and_ungated_unbound_demand_is_pending() -> None:
    # Job 0 (2 GPUs per pod): one pod gated 0 → 3, bound at 5; one gated until the end.
    # Job 1 (1 GPU): never gated, created at 2, bound at 6. Job 2: gated, deleted at 4.
    record = _record(
        [
            {"pods": 2, "gpus_per_pod": 2},
            {"pods": 1, "gpus_per_pod": 1},
            {"pods": 1, "gpus_per_pod": 1},
        ],
        [
            _gated([0, "a", 0.0, 5.0, 5.5, None, None, 0], "podium.dev/hold", 3.0),
            _gated([0, None, 0.0, None, None, None, None, 0], "podium.dev/hold", None),
            _gated([1, "b", 2.0, 6.0, 6.5, None, None, 0], None, None),
            _gated([2, None, 1.0, None, None, 4.0, None, 0], "kueue.x-k8s.io/admission", None),
        ],
        end=10.0,
    )
    m = analysis.metrics(record)
    assert m["held_gpu_h"] == pytest.approx(analysis.sim_hours(2 * 3.0 + 2 * 10.0 + 1 * 3.0))
    assert m["pending_gpu_h"] == pytest.approx(analysis.sim_hours(2 * 2.0 + 1 * 4.0))
    assert m["held_at_end"] == 1


def test_old_records_without_gates_count_nothing_held() -> None:
    record = _record(
        [{"pods": 2, "gpus_per_pod": 1}],
        [[0, None, 1.0, None, None, None, None, 0]] * 2,
        end=5.0,
    )
    m = analysis.metrics(record)
    assert (m["held_gpu_h"], m["held_at_end"]) == (0.0, 0)
    assert m["pending_gpu_h"] == pytest.approx(analysis.sim_hours(8.0))


def test_room_to_last_bind_counts_from_when_some_zone_had_room_for_the_whole_gang() -> None:
    # Zones a and b of 5 GPUs. Job 0 holds 4 in a (0 → 10), job 1 holds 4 in b (0 → 6): neither
    # zone has room for job 2 (4 GPUs, created at 1) until b frees at 6; its last pod binds at 9.
    # Job 3 (2 GPUs, created at 11) finds room at once: it did not wait.
    record = _record(
        [
            {"pods": 2, "gpus_per_pod": 2, "attempts": [_attempt(0, 0.5, "finished")]},
            {"pods": 2, "gpus_per_pod": 2, "attempts": [_attempt(0, 0.5, "finished")]},
            {"pods": 2, "gpus_per_pod": 2, "attempts": [_attempt(0, 9.5, "finished")]},
            {"pods": 2, "gpus_per_pod": 1, "attempts": [_attempt(0, 12.5, "finished")]},
        ],
        [
            *([[0, "a", 0.0, 0.0, 0.5, 10.0, None, 0]] * 2),
            *([[1, "b", 0.0, 0.0, 0.5, 6.0, None, 0]] * 2),
            [2, "b", 1.0, 8.0, 8.5, None, None, 0],
            [2, "b", 1.0, 9.0, 9.5, None, None, 0],
            *([[3, "a", 11.0, 12.0, 12.5, None, None, 0]] * 2),
        ],
        end=20.0,
    )
    record["jobs"][2]["attempts"][0]["created_s"] = 1.0
    record["jobs"][3]["attempts"][0]["created_s"] = 11.0
    views = analysis.job_views(record)
    assert analysis.room_to_last_bind(record, views) == [pytest.approx(3.0)]
    m = analysis.metrics(record)
    assert m["room_waited"] == 1
    assert m["room_to_bind_p50_min"] == pytest.approx(analysis.sim_minutes(3.0))


def test_room_taken_again_before_the_gang_binds_restarts_the_clock() -> None:
    # Zone a (5 GPUs): job 0 holds 4 until 2; job 1 (waiting since 0) takes them from 3 to 6;
    # job 2 (waiting since 0 too) binds at 8 — room appeared for it at 2, was taken at 3 and
    # appeared again, for the last time, at 6.
    record = _record(
        [
            {"pods": 1, "gpus_per_pod": 4, "attempts": [_attempt(0, 0.5, "finished")]},
            {"pods": 1, "gpus_per_pod": 4, "attempts": [_attempt(0, 3.5, "finished")]},
            {"pods": 1, "gpus_per_pod": 4, "attempts": [_attempt(0, 8.5, "finished")]},
        ],
        [
            [0, "a", 0.0, 0.0, 0.5, 2.0, None, 0],
            [1, "a", 0.0, 3.0, 3.5, 6.0, None, 0],
            [2, "a", 0.0, 8.0, 8.5, None, None, 0],
        ],
        end=10.0,
    )
    record["zones"] = {"a": 5}
    for job in record["jobs"]:
        job["attempts"][0]["created_s"] = 0.0
    lags = analysis.room_to_last_bind(record, analysis.job_views(record))
    assert lags == [pytest.approx(1.0), pytest.approx(2.0)]


def test_histogram_quantile_interpolates_as_prometheus_does() -> None:
    buckets = {"0.005": 50.0, "0.025": 90.0, "0.1": 100.0, "+Inf": 100.0}
    assert analysis.histogram_quantile(0.5, buckets) == pytest.approx(0.005)
    assert analysis.histogram_quantile(0.7, buckets) == pytest.approx(0.015)
    assert analysis.histogram_quantile(0.99, buckets) == pytest.approx(0.0925)
    assert analysis.histogram_quantile(0.5, {"+Inf": 0.0}) is None


def test_the_webhook_latency_is_read_from_the_apiservers_metric_for_podiums_webhook() -> None:
    base = "apiserver_admission_webhook_admission_duration_seconds"
    labels = 'name="pods.podium.dev",operation="CREATE",rejected="false",type="admit"'
    other = 'name="other.example.com",operation="CREATE",rejected="false",type="admit"'
    text = "\n".join(
        [
            f"# TYPE {base} histogram",
            f'{base}_bucket{{{labels},le="0.005"}} 3',
            f'{base}_bucket{{{labels},le="+Inf"}} 4',
            f"{base}_sum{{{labels}}} 0.5",
            f"{base}_count{{{labels}}} 4",
            f'{base}_bucket{{{other},le="+Inf"}} 99',
            'scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 7',
        ]
    )
    hook = analysis.webhook_histogram(text, arms.PODIUM_WEBHOOK)
    assert hook == {"buckets": {"0.005": 3.0, "+Inf": 4.0}, "sum": 0.5, "count": 4.0}
    assert analysis.scheduler_attempts(text) == {"scheduled": 7.0}
    before = {"buckets": {"0.005": 1.0, "+Inf": 1.0}, "sum": 0.1, "count": 1.0}
    delta = analysis.histogram_delta(hook, before)
    assert delta["count"] == 3.0
    assert delta["buckets"] == {"0.005": 2.0, "+Inf": 3.0}


# -- the arms and the operator --------------------------------------------------------------------


def _job() -> trace.TraceJob:
    return trace.TraceJob(0, "job-000", 0.0, pods=4, gpus_per_pod=2, duration_s=5.0)


def _job_obj() -> dict[str, Any]:
    obj = runner.pytorchjob(_job(), "study")
    obj["metadata"]["uid"] = "uid-1"
    return obj


def test_the_operator_makes_the_gang_the_job_object_asks_for() -> None:
    job_obj = _job_obj()
    specs = job_obj["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 3)
    assert [p["metadata"]["name"] for p in runner.operator_pods(_job(), job_obj, 2)][:1] == [
        "job-000-master-0-r2"
    ]
    pods = runner.operator_pods(_job(), job_obj)
    assert {p["metadata"]["labels"][runner.ATTEMPT_LABEL] for p in pods} == {"0"}
    assert [p["metadata"]["name"] for p in pods] == [
        "job-000-master-0",
        "job-000-worker-0",
        "job-000-worker-1",
        "job-000-worker-2",
    ]
    owner = pods[0]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("PyTorchJob", "uid-1", True)
    assert pods[0]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"
    assert all(
        p["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "2"} for p in pods
    )


def test_each_arm_changes_only_what_it_says() -> None:
    pod = runner.operator_pods(_job(), _job_obj())[1]
    assert arms.Arm().pod(_job(), json.loads(json.dumps(pod))) == pod
    affine = arms.SelfAffinity().pod(_job(), json.loads(json.dumps(pod)))
    term = affine["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term == [
        {
            "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": "job-000"}},
            "topologyKey": "topology.kubernetes.io/zone",
        }
    ]
    grouped = arms.SchedulerGang().pod(_job(), json.loads(json.dumps(pod)))
    assert grouped["spec"]["schedulingGroup"] == {"podGroupName": "job-000"}
    group = arms.podgroup("job-000", "study", 4, {"kind": "PyTorchJob"}, arms.ZONE_LABEL)
    assert group["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
    }
    assert arms.PodiumArm().namespace_labels == {"podium.dev/enabled": "true"}


def test_the_podium_arms_configure_podium_with_settings_it_knows() -> None:
    """The study's podium.yaml texts are read by podium's own settings (a renamed key fails).
    Modes are named by value (``pin``, ``hold``), so the arms stay what they are whatever podium's
    default mode and enum names."""
    names = (
        "podium",
        "podium-hold",
        "podium-hold-timeout",
        "podium-hold-fit-first",
        "podium-scheduler",
        "podium-uncompressed",
    )
    built = {name: arms.ARMS[name]() for name in names}
    parsed = {
        name: Settings.from_mapping(yaml.safe_load(arm.config))  # type: ignore[attr-defined]
        for name, arm in built.items()
    }
    assert parsed["podium"].zone_chooser == ZoneChooser("pin")
    assert parsed["podium-hold"].zone_chooser == ZoneChooser("hold")
    assert parsed["podium-scheduler"].zone_chooser == ZoneChooser("scheduler")
    # podium's reservation window and hold timeout are spans of job time: compressed like the
    # trace.
    compressed = 600 / (60 * trace.SIM_MINUTES_PER_SECOND)
    for name in ("podium", "podium-hold", "podium-scheduler"):
        assert parsed[name].reservation_seconds == compressed, name
    # The hold runs with podium's defaults: no timeout.
    assert parsed["podium-hold"].hold_timeout_seconds == Settings().hold_timeout_seconds == 0
    assert parsed["podium-uncompressed"] == Settings.from_mapping({"zone-chooser": "pin"})
    # Each variant of the hold changes one setting, and nothing else.
    hold = parsed["podium-hold"]
    compressed_timeout = 1800 / (60 * trace.SIM_MINUTES_PER_SECOND)
    timed = dataclasses.replace(hold, hold_timeout_seconds=compressed_timeout)
    assert parsed["podium-hold-timeout"] == timed
    assert parsed["podium-hold-fit-first"] == dataclasses.replace(
        hold, hold_order=HoldOrder.FIT_FIRST
    )
    holds = ["podium-hold", "podium-hold-timeout", "podium-hold-fit-first"]
    assert {name for name, arm in built.items() if not arm.gang_gates} == set(holds)
    ungated = [name for name in arms.ARMS if not arms.ARMS[name]().gang_gates]
    assert ungated == [*holds, "kueue-tas"]


def test_the_kueue_arm_makes_each_attempt_a_plain_pod_group_required_in_one_zone() -> None:
    arm = arms.ARMS["kueue-tas"]()
    assert (arm.name, arm.gang_gates, arm.webhook) == ("kueue-tas", False, "mpod.kb.io")
    job_obj = _job_obj()
    first = arm.pod(_job(), runner.operator_pods(_job(), job_obj)[1])
    retry = arm.pod(_job(), runner.operator_pods(_job(), job_obj, 2)[1])
    assert {k: v for k, v in first["metadata"]["labels"].items() if k.startswith("kueue")} == {
        "kueue.x-k8s.io/pod-group-name": "job-000-0",
        "kueue.x-k8s.io/queue-name": kueue.QUEUE,
    }
    assert first["metadata"]["annotations"] == {
        "kueue.x-k8s.io/pod-group-total-count": "4",
        "kueue.x-k8s.io/podset-required-topology": "topology.kubernetes.io/zone",
    }
    assert retry["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "job-000-2"
    # Nothing else changes: no gate, no selector (Kueue's webhook adds the gates).
    plain = runner.operator_pods(_job(), job_obj)[1]
    assert first["spec"] == plain["spec"]


def test_the_workload_watch_keeps_when_each_condition_was_first_seen_true() -> None:
    watch = kueue.WorkloadWatch(cast(Any, None), "study", t0=0.0)
    times = iter([1.0, 2.0, 3.0, 4.0])
    watch.now = lambda: next(times)  # type: ignore[method-assign]

    def workload(*conditions: tuple[str, str]) -> dict[str, Any]:
        return {
            "metadata": {"name": "job-000-0"},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]},
        }

    watch.observe("ADDED", workload())
    watch.observe("MODIFIED", workload(("QuotaReserved", "True"), ("Admitted", "False")))
    watch.observe("MODIFIED", workload(("QuotaReserved", "True"), ("Admitted", "True")))
    watch.observe("DELETED", workload())
    assert watch.rows() == [
        {
            "name": "job-000-0",
            "created_s": 1.0,
            "QuotaReserved_s": 2.0,
            "Admitted_s": 3.0,
            "deleted_s": 4.0,
        }
    ]


def test_a_queueing_arms_own_times_come_from_its_workloads_and_the_pods_ungating() -> None:
    record = _record(
        [{"pods": 2, "gpus_per_pod": 1, "attempts": [_attempt(0, 6.0, "finished")]}],
        [
            _gated([0, "a", 1.0, 5.0, 5.5, None, None, 0], "kueue.x-k8s.io/admission", 4.5),
            _gated([0, "a", 1.0, 5.5, 6.0, None, None, 0], "kueue.x-k8s.io/admission", 5.0),
        ],
        end=10.0,
    )
    record["observed"] = {
        "workloads": [
            {"name": "j0-0", "created_s": 1.5, "QuotaReserved_s": 4.0, "Admitted_s": 4.0},
            {"name": "j9-0", "created_s": 2.0},
        ]
    }
    m = analysis.metrics(record)
    assert (m["queue_workloads"], m["queue_admitted"]) == (2, 1)
    assert m["queue_admit_wait_p50_min"] == pytest.approx(analysis.sim_minutes(2.5))
    assert m["queue_ungate_after_admit_p50_s"] == pytest.approx(1.0)
    assert "queue_workloads" not in analysis.metrics(_record([], [], end=1.0))


class _Cluster:
    """Answers the pod list; records every request."""

    def __init__(self, pods: list[str]) -> None:
        self.pods = pods
        self.calls: list[tuple[str, str, Any, dict[str, Any]]] = []

    def request(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        self.calls.append((method, path, body, options))
        return {"items": [{"metadata": {"name": name}} for name in self.pods]}


@pytest.mark.parametrize(("succeeded", "phase"), [(True, "Succeeded"), (False, "Failed")])
def test_the_kueue_arm_ends_an_attempts_pods_as_a_kubelet_would(
    succeeded: bool, phase: str
) -> None:
    cluster = _Cluster(["job-000-master-0-r1"])
    ctx = arms.RunContext(cast(Any, cluster), "study", Path("."))
    arms.ARMS["kueue-tas"]().ending(ctx, _job(), 1, succeeded=succeeded)
    (_, _, _, listed), patch = cluster.calls
    assert listed["query"] == {
        "labelSelector": "training.kubeflow.org/job-name=job-000,bench.podium.dev/attempt=1"
    }
    assert patch[:3] == (
        "PATCH",
        "/api/v1/namespaces/study/pods/job-000-master-0-r1/status",
        {"status": {"phase": phase}},
    )
    assert patch[3]["content_type"] == "application/merge-patch+json"


# -- the goal -------------------------------------------------------------------------------------


def _goal_metrics(**overrides: Any) -> dict[str, Any]:
    metrics: dict[str, Any] = {
        "finished": 130,
        "stranded_gpu_h": 4.0,
        "split_jobs": 0,
        "stuck_partial": 0,
        "wait_by_size": {"32": {"p50_min": 10.0, "p95_min": 30.0}},
        "useful_share": 0.6,
    }
    return {**metrics, **overrides}


def _goal_results(**arms_metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "runs": [
            {"arm": arm.replace("_", "-"), "seed": 1, "metrics": metrics}
            for arm, metrics in arms_metrics.items()
        ]
    }


def test_the_goal_row_says_which_criteria_the_hold_meets_with_both_arms_figures() -> None:
    (line,) = report.goal(
        _goal_results(
            podium_hold=_goal_metrics(finished=131, stranded_gpu_h=12.5),
            scheduler=_goal_metrics(finished=131, wait_by_size={"32": {"p95_min": 29.0}}),
            kueue_tas=_goal_metrics(useful_share=0.55),
        )
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == [
        "1",
        "131 vs 131 yes",  # at least as many: a tie meets it
        "12.5 **no**",
        "0 yes",
        "0 yes",
        "30.0 vs 29.0 **no**",
        "60 % vs 55 % yes",
        "4 of 6",
    ]


def test_a_criterion_whose_other_arm_did_not_run_is_neither_met_nor_failed() -> None:
    (line,) = report.goal(_goal_results(podium_hold=_goal_metrics(split_jobs=2)))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1] == f"130 vs {report.MISSING} {report.MISSING}"
    assert cells[3] == "2 **no**"
    assert cells[5] == f"30.0 vs {report.MISSING} {report.MISSING}"
    assert cells[-1] == "2 of 3"
    assert report.goal(_goal_results(scheduler=_goal_metrics())) == []


def test_the_tables_say_which_commit_each_arm_ran_at() -> None:
    results = _results()
    same = {"commit": "a" * 40, "changed_files": 0}
    runs = [{**r, "source": same} for r in results["runs"]]
    assert "at commit aaaaaaa." in report.markdown({**results, "runs": runs})
    for run in runs:
        if run["arm"] == "podium":
            run["source"] = {"commit": "f" * 40, "changed_files": 2}
    two = report.markdown({**results, "runs": runs})
    assert "at commits aaaaaaa (" in two and "; fffffff with 2 files changed (podium)" in two
