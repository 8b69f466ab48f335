"""bench/latency/release.py without a cluster: its measurement on the API twin (the plan's one
release carried out, the time from the decision to the last pod's PATCH), and its table."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.latency import release as bench
from tests.core.test_release import cluster, held_job
from webhook.core import adapters
from webhook.core.view import ClusterView
from webhook.kube import twins


def test_one_release_is_timed_from_the_decision_to_the_last_pods_patch() -> None:
    now = datetime.now(UTC)
    api = twins.InMemoryObjects(delay=0.001)
    for obj in [*cluster(), *held_job("gang", 16, now, gpus=1)]:
        api.put(obj)
    view = ClusterView.from_objects(
        list(api.objects.values()), zone_label=bench.SETTINGS.zone_label, kept=adapters.KEPT
    )
    ticks = iter(range(1000))
    result = asyncio.run(bench.release_once(api, view, clock=lambda: float(next(ticks))))
    assert result["pods"] == 16 and result["error"] is None
    pods = [o for (_, kind, _, _), o in api.objects.items() if kind == "Pod"]
    assert pods and not any(p["spec"].get("schedulingGates") for p in pods)
    # The clock was read once at the decision and once per PATCH: the last one minus the first.
    assert result["seconds"] == 16.0
    assert [c[0] for c in api.calls if c[1] != "Pod"] == ["create", "create"]


def test_the_summary_is_the_median_of_the_runs_per_version_and_size() -> None:
    runs = [
        {"rev": rev, "size": size, "seconds": s}
        for rev, size, s in [
            ("old", 8, 0.3),
            ("old", 8, 0.1),
            ("old", 8, 0.2),
            ("new", 8, 0.05),
            ("new", 512, 2.0),
        ]
    ]
    rows = bench.summary(runs)
    assert [(r["size"], r["rev"], r["runs"], r["median"]) for r in rows] == [
        (8, "new", 1, 0.05),
        (8, "old", 3, 0.2),
        (512, "new", 1, 2.0),
    ]
    text = bench.table(rows)
    assert "| 8 | old | 3 | 200 | 100 | 300 | 0 | 0 |" in text.splitlines()


def test_cpu_seconds_of_a_process_grow_as_it_works() -> None:

    before = bench.cpu_seconds([os.getpid()])
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert bench.cpu_seconds([os.getpid()]) - before >= 0.03


def test_a_version_is_its_tree(tmp_path: Path) -> None:
    assert bench.tree("WORKTREE", tmp_path) == bench.ROOT
    assert bench.tree(str(tmp_path), tmp_path) == tmp_path.resolve()
