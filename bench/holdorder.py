"""The hold order, measured: how long gangs of each size wait behind podium's gate, with the head
reservation (``release.plan``'s rule that the first gang fitting nowhere keeps the zone it comes
closest to) and without it. ``python -m bench hold-order`` prints the table that
docs/benchmarks/hold-order.md shows.

A deterministic, discrete-time simulation of the releaser alone. Nothing here is timed: the
clock is simulated, the cluster is a ``ClusterView`` fed the objects the apiserver would send, and
each pass calls the pure ``release.plan`` exactly as ``podium serve``'s releaser does.

* **Cluster:** ``ZONES`` zones of ``NODES_PER_ZONE`` nodes with ``GPUS_PER_NODE`` GPUs each; every
  pod asks for one GPU, so a 32-pod gang needs a whole empty zone.
* **Jobs:** a PyTorchJob per gang (Master + Workers), its pods created at its arrival behind
  podium's gate, as admission in ``zone-chooser: hold`` leaves them (``mutation.hold``).
* **A pass** every ``PASS_SECONDS``: jobs that ran their time end (their pods go), new jobs
  arrive, ``release.plan`` runs, every released pod is patched with ``release.release_patch`` and
  bound first-fit to a node of its zone (kube-scheduler's part); its run time starts when the
  whole gang is bound.
* **Traces:** ``starvation`` — the cluster busy with 2-pod gangs, one 32-pod gang arrives, and a
  2-pod gang keeps arriving every few minutes (more than enough to refill whatever frees);
  ``mixed`` — gangs of 2…32 pods in seeded random order and arrival times.
* ``head=False`` switches the head reservation off (``hold-order: fit-first``): every gang that
  fits somewhere goes, in FIFO order.

``hold-timeout-seconds`` is 0 (never) here, so a starved gang stays starved: the figure is about
the order rule, not the timeout that would eventually pin it anyway.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch

from webhook.core import adapters, labels, mutation, release
from webhook.core.settings import HoldOrder, PolicyMode, Settings
from webhook.core.view import ClusterView

NAMESPACE = "study"
ZONES = ("zone-a", "zone-b")
NODES_PER_ZONE = 4
GPUS_PER_NODE = 8
PASS_SECONDS = 30
#: The simulation's epoch (any fixed time: the figures are differences).
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SIZES = (2, 4, 8, 16, 32)
SETTINGS = Settings(hold_timeout_seconds=0, policy_mode=PolicyMode.NONE)


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    name: str
    pods: int
    arrive_s: int
    run_s: int


@dataclasses.dataclass(slots=True)
class Outcome:
    job: Job
    released_s: int | None = None
    #: When every pod of the gang was bound: its run time starts then.
    whole_s: int | None = None
    done: bool = False

    @property
    def wait_s(self) -> int | None:
        return None if self.released_s is None else self.released_s - self.job.arrive_s


# -- traces ----------------------------------------------------------------------------------


def starvation_trace(*, horizon_s: int = 6 * 3600) -> list[Job]:
    """The cluster filled with 2-pod gangs (staggered ends), a 32-pod gang at 10 minutes, and a
    2-pod gang every 2 minutes after it, each running 40 minutes."""
    jobs = [
        Job(f"fill-{i:02d}", 2, 0, 600 + 120 * i)
        for i in range(len(ZONES) * NODES_PER_ZONE * GPUS_PER_NODE // 2)
    ]
    jobs.append(Job("big-32", 32, 600, 1800))
    jobs += [Job(f"small-{i:03d}", 2, 660 + 120 * i, 2400) for i in range((horizon_s - 660) // 120)]
    return jobs


def mixed_trace(*, seed: int = 1, count: int = 120) -> list[Job]:
    """Gangs of 2…32 pods (small ones more often), arriving ~ every 4 minutes (Poisson), running
    20–60 minutes: about 94 % of the cluster's GPUs asked for on average, so queues form."""
    rng = random.Random(seed)
    weights = (8, 4, 3, 2, 1)
    t, jobs = 0, []
    for i in range(count):
        size = rng.choices(SIZES, weights)[0]
        t += int(rng.expovariate(1 / 240))
        jobs.append(Job(f"mixed-{i:03d}-{size}", size, t, 60 * rng.randint(20, 60)))
    return jobs


# -- objects ---------------------------------------------------------------------------------


def _stamp(seconds: int) -> str:
    return (EPOCH + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _nodes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"{zone}-{i}", "labels": {labels.ZONE_LABEL: zone}},
            "spec": {},
            "status": {
                "allocatable": {"nvidia.com/gpu": str(GPUS_PER_NODE), "cpu": "64", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for zone in ZONES
        for i in range(NODES_PER_ZONE)
    ]


def _job_object(job: Job) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        gpu = {"nvidia.com/gpu": "1"}
        container = {"name": "pytorch", "resources": {"requests": gpu, "limits": gpu}}
        return {"replicas": n, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": job.name,
            "namespace": NAMESPACE,
            "uid": f"uid-{job.name}",
            "creationTimestamp": _stamp(job.arrive_s),
        },
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(job.pods - 1)}},
    }


def _pods(job: Job) -> list[dict[str, Any]]:
    """The training-operator's pods of the job, as it creates them (labels, controller owner)."""
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": job.name,
        "uid": f"uid-{job.name}",
        "controller": True,
    }
    out = []
    for rank in range(job.pods):
        rtype, index = ("master", 0) if rank == 0 else ("worker", rank - 1)
        gpu = {"nvidia.com/gpu": "1"}
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job.name}-{rtype}-{index}",
                    "namespace": NAMESPACE,
                    "uid": f"uid-{job.name}-{rank}",
                    "creationTimestamp": _stamp(job.arrive_s),
                    "labels": {
                        "training.kubeflow.org/job-name": job.name,
                        "training.kubeflow.org/replica-type": rtype,
                        "training.kubeflow.org/replica-index": str(index),
                        "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    },
                    "ownerReferences": [owner],
                },
                "spec": {
                    "containers": [
                        {"name": "pytorch", "resources": {"requests": gpu, "limits": gpu}}
                    ]
                },
                "status": {"phase": "Pending"},
            }
        )
    return out


# -- the simulation --------------------------------------------------------------------------


class _Cluster:
    """The objects and the view the releaser reads, and the scheduler's binding of pods."""

    def __init__(self) -> None:
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {labels.ENABLED: "true"}},
        }
        self.view = ClusterView(zone_label=labels.ZONE_LABEL, kept=adapters.KEPT)
        self.pods: dict[str, dict[str, Any]] = {}
        self.free: dict[str, int] = {}
        self.zone_of: dict[str, str] = {}
        for obj in [namespace, *_nodes()]:
            self.view.apply("ADDED", obj)
        for node in _nodes():
            self.free[node["metadata"]["name"]] = GPUS_PER_NODE
            self.zone_of[node["metadata"]["name"]] = node["metadata"]["labels"][labels.ZONE_LABEL]

    def submit(self, job: Job) -> None:
        self.view.apply("ADDED", _job_object(job))
        pods = _pods(job)
        gang = adapters.recognise(pods[0], NAMESPACE, self.view)
        assert gang is not None, job
        for pod in pods:
            held = mutation.hold(pod, gang_key=gang.key).pod
            self.pods[held["metadata"]["name"]] = held
            self.view.apply("ADDED", held)

    def release(self, planned: release.Release) -> None:
        """Ungate the gang's pods as the releaser does, then bind each first-fit in its zone."""
        for ref in planned.pods:
            pod = self.pods[ref.name]
            patched = jsonpatch.apply_patch(pod, release.release_patch(pod, planned, SETTINGS))
            node = next(
                (n for n, z in self.zone_of.items() if z == planned.zone and self.free[n] >= 1),
                None,
            )
            if node is not None:
                self.free[node] -= 1
                patched["spec"]["nodeName"] = node
                patched["status"] = {"phase": "Running"}
            self.pods[ref.name] = patched
            self.view.apply("MODIFIED", patched)

    def bound(self, job: Job) -> bool:
        return all(
            p["spec"].get("nodeName")
            for p in self.pods.values()
            if p["metadata"]["name"].startswith(job.name + "-")
        )

    def finish(self, job: Job) -> None:
        for name in [n for n in self.pods if n.startswith(job.name + "-")]:
            pod = self.pods.pop(name)
            if node := pod["spec"].get("nodeName"):
                self.free[node] += 1
            self.view.apply("DELETED", pod)
        self.view.apply("DELETED", _job_object(job))


def simulate(jobs: Sequence[Job], *, head: bool, horizon_s: int) -> list[Outcome]:
    """Run the trace for ``horizon_s`` simulated seconds; each job's outcome."""
    cluster = _Cluster()
    outcomes = {j.name: Outcome(j) for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.arrive_s, j.name))
    counts: dict[str, int] = {}
    nxt = 0
    settings = dataclasses.replace(
        SETTINGS, hold_order=HoldOrder.OLDEST_FIRST if head else HoldOrder.FIT_FIRST
    )
    for now_s in range(0, horizon_s + 1, PASS_SECONDS):
        for outcome in outcomes.values():
            whole = outcome.whole_s
            if not outcome.done and whole is not None and whole + outcome.job.run_s <= now_s:
                cluster.finish(outcome.job)
                outcome.done = True
        while nxt < len(arrivals) and arrivals[nxt].arrive_s <= now_s:
            cluster.submit(arrivals[nxt])
            nxt += 1
        planned = release.plan(
            cluster.view, settings, now=EPOCH + timedelta(seconds=now_s), stable=counts
        )
        counts = dict(planned.counts)
        for rel in planned.releases:
            cluster.release(rel)
            outcomes[rel.held.gang.owner.name].released_s = now_s
        for outcome in outcomes.values():
            fresh = outcome.released_s is not None and outcome.whole_s is None
            if fresh and cluster.bound(outcome.job):
                outcome.whole_s = now_s
    return list(outcomes.values())


# -- the figure ------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    trace: str
    head: bool
    size: int
    jobs: int
    released: int
    p50_min: float | None
    p95_min: float | None


def rows(trace: str, outcomes: Sequence[Outcome], *, head: bool) -> list[Row]:
    """Wait p50/p95 (simulated minutes) per gang size, over the gangs released; a gang still
    held at the horizon counts as not released (and its wait as unknown, not as the horizon)."""
    out = []
    for size in sorted({o.job.pods for o in outcomes}):
        mine = [o for o in outcomes if o.job.pods == size]
        waits = [o.wait_s / 60 for o in mine if o.wait_s is not None]
        out.append(
            Row(
                trace,
                head,
                size,
                len(mine),
                len(waits),
                round(statistics.median(waits), 1) if waits else None,
                round(percentile(waits, 95), 1) if waits else None,
            )
        )
    return out


def study(*, horizon_s: int = 6 * 3600, seed: int = 1) -> dict[str, Any]:
    """Both traces, with and without the head reservation: the rows and the big gang's wait."""
    traces = {"starvation": starvation_trace(horizon_s=horizon_s), "mixed": mixed_trace(seed=seed)}
    table: list[Row] = []
    big: dict[str, int | None] = {}
    for name, jobs in traces.items():
        for head in (True, False):
            outcomes = simulate(jobs, head=head, horizon_s=horizon_s)
            table += rows(name, outcomes, head=head)
            if name == "starvation":
                (gang,) = [o for o in outcomes if o.job.name == "big-32"]
                big["with head" if head else "without head"] = gang.wait_s
    return {
        "rows": [dataclasses.asdict(r) for r in table],
        "big_wait_s": big,
        "horizon_s": horizon_s,
    }


def markdown(result: dict[str, Any]) -> str:
    """The table for docs/benchmarks/hold-order.md."""

    def minutes(v: float | None) -> str:
        return "—" if v is None else f"{v:g}"

    hours = result["horizon_s"] / 3600
    lines = [
        "# The hold order: gang waits by size, with and without the head reservation",
        "",
        "Written by `python -m bench hold-order` (bench/holdorder.py) from its raw output "
        "(hold-order.json); do not edit by hand. A deterministic simulation of the releaser's "
        'pure `release.plan` on a simulated clock (docs/design.md, "Hold and release"): '
        "`starvation` fills the cluster with 2-pod gangs, submits one 32-pod gang at minute 10 "
        "and a 2-pod gang every 2 minutes after it (40 minutes each); `mixed` submits gangs of "
        "2–32 pods (seeded). Head reservation off is a study hook, not a setting. "
        "hold-timeout-seconds is 0, so a starved gang stays starved.",
        "",
        f"Simulated {hours:g} h; {len(ZONES)} zones × {NODES_PER_ZONE} nodes × "
        f"{GPUS_PER_NODE} GPUs, 1 GPU per pod; a releaser pass every {PASS_SECONDS} s; "
        "waits in simulated minutes from arrival to release.",
        "",
        "| trace | head reservation | gang size | gangs | released | wait p50 | wait p95 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['trace']} | {'on' if r['head'] else 'off'} | {r['size']} | {r['jobs']} | "
            f"{r['released']} | {minutes(r['p50_min'])} | {minutes(r['p95_min'])} |"
        )
    lines.append("")
    for arm, wait in result["big_wait_s"].items():
        said = "never released (starved)" if wait is None else f"released after {wait / 60:g} min"
        lines.append(f"* starvation trace, 32-pod gang, {arm}: {said}")
    return "\n".join(lines) + "\n"
