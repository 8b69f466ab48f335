"""The cluster view against cluster size: memory, cold sync, and what one admission costs.

* Cold sync: every object of ``workload.cluster`` through ``cache.slim`` and ``Snapshot.apply``,
  as the watch cache's list handler does on the loop thread (the lister and its threads are left
  out: they measure the transport, not the view). Timed without tracemalloc.
* Memory: the same feed again under tracemalloc; the traced bytes the finished view holds.
* Admission: ``engine.decide`` over the view (no I/O), median of many: a later pod of a job whose
  record exists, and the first pod of a new 4-pod job (zone chosen by capacity; the candidate
  cache warm, as it is after the first admission with that pod shape).
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bench import workload
from webhook import cache, engine, reviews
from webhook.settings import Settings
from webhook.snapshot import Snapshot

RESOURCES = {(r.api_version, r.kind): r for r in cache.WATCHED}


def feed(nodes: int, pods_per_node: int, now: datetime) -> tuple[Snapshot, float, int]:
    """A view of the synthetic cluster; the seconds spent in slim+apply; objects applied."""
    view = Snapshot(zone_label=workload.ZONE_LABEL)
    spent, count = 0.0, 0
    for obj in workload.cluster(nodes, pods_per_node, now=now):
        resource = RESOURCES[(obj["apiVersion"], obj["kind"])]
        if not resource.group:  # list items of built-in types come without apiVersion/kind
            del obj["apiVersion"], obj["kind"]
        started = time.perf_counter()
        view.apply("MODIFIED", cache.slim(resource, obj))
        spent += time.perf_counter() - started
        count += 1
    return view, spent, count


def held_bytes(nodes: int, pods_per_node: int, now: datetime) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        view, _, _ = feed(nodes, pods_per_node, now)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        del view
    finally:
        tracemalloc.stop()
    return held


def _median_us(fn: Callable[[], Any], runs: int) -> float:
    fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1e6)
    return statistics.median(samples)


def admissions(view: Snapshot, now: datetime, runs: int) -> dict[str, float]:
    settings = Settings()
    job_name, job_uid = workload.job_of(0)
    later = reviews.parse(
        workload.review(workload.training_pod(job_name, job_uid, "worker", 3, world=8, gpus=4))
    )
    first = reviews.parse(
        workload.review(
            workload.training_pod("fresh", "fresh-job-uid", "worker", 1, world=4, gpus=2)
        )
    )
    for request, reason in ((later, "recorded"), (first, "best-fit")):
        decided = engine.decide(request, view, settings, now=now)
        assert decided.reason == reason, (decided.reason, decided.detail)
    cold_started = time.perf_counter()
    view._candidates.clear()  # the first admission of a pod shape scans the nodes once
    engine.decide(first, view, settings, now=now)
    cold = (time.perf_counter() - cold_started) * 1e6
    return {
        "later_us": _median_us(lambda: engine.decide(later, view, settings, now=now), runs),
        "first_us": _median_us(lambda: engine.decide(first, view, settings, now=now), runs),
        "first_cold_us": cold,
    }


def measure(nodes: int, pods_per_node: int = 30, runs: int = 400) -> dict[str, Any]:
    now = datetime.now(UTC)
    gc.collect()
    view, spent, count = feed(nodes, pods_per_node, now)
    result: dict[str, Any] = {
        "nodes": nodes,
        "pods": nodes * pods_per_node,
        "objects": count,
        "sync_s": spent,
        **admissions(view, now, runs),
    }
    del view
    result["memory_bytes"] = held_bytes(nodes, pods_per_node, now)
    return result
