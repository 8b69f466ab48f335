"""The cluster view against cluster size: memory, cold sync, and what one admission costs.

* Cold sync: every object of ``workload.cluster`` through ``cache.slim`` and ``ClusterView.apply``,
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

from bench.throughput import workload
from webhook.core import adapters, engine, reviews
from webhook.core.settings import Settings, ZoneChooser
from webhook.core.view import ClusterView
from webhook.kube import cache

RESOURCES = {(r.api_version, r.kind): r for r in cache.WATCHED}


def feed(nodes: int, pods_per_node: int, now: datetime) -> tuple[ClusterView, float, int]:
    """A view of the synthetic cluster; the seconds spent in slim+apply; objects applied."""
    view = ClusterView(zone_label=workload.ZONE_LABEL, kept=adapters.KEPT)
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


def _requests() -> tuple[reviews.Request, reviews.Request]:
    job_name, job_uid = workload.job_of(0)
    later = reviews.parse(
        workload.review(workload.training_pod(job_name, job_uid, "worker", 3, world=8, gpus=4))
    )
    first = reviews.parse(
        workload.review(
            workload.training_pod("fresh", "fresh-job-uid", "worker", 1, world=4, gpus=2)
        )
    )
    return later, first


def _timed_us(fn: Callable[..., object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e6


def measure_all(
    sizes: tuple[int, ...], pods_per_node: int = 30, runs: int = 400
) -> list[dict[str, Any]]:
    """Every size's view is built first; the admissions are then timed in interleaved rounds
    (a few runs on each view in turn), so a burst of load from elsewhere on a shared machine
    lands on every size alike instead of skewing the ratio between them."""
    # The first pod's zone decided at admission (the pin): the fit over a view that grows with the
    # cluster. Under the hold (podium's default) the first pod is only held, and the same fit runs
    # in the releaser.
    settings = Settings(zone_chooser=ZoneChooser.PIN)
    now = datetime.now(UTC)
    later, first = _requests()
    views: list[ClusterView] = []
    rows: list[dict[str, Any]] = []
    for nodes in sizes:
        gc.collect()
        view, spent, count = feed(nodes, pods_per_node, now)
        for request, reason in ((later, "recorded"), (first, "best-fit")):
            decided = engine.decide(request, view, settings, now=now)
            assert decided.reason == reason, (decided.reason, decided.detail)
        view._candidates.clear()  # the first admission of a pod shape scans the nodes once
        cold = _timed_us(lambda view=view: engine.decide(first, view, settings, now=now))
        views.append(view)
        rows.append(
            {
                "nodes": nodes,
                "pods": nodes * pods_per_node,
                "objects": count,
                "sync_s": spent,
                "first_cold_us": cold,
            }
        )
    samples: list[dict[str, list[float]]] = [{"later": [], "first": []} for _ in sizes]
    rounds = 20
    for _ in range(rounds):
        for view, sample in zip(views, samples, strict=True):
            for name, request in (("later", later), ("first", first)):
                for _ in range(max(1, runs // rounds)):
                    sample[name].append(
                        _timed_us(lambda r=request, v=view: engine.decide(r, v, settings, now=now))
                    )
    for row, sample in zip(rows, samples, strict=True):
        row["later_us"] = statistics.median(sample["later"])
        row["first_us"] = statistics.median(sample["first"])
    del views, view
    for row in rows:
        row["memory_bytes"] = held_bytes(row["nodes"], pods_per_node, now)
    return rows
