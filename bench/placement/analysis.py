"""What a run's raw record says: the study's metrics, and the timeline behind the plots.

Pure: `metrics(record)` and `timeline(record)` read only the record a run wrote (jobs with their
attempts, pods with the times they were seen bound, running and deleted, and the component metrics
scraped before and after), so the committed numbers can be recomputed from the committed records
by a test.

A run record (`runner.Replay.run` writes it) is JSON::

    {"arm": ..., "seed": ..., "end_s": ..., "horizon_s": ..., "timeout_s": ...,
     "capacity_gpus": ..., "zones": {zone: gpus},
     "jobs": [{"name", "arrival_s", "submitted_s", "pods", "gpus_per_pod", "duration_s", "reason",
               "attempts": [{"attempt", "created_s", "first_bound_s", "whole_s", "zones",
                             "ended_s", "outcome": "finished" | "timeout" | "split" | null}]}],
     "pods": [[job index, zone or null, created_s, bound_s, running_s, deleted_s,
               scheduling group or null, attempt, gates or null, ungated_s, node or null]],
     "scrapes": {"webhook": {"buckets": {le: count}, "sum": s, "count": n} | null,
                 "scheduler": {"scheduled": n, "unschedulable": n, "error": n}}}

All times are real seconds after the run started; ``null`` means "never, before the run ended".
``gates`` are the scheduling gates the pod was created with (its names joined by commas: podium's
hold, Kueue's admission and topology gates), ``ungated_s`` when it was first seen without any;
records made before the study watched gates have 8 fields per pod and count as never gated;
``node`` is the node the pod was bound to (records made before the topology study have 10
fields). A topology run's record also has ``layout`` (`bench.placement.topology`) and
``node_labels`` ({node: {label: value}} of the layout's network levels).

An *attempt* is one try at running a job's gang (its pods, created anew after a failure). GPUs a
pod holds count as **useful** from the moment its attempt ran whole in one zone, and as
**stranded** otherwise: before the gang is whole (the pod waits for the rest), and all along in an
attempt whose pods were bound in more than one zone (under zone isolation it never progresses).
"""

from __future__ import annotations

import bisect
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.placement.trace import SIM_MINUTES_PER_SECOND

#: An attempt with some but not all pods bound for longer than this is "stuck partially placed".
STUCK_SIM_MINUTES = 5.0

# Positions in a pod row of the record.
JOB, ZONE, CREATED, BOUND, RUNNING, DELETED, GROUP, ATTEMPT, GATES, UNGATED, NODE = range(11)
#: The gang sizes the wait is broken down by (the trace's sizes).
GANG_SIZES = (2, 4, 8, 16, 32)


def field(pod: Sequence[Any], position: int) -> Any:
    """A pod row's field; None where an older record has no such field."""
    return pod[position] if position < len(pod) else None


def sim_minutes(real_s: float) -> float:
    return real_s * SIM_MINUTES_PER_SECOND


def sim_hours(real_s: float) -> float:
    return sim_minutes(real_s) / 60.0


@dataclass(frozen=True)
class AttemptView:
    """One attempt of a job, with its pods, and what the study asks of it."""

    job: Mapping[str, Any]
    attempt: Mapping[str, Any]
    pods: Sequence[Sequence[Any]]
    end_s: float

    @property
    def gpus_per_pod(self) -> int:
        return int(self.job["gpus_per_pod"])

    @property
    def zones(self) -> set[str]:
        """Zones its pods were bound in."""
        return {p[ZONE] for p in self.pods if p[BOUND] is not None and p[ZONE] is not None}

    @property
    def split(self) -> bool:
        return len(self.zones) > 1

    @property
    def whole_s(self) -> float | None:
        value = self.attempt.get("whole_s")
        return None if value is None else float(value)

    @property
    def whole_in_one_zone(self) -> bool:
        return self.whole_s is not None and not self.split

    def held(self) -> list[tuple[float, float]]:
        """[bound, deleted) of each pod bound before the run ended, cut at the end (the watch
        may still see binds while the run's last metrics are scraped)."""
        return [
            (start, min(stop, self.end_s))
            for start, stop in (_held(p, self.end_s) for p in self.pods)
            if start < self.end_s
        ]

    def useful_and_stranded_gpu_s(self) -> tuple[float, float]:
        """GPU-seconds held while the whole gang ran in one zone (useful), and the rest."""
        useful = stranded = 0.0
        whole = self.whole_s
        for start, stop in self.held():
            if whole is None or self.split:
                stranded += stop - start
            else:
                stranded += max(0.0, min(stop, whole) - start)
                useful += max(0.0, stop - max(start, whole))
        return useful * self.gpus_per_pod, stranded * self.gpus_per_pod

    def longest_partial_s(self) -> float:
        """The longest time during which some but not all of its pods were bound."""
        events: list[tuple[float, int]] = []
        for start, stop in self.held():
            events += [(start, +1), (stop, -1)]
        events.sort(key=lambda e: (e[0], e[1]))
        size, bound, since, longest = int(self.job["pods"]), 0, None, 0.0
        for t, step in events:
            bound += step
            partial = 0 < bound < size
            if partial and since is None:
                since = t
            elif not partial and since is not None:
                longest, since = max(longest, t - since), None
        if since is not None:
            longest = max(longest, self.end_s - since)
        return longest


@dataclass(frozen=True)
class JobView:
    """One job of a record with its attempts."""

    index: int
    job: Mapping[str, Any]
    attempts: Sequence[AttemptView]

    @property
    def split(self) -> bool:
        """Some attempt's pods were bound in more than one zone."""
        return any(a.split for a in self.attempts)

    @property
    def whole_in_one_zone_s(self) -> float | None:
        """When an attempt of it first ran whole in one zone."""
        times = [a.whole_s for a in self.attempts if a.whole_in_one_zone and a.whole_s]
        return min(times) if times else None

    @property
    def finished(self) -> bool:
        return any(a.attempt.get("outcome") == "finished" for a in self.attempts)

    def outcomes(self) -> list[str]:
        return [str(a.attempt.get("outcome")) for a in self.attempts]


def _held(pod: Sequence[Any], end: float) -> tuple[float, float]:
    """[bound, deleted-or-end) of a pod; (end, end) for one never bound."""
    if pod[BOUND] is None:
        return end, end
    return float(pod[BOUND]), float(pod[DELETED]) if pod[DELETED] is not None else end


def job_views(record: Mapping[str, Any]) -> list[JobView]:
    by_attempt: dict[tuple[int, int], list[Sequence[Any]]] = defaultdict(list)
    for pod in record["pods"]:
        by_attempt[(int(pod[JOB]), int(pod[ATTEMPT]))].append(pod)
    end = float(record["end_s"])
    return [
        JobView(
            i,
            job,
            [
                AttemptView(job, attempt, by_attempt.get((i, int(attempt["attempt"])), []), end)
                for attempt in job.get("attempts") or []
            ],
        )
        for i, job in enumerate(record["jobs"])
    ]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def histogram_quantile(q: float, buckets: Mapping[str, float]) -> float | None:
    """Prometheus' ``histogram_quantile`` over cumulative buckets {le: count} (q in 0..1):
    linear interpolation inside the bucket the rank falls in; None without observations."""
    points = sorted(
        (math.inf if le == "+Inf" else float(le), float(n)) for le, n in buckets.items()
    )
    if not points or points[-1][1] <= 0:
        return None
    rank = q * points[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in points:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # as Prometheus: the highest finite bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def metrics(record: Mapping[str, Any]) -> dict[str, Any]:
    """The study's numbers for one run (simulated units where the unit says so)."""
    views = job_views(record)
    end = float(record["end_s"])
    # The same window for every arm of a seed (the last arrival plus the drain), so an arm that
    # finishes early is not credited with a shorter run.
    window = max(end, float(record.get("horizon_s") or end))
    capacity = int(record["capacity_gpus"])
    attempts = [a for v in views for a in v.attempts]
    whole = [v for v in views if v.whole_in_one_zone_s is not None]
    waits = [
        sim_minutes(float(reached) - float(v.job["arrival_s"]))
        for v in whole
        if (reached := v.whole_in_one_zone_s) is not None
    ]
    useful = stranded = 0.0
    for attempt in attempts:
        u, s = attempt.useful_and_stranded_gpu_s()
        useful += u
        stranded += s
    limit = STUCK_SIM_MINUTES
    stuck = [
        v for v in views if any(sim_minutes(a.longest_partial_s()) > limit for a in v.attempts)
    ]
    outcomes = _count(o for v in views for o in v.outcomes())
    split = [v for v in views if v.split]
    out: dict[str, Any] = {
        "jobs": len(views),
        "submitted": sum(1 for v in views if v.job.get("submitted_s") is not None),
        "pods": sum(int(v.job["pods"]) for v in views),
        "attempts": len(attempts),
        "failed_timeout": outcomes.get("timeout", 0),
        "failed_split": outcomes.get("split", 0),
        "split_jobs": len(split),
        "split_pct": 100.0 * len(split) / len(views) if views else 0.0,
        "whole_one_zone": len(whole),
        "finished": sum(1 for v in views if v.finished),
        "never_whole": len(views) - len(whole),
        "wait_p50_min": percentile(waits, 50),
        "wait_p95_min": percentile(waits, 95),
        "stuck_partial": len(stuck),
        "useful_gpu_h": sim_hours(useful),
        "stranded_gpu_h": sim_hours(stranded),
        "capacity_gpu_h": sim_hours(capacity * window),
        "useful_share": useful / (capacity * window) if window > 0 else 0.0,
        "run_min": sim_minutes(end),
        "pods_created": len(record["pods"]),
        "grouped_pods": sum(1 for p in record["pods"] if p[GROUP]),
        # KWOK's pod-ready stage: the time a bound pod takes to be Running (counted as stranded
        # while its gang waits for it, in every arm alike).
        "bind_to_running_p50_s": percentile(
            [p[RUNNING] - p[BOUND] for p in record["pods"] if p[RUNNING] is not None], 50
        ),
        "reasons": dict(
            sorted(_count(str(v.job["reason"]) for v in views if v.job.get("reason")).items())
        ),
    }
    out.update(_component_metrics(record, end))
    out.update(_waiting_metrics(record, views, end))
    out.update(queue_metrics(record, views))
    return out


def queue_metrics(record: Mapping[str, Any], views: Sequence[JobView]) -> dict[str, Any]:
    """A queueing arm's own times, from the Workloads it watched (``observed.workloads``, one per
    attempt, named ``<job>-<attempt>``): how many it admitted, the wait from the Workload's
    creation (its group complete) to ``Admitted`` in simulated minutes, and from ``Admitted`` to
    the last of its pods seen ungated, in real seconds. Empty for the other arms."""
    workloads = ((record.get("observed") or {}).get("workloads")) or []
    if not workloads:
        return {}
    attempts = {f"{v.job['name']}-{a.attempt['attempt']}": a for v in views for a in v.attempts}
    admitted = [w for w in workloads if w.get("Admitted_s") is not None]
    ungated = []
    for workload in admitted:
        attempt = attempts.get(workload["name"])
        times = [field(p, UNGATED) for p in attempt.pods] if attempt else []
        if times and all(t is not None for t in times):
            ungated.append(max(times) - float(workload["Admitted_s"]))
    waits = [sim_minutes(float(w["Admitted_s"]) - float(w["created_s"])) for w in admitted]
    return {
        "queue_workloads": len(workloads),
        "queue_admitted": len(admitted),
        "queue_admit_wait_p50_min": percentile(waits, 50),
        "queue_admit_wait_p95_min": percentile(waits, 95),
        "queue_ungate_after_admit_p50_s": percentile(ungated, 50),
        "queue_ungate_after_admit_p95_s": percentile(ungated, 95),
    }


def _waiting_metrics(
    record: Mapping[str, Any], views: Sequence[JobView], end: float
) -> dict[str, Any]:
    """How the wait splits by gang size, how soon a gang that waited for room got it, and where
    the waiting demand sat: gated (invisible to an autoscaler) or pending (visible)."""
    lags = room_to_last_bind(record, views)
    held, pending = held_and_pending_gpu_s(record, end)
    return {
        "wait_by_size": wait_by_size(views),
        "room_waited": len(lags),
        "room_to_bind_p50_min": _sim(percentile(lags, 50)),
        "room_to_bind_p95_min": _sim(percentile(lags, 95)),
        "held_at_end": held_at_end(views),
        "held_gpu_h": sim_hours(held),
        "pending_gpu_h": sim_hours(pending),
    }


def _sim(real_s: float | None) -> float | None:
    return None if real_s is None else sim_minutes(real_s)


def wait_by_size(views: Sequence[JobView]) -> dict[str, dict[str, Any]]:
    """Per gang size of the trace: jobs, how many ran whole in one zone, their wait p50/p95
    (simulated minutes, as ``wait_p50_min``)."""
    out: dict[str, dict[str, Any]] = {}
    for size in GANG_SIZES:
        of_size = [v for v in views if int(v.job["pods"]) == size]
        waits = [
            sim_minutes(float(v.whole_in_one_zone_s) - float(v.job["arrival_s"]))
            for v in of_size
            if v.whole_in_one_zone_s is not None
        ]
        out[str(size)] = {
            "jobs": len(of_size),
            "whole": len(waits),
            "p50_min": percentile(waits, 50),
            "p95_min": percentile(waits, 95),
        }
    return out


def held_at_end(views: Sequence[JobView]) -> int:
    """Jobs with a pod still gated (created with a scheduling gate, never seen without one, not
    deleted) when the run ended."""
    return sum(
        1
        for v in views
        if any(
            field(p, GATES) and field(p, UNGATED) is None and p[DELETED] is None
            for a in v.attempts
            for p in a.pods
        )
    )


def held_and_pending_gpu_s(record: Mapping[str, Any], end: float) -> tuple[float, float]:
    """GPU-seconds of demand not yet bound, split by whether an autoscaler could see it: *held*
    while the pod carried a scheduling gate (created → ungated, deleted or the end: Cluster
    Autoscaler and Karpenter skip gated pods), *pending* while it was ungated and unbound
    (created or ungated → bound, deleted or the end)."""
    gpus = [int(job["gpus_per_pod"]) for job in record["jobs"]]
    held = pending = 0.0
    for pod in record["pods"]:
        created = float(pod[CREATED])
        if created >= end:
            continue
        stop = min(_first(pod[BOUND], pod[DELETED], end), end)
        visible_from = created
        if field(pod, GATES):
            ungated = field(pod, UNGATED)
            visible_from = min(_first(ungated, pod[DELETED], end), stop)
            held += (visible_from - created) * gpus[int(pod[JOB])]
        pending += max(0.0, stop - visible_from) * gpus[int(pod[JOB])]
    return held, pending


def _first(*times: float | None) -> float:
    """The earliest of the times that are set (the last one always is)."""
    return min(float(t) for t in times if t is not None)


@dataclass(frozen=True)
class _Occupancy:
    """GPUs bound per zone over a run, as a step function: ``free[zone][i]`` holds on
    [``times[i]``, ``times[i + 1]``)."""

    times: list[float]
    free: dict[str, list[float]]

    @classmethod
    def of(cls, record: Mapping[str, Any], end: float) -> _Occupancy:
        gpus = [int(job["gpus_per_pod"]) for job in record["jobs"]]
        steps: dict[float, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for pod in record["pods"]:
            start, stop = _held(pod, end)
            if start >= end or pod[ZONE] not in record["zones"]:
                continue
            steps[start][pod[ZONE]] += gpus[int(pod[JOB])]
            steps[min(stop, end)][pod[ZONE]] -= gpus[int(pod[JOB])]
        times = sorted(steps)
        free: dict[str, list[float]] = {zone: [] for zone in record["zones"]}
        level = {zone: float(cap) for zone, cap in record["zones"].items()}
        for t in times:
            for zone, change in steps[t].items():
                level[zone] -= change
            for zone, series in free.items():
                series.append(level[zone])
        return cls(times, free)


def room_to_last_bind(record: Mapping[str, Any], views: Sequence[JobView]) -> list[float]:
    """For each attempt that ran whole in one zone after waiting for room, the real seconds from
    the moment room for it appeared to its last pod's bind.

    *Room* is counted in GPUs per zone from the raw record: a zone's GPUs minus those held by
    bound pods of other attempts (bound → deleted), the attempt's own pods left out. An attempt
    *waited for room* when no zone had room for its whole demand at some instant between its
    creation and its last bind; *room appeared* at the end of the last such instant, and room
    held in at least one zone (not necessarily the one it went to) from then until the last bind.
    Per zone, not per node: a gang that also waited for room on single nodes is counted from
    when its zone had enough GPUs in all, so this is the reaction lag plus any such wait."""
    occupancy = _Occupancy.of(record, float(record["end_s"]))
    lags = []
    for attempt in (a for v in views for a in v.attempts if a.whole_in_one_zone):
        binds = [float(p[BOUND]) for p in attempt.pods if p[BOUND] is not None]
        if not binds:
            continue
        room = _room_since(occupancy, attempt, max(binds))
        if room is not None:
            lags.append(max(binds) - room)
    return lags


def _room_since(occupancy: _Occupancy, attempt: AttemptView, last_bind: float) -> float | None:
    """When room for ``attempt`` last appeared before ``last_bind``; None if there was room all
    along since its creation."""
    demand = int(attempt.job["pods"]) * attempt.gpus_per_pod
    created = float(attempt.attempt["created_s"])
    times = occupancy.times
    i = bisect.bisect_left(times, last_bind) - 1
    while i >= 0:
        own: dict[str, float] = defaultdict(float)
        for pod in attempt.pods:
            start, stop = _held(pod, attempt.end_s)
            if start <= times[i] < stop:
                own[pod[ZONE]] += attempt.gpus_per_pod
        if not any(free[i] + own[z] >= demand for z, free in occupancy.free.items()):
            return times[i + 1]
        if times[i] <= created:
            return None
        i -= 1
    return None


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for value in values:
        counts[value] += 1
    return dict(counts)


def _component_metrics(record: Mapping[str, Any], end: float) -> dict[str, Any]:
    scrapes = record.get("scrapes") or {}
    hook = scrapes.get("webhook")
    out: dict[str, Any] = {"webhook_calls": 0, "webhook_p50_ms": None, "webhook_p99_ms": None}
    out["webhook_mean_ms"] = None
    # The apiserver's own histogram of the webhook's latency, cumulative counts by bucket bound.
    out["webhook_buckets"] = dict(hook["buckets"]) if hook and hook.get("count") else None
    if hook and hook.get("count"):
        p50 = histogram_quantile(0.5, hook["buckets"])
        p99 = histogram_quantile(0.99, hook["buckets"])
        out.update(
            webhook_calls=int(hook["count"]),
            webhook_p50_ms=None if p50 is None else 1000 * p50,
            webhook_p99_ms=None if p99 is None else 1000 * p99,
            webhook_mean_ms=1000 * float(hook["sum"]) / float(hook["count"]),
        )
    scheduler = scrapes.get("scheduler") or {}
    scheduled = int(scheduler.get("scheduled", 0))
    out.update(
        scheduler_scheduled=scheduled,
        scheduler_unschedulable=int(scheduler.get("unschedulable", 0)),
        scheduler_scheduled_per_s=scheduled / end if end > 0 else 0.0,
        bound_peak_per_s=_peak_binds(record),
    )
    return out


def _peak_binds(record: Mapping[str, Any]) -> int:
    """The most pods seen bound within one real second."""
    per_second: dict[int, int] = defaultdict(int)
    for pod in record["pods"]:
        if pod[BOUND] is not None and pod[BOUND] < record["end_s"]:
            per_second[int(pod[BOUND])] += 1
    return max(per_second.values(), default=0)


def timeline(record: Mapping[str, Any], step_s: float = 0.5) -> dict[str, list[float]]:
    """GPUs held usefully, stranded, and asked for by jobs not yet whole in one zone, sampled
    every ``step_s`` real seconds; ``t_min`` in simulated minutes. Also GPUs held per zone."""
    views = job_views(record)
    end = float(record["end_s"])
    n = int(end / step_s) + 1
    useful, stranded, waiting = [0.0] * n, [0.0] * n, [0.0] * n
    per_zone = {z: [0.0] * n for z in sorted(record["zones"])}

    def add(series: list[float], start: float, stop: float, gpus: float) -> None:
        first, last = math.ceil(start / step_s), min(n - 1, math.ceil(stop / step_s) - 1)
        for i in range(max(0, first), last + 1):
            series[i] += gpus

    for view in views:
        for attempt in view.attempts:
            gpus, whole = attempt.gpus_per_pod, attempt.whole_s
            for pod in attempt.pods:
                start, stop = _held(pod, end)
                if start >= end:
                    continue
                stop = min(stop, end)
                if pod[ZONE] in per_zone:
                    add(per_zone[pod[ZONE]], start, stop, gpus)
                if whole is None or attempt.split:
                    add(stranded, start, stop, gpus)
                else:
                    add(stranded, start, min(stop, whole), gpus)
                    add(useful, max(start, whole), stop, gpus)
        if view.job.get("submitted_s") is not None:
            until = view.whole_in_one_zone_s
            add(
                waiting,
                float(view.job["arrival_s"]),
                until if until is not None else end,
                int(view.job["gpus_per_pod"]) * int(view.job["pods"]),
            )
    return {
        "t_min": [sim_minutes(i * step_s) for i in range(n)],
        "useful": useful,
        "stranded": stranded,
        "waiting": waiting,
        **{f"zone:{z}": s for z, s in per_zone.items()},
    }


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample line of Prometheus text exposition."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", match.group(3)
        try:
            number = float(value)
        except ValueError:
            continue
        samples.append((name, dict(_LABEL.findall(labels)), number))
    return samples


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def webhook_histogram(text: str, webhook: str) -> dict[str, Any]:
    """The apiserver's ``apiserver_admission_webhook_admission_duration_seconds`` for pod CREATE
    admissions by ``webhook``, summed over its other labels: {buckets, sum, count}."""
    buckets: dict[str, float] = defaultdict(float)
    total = count = 0.0
    base = "apiserver_admission_webhook_admission_duration_seconds"
    for name, labels, value in parse_prometheus(text):
        if labels.get("name") != webhook or labels.get("operation") not in (None, "CREATE"):
            continue
        if name == f"{base}_bucket":
            buckets[labels["le"]] += value
        elif name == f"{base}_sum":
            total += value
        elif name == f"{base}_count":
            count += value
    return {"buckets": dict(buckets), "sum": total, "count": count}


def histogram_delta(after: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "buckets": {le: n - before["buckets"].get(le, 0.0) for le, n in after["buckets"].items()},
        "sum": after["sum"] - before["sum"],
        "count": after["count"] - before["count"],
    }


def scheduler_attempts(text: str) -> dict[str, float]:
    """``scheduler_schedule_attempts_total`` by result (scheduled, unschedulable, error)."""
    out: dict[str, float] = defaultdict(float)
    for name, labels, value in parse_prometheus(text):
        if name == "scheduler_schedule_attempts_total":
            out[labels.get("result", "")] += value
    return dict(out)
