"""One arm, one seed, on a fresh local control plane: replay the trace, watch where pods land,
end or retry jobs as their pods fare, scrape the components' own metrics. Returns the raw record
that `analysis` reads.

How a job is made (the same for every arm): a ``kubeflow.org/v1`` PyTorchJob object (the CRD from
``testbed/crds``) with a Master and ``n - 1`` Workers, each asking for the job's GPUs
per pod; then, after `OPERATOR_DELAY_S` (the operator's reconcile), its pods, created one after
another in a shuffled order as the training-operator creates them (its labels, a controller
ownerReference to the job, the env it sets), each through `Arm.pod`. A PyTorchJob rather than bare
pods because podium reads a gang's demand from the job object and identifies the job by its
controller owner, as in a real cluster; pods made by the harness rather than the operator because
the training-operator is not part of the control plane here, and the harness then knows exactly
when each job's pods were asked for.

How a job ends: when every pod of its gang is Running in one zone, the runner deletes its pods
(grace 0) and its PyTorchJob ``duration`` later. Deleting rather than KWOK's pod-complete stage
because a gang's clock starts only when its *last* pod runs, which no per-pod stage knows (and KWOK
completes only pods owned by batch Jobs).

How a job fails, and is tried again: a gang whose pods are not all Running ``timeout_s`` after its
first pod was bound (torchrun's rendezvous gives up), or that runs whole but split across zones
(under zone isolation its collectives hang until PyTorch's collective timeout), has failed: the
runner deletes that attempt's pods and creates the gang's pods anew, as the operator restarts a
failed job. The job object stays, so podium's record of the job stays too. ``timeout_s = 0``
turns this off: a partial gang then holds what it has until the run ends, and a split gang ends
after its duration like any other.
"""

from __future__ import annotations

import heapq
import http.client
import json
import queue
import random
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.placement import analysis, trace
from bench.placement.arms import ATTEMPT_LABEL, JOB_NAME_LABEL, ZONE_LABEL, Arm, RunContext
from bench.placement.trace import TraceJob
from testbed.controlplane import (
    CRD_DIR,
    SCHEDULER_GANG_GATES,
    SCHEDULER_GANG_RUNTIME_CONFIG,
    ApiError,
    ControlPlaneError,
    LocalCluster,
)

NAMESPACE = "study"
#: The operator's reconcile between a job's creation and its first pod.
OPERATOR_DELAY_S = 0.3
#: After the last submission, how long jobs get to finish before the run is cut.
DRAIN_S = 35.0
#: A gang not whole this long after its first pod was bound, or whole but split, fails and is
#: retried (simulated minutes; PyTorch's default collective timeout is 10 minutes, torchrun's
#: rendezvous timeout 15).
TIMEOUT_SIM_MINUTES = 10.0
#: Jobs being submitted, retried or finished at once (threads).
WORKERS = 12
#: How long the run waits, at its end, for the finished jobs' pods to be seen deleted.
FINISHED_GONE_S = 60.0
CRDS = ("kubeflow.org_pytorchjobs.yaml", "cilium.io_ciliumnetworkpolicies.yaml")


def pytorchjob(job: TraceJob, namespace: str) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        gpus = {"nvidia.com/gpu": str(job.gpus_per_pod)}
        container = {
            "name": "pytorch",
            "image": "trainer:1",
            "resources": {"requests": dict(gpus), "limits": dict(gpus)},
        }
        return {
            "replicas": n,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container]}},
        }

    specs = {"Master": replica(1)}
    if job.pods > 1:
        specs["Worker"] = replica(job.pods - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job.name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": specs},
    }


def operator_pods(
    job: TraceJob, job_obj: Mapping[str, Any], attempt: int = 0
) -> list[dict[str, Any]]:
    """The pods the training-operator v1 makes for the job: labels, controller owner, env.
    A retry's pods (``attempt`` > 0) are new pods: their names end in ``-r<attempt>``."""
    meta = job_obj["metadata"]
    owner = {
        "apiVersion": job_obj["apiVersion"],
        "kind": job_obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pods = []
    for rank in range(job.pods):
        rtype, index = ("master", 0) if rank == 0 else ("worker", rank - 1)
        labels = {
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            JOB_NAME_LABEL: job.name,
            "training.kubeflow.org/replica-type": rtype,
            "training.kubeflow.org/replica-index": str(index),
            ATTEMPT_LABEL: str(attempt),
        }
        if rtype == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        gpus = {"nvidia.com/gpu": str(job.gpus_per_pod)}
        env = [
            {"name": "MASTER_ADDR", "value": f"{job.name}-master-0"},
            {"name": "MASTER_PORT", "value": "23456"},
            {"name": "WORLD_SIZE", "value": str(job.pods)},
            {"name": "RANK", "value": str(rank)},
            {"name": "PET_NNODES", "value": str(job.pods)},
        ]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job.name}-{rtype}-{index}" + (f"-r{attempt}" if attempt else ""),
                    "namespace": meta["namespace"],
                    "labels": labels,
                    "ownerReferences": [owner],
                },
                "spec": {
                    "restartPolicy": "OnFailure",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "trainer:1",
                            "env": env,
                            "resources": {"requests": dict(gpus), "limits": dict(gpus)},
                        }
                    ],
                },
            }
        )
    return pods


@dataclass
class Attempt:
    """One try at running a job's gang: its pods, created anew."""

    number: int
    created_s: float
    first_bound_s: float | None = None
    whole_s: float | None = None
    zones: set[str] = field(default_factory=set)
    ended_s: float | None = None
    #: "finished", "timeout" (not whole in time), "split" (whole across zones), or None.
    outcome: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "attempt": self.number,
            "created_s": _round(self.created_s),
            "first_bound_s": _round(self.first_bound_s),
            "whole_s": _round(self.whole_s),
            "zones": sorted(self.zones),
            "ended_s": _round(self.ended_s),
            "outcome": self.outcome,
        }


class Watch(threading.Thread):
    """Lists, then watches, the objects under ``path`` (a namespaced collection), handing each
    event to `observe` with the time it was seen, in real seconds after ``t0``; a failure is kept
    in ``error`` for the runner to report."""

    def __init__(self, cluster: LocalCluster, path: str, t0: float, *, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.cluster, self.path, self.t0 = cluster, path, t0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.resource_version = ""

    def now(self) -> float:
        return time.monotonic() - self.t0

    def observe(self, kind: str, obj: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            listed = self.cluster.request("GET", self.path)
            for obj in listed["items"]:
                self.observe("ADDED", obj)
            self.resource_version = listed["metadata"]["resourceVersion"]
            while not self.stopping.is_set():
                self._watch_once()
        except BaseException as error:  # reported by the runner
            self.error = error

    def _watch_once(self) -> None:
        cluster = self.cluster
        context = ssl.create_default_context(cafile=str(cluster.ca_file))
        context.load_cert_chain(str(cluster.admin_cert_file), str(cluster.admin_key_file))
        connection = http.client.HTTPSConnection(
            "127.0.0.1", cluster.apiserver_port, timeout=30, context=context
        )
        path = (
            f"{self.path}?watch=1&allowWatchBookmarks=true"
            f"&timeoutSeconds=5&resourceVersion={self.resource_version}"
        )
        try:
            connection.request("GET", path, headers={"Accept": "application/json"})
            response = connection.getresponse()
            if response.status != 200:
                raise ApiError("GET", path, response.status, response.read().decode())
            while True:
                line = response.readline()
                if not line:
                    return
                event = json.loads(line)
                obj = event.get("object") or {}
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch {self.path}: {obj}")
                self.resource_version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    self.observe(event["type"], obj)
        finally:
            connection.close()


class PodWatch(Watch):
    """Watches the study namespace's pods and records, per pod, when it was first seen created,
    bound (and the zone of its node), Running and deleted, the scheduling gates it was created
    with and when it was first seen without them. Tells the runner through ``events`` when an
    attempt's first pod is bound (``("bound", job, attempt, t)``) and when all its pods run
    (``("whole", job, attempt, t)``)."""

    def __init__(
        self,
        cluster: LocalCluster,
        namespace: str,
        jobs: Sequence[TraceJob],
        node_zone: Mapping[str, str],
        t0: float,
    ) -> None:
        super().__init__(cluster, f"/api/v1/namespaces/{namespace}/pods", t0, name="pod-watch")
        self.namespace, self.node_zone = namespace, node_zone
        self.jobs = {j.name: j for j in jobs}
        self.index = {j.name: j.index for j in jobs}
        self.pods: dict[str, list[Any]] = {}
        self.running: dict[tuple[str, int], set[str]] = {}
        self.bound: set[tuple[str, int]] = set()
        self.whole: set[tuple[str, int]] = set()
        self.reason: dict[str, str] = {}
        self.events: queue.Queue[tuple[str, str, int, float]] = queue.Queue()

    def observe(self, kind: str, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        job = labels.get(JOB_NAME_LABEL)
        if job not in self.index:
            return
        attempt = int(labels.get(ATTEMPT_LABEL, "0"))
        key = (job, attempt)
        now, name = self.now(), meta["name"]
        with self.lock:
            row = self.pods.get(name)
            spec = pod.get("spec") or {}
            gates = sorted(g["name"] for g in spec.get("schedulingGates") or [])
            if row is None:
                group = (spec.get("schedulingGroup") or {}).get("podGroupName")
                row = [self.index[job], None, now, None, None, None, group, attempt]
                row += [",".join(gates) or None, None, None]
                self.pods[name] = row
                reason = (meta.get("annotations") or {}).get("podium.dev/reason")
                if reason and job not in self.reason:
                    self.reason[job] = reason
            if row[analysis.GATES] and not gates and row[analysis.UNGATED] is None:
                row[analysis.UNGATED] = now
            node = spec.get("nodeName")
            if node and row[analysis.BOUND] is None:
                row[analysis.BOUND], row[analysis.ZONE] = now, self.node_zone.get(node)
                row[analysis.NODE] = node
                if key not in self.bound:
                    self.bound.add(key)
                    self.events.put(("bound", job, attempt, now))
            running = self.running.setdefault(key, set())
            if kind == "DELETED":
                if row[analysis.DELETED] is None:
                    row[analysis.DELETED] = now
                running.discard(name)
                return
            if (pod.get("status") or {}).get("phase") == "Running":
                if row[analysis.RUNNING] is None:
                    row[analysis.RUNNING] = now
                running.add(name)
                if len(running) == self.jobs[job].pods and key not in self.whole:
                    self.whole.add(key)
                    self.events.put(("whole", job, attempt, now))

    def zones(self, job: str, attempt: int) -> set[str]:
        index = self.index[job]
        with self.lock:
            return {
                row[analysis.ZONE]
                for row in self.pods.values()
                if row[0] == index and row[analysis.ATTEMPT] == attempt and row[analysis.ZONE]
            }


class Layout:
    """The study's nodes: 3 unequal zones of 8-GPU KWOK nodes (`trace.ZONE_NODES`). The topology
    study's layout (`bench.placement.topology.TopologyLayout`) adds network levels below the
    zone."""

    #: Node labels each run records per node (``node_labels`` in the record), for the analysis.
    recorded_labels: tuple[str, ...] = ()

    def zone_gpus(self) -> dict[str, int]:
        return {z: n * trace.GPUS_PER_NODE for z, n in trace.ZONE_NODES.items()}

    def capacity(self) -> int:
        return trace.capacity()

    def create_nodes(self, cluster: LocalCluster) -> None:
        cluster.create_fake_nodes(trace.zones(), timeout=180)

    def describe(self) -> dict[str, Any] | None:
        """What the record keeps of the layout beyond the zones (None: nothing)."""
        return None


def start_cluster(
    bin_dir: Path, work_dir: Path, *, gang_gates: bool = True, layout: Layout | None = None
) -> LocalCluster:
    """The study's control plane: the scheduler's gang gates on (for every arm but those made for
    clusters without them, `Arm.gang_gates`), the layout's KWOK nodes (by default 3 zones of
    8-GPU nodes), the PyTorchJob and Cilium CRDs."""
    cluster = LocalCluster(
        bin_dir,
        work_dir,
        feature_gates=SCHEDULER_GANG_GATES if gang_gates else None,
        runtime_config=SCHEDULER_GANG_RUNTIME_CONFIG if gang_gates else None,
    )
    cluster.start()
    try:
        (layout or Layout()).create_nodes(cluster)
        cluster.install_crds([CRD_DIR / name for name in CRDS])
    except BaseException:
        cluster.stop()
        raise
    return cluster


def run_arm(
    arm: Arm,
    seed: int,
    jobs: Sequence[TraceJob],
    bin_dir: Path,
    work_dir: Path,
    *,
    drain_s: float = DRAIN_S,
    timeout_s: float = TIMEOUT_SIM_MINUTES / trace.SIM_MINUTES_PER_SECOND,
    log: Any = print,
    layout: Layout | None = None,
) -> dict[str, Any]:
    """Replay ``jobs`` with ``arm`` on a fresh cluster in ``work_dir`` (its nodes: ``layout``,
    by default the study's three zones); the raw record."""
    started = time.monotonic()
    layout = layout or Layout()
    cluster = start_cluster(bin_dir, work_dir / "cluster", gang_gates=arm.gang_gates, layout=layout)
    ctx = RunContext(cluster, NAMESPACE, work_dir)
    try:
        cluster.create_namespace(NAMESPACE, labels=dict(arm.namespace_labels))
        arm.start(ctx)
        setup_s = time.monotonic() - started
        log(f"[{arm.name} seed {seed}] cluster and arm up in {setup_s:.0f}s; replaying")
        replay = Replay(arm, seed, jobs, ctx, timeout_s=timeout_s, log=log, layout=layout)
        return replay.run(drain_s=drain_s, setup_s=setup_s)
    finally:
        arm.stop()
        cluster.stop()


def _scrape(cluster: LocalCluster, arm: Arm) -> dict[str, Any]:
    scheduler = analysis.scheduler_attempts(cluster.metrics("kube-scheduler"))
    hook = None
    if arm.webhook:
        hook = analysis.webhook_histogram(cluster.metrics("kube-apiserver"), arm.webhook)
    return {"scheduler": scheduler, "webhook": hook}


class Replay:
    """One replay of a trace by one arm on a running cluster: submits jobs at their arrival
    times, finishes them ``duration`` after their whole gang runs in one zone, retries a gang
    that failed (see the module's doc), and stops when every job has finished or at the horizon
    (the last arrival plus ``drain_s``)."""

    def __init__(
        self,
        arm: Arm,
        seed: int,
        jobs: Sequence[TraceJob],
        ctx: RunContext,
        *,
        timeout_s: float,
        log: Any,
        layout: Layout | None = None,
    ) -> None:
        self.arm, self.seed, self.jobs, self.ctx, self.log = arm, seed, jobs, ctx, log
        self.layout = layout or Layout()
        self.timeout_s = timeout_s
        rng = random.Random(seed)  # the operator's pod order, the same for every arm
        self.orders = {j.name: rng.sample(range(j.pods), j.pods) for j in jobs}
        self.by_name = {j.name: j for j in jobs}
        self.submitted: dict[str, float] = {}
        self.job_objs: dict[str, Mapping[str, Any]] = {}
        self.attempts: dict[str, list[Attempt]] = {j.name: [] for j in jobs}
        self.finished: set[str] = set()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.t0 = 0.0
        self._due: list[tuple[float, int, str, str, int]] = []
        self._seq = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _error(self, what: str, error: Exception) -> None:
        with self.lock:
            self.errors.append(f"{what}: {error}"[:500])

    def _create_pods(self, job: TraceJob, number: int) -> None:
        with self.lock:
            self.attempts[job.name].append(Attempt(number, self.now()))
            job_obj = self.job_objs[job.name]
        pods = operator_pods(job, job_obj, number)
        for i in self.orders[job.name]:
            pod = self.arm.pod(job, pods[i])
            self.ctx.cluster.request("POST", f"/api/v1/namespaces/{self.ctx.namespace}/pods", pod)

    def _delete_pods(self, job: TraceJob, attempt: int | None = None) -> None:
        selector = f"{JOB_NAME_LABEL}={job.name}"
        if attempt is not None:
            selector += f",{ATTEMPT_LABEL}={attempt}"
        self.ctx.cluster.request(
            "DELETE",
            f"/api/v1/namespaces/{self.ctx.namespace}/pods",
            query={"labelSelector": selector, "gracePeriodSeconds": "0"},
        )

    def submit(self, job: TraceJob) -> None:
        cluster, ns = self.ctx.cluster, self.ctx.namespace
        try:
            with self.lock:
                self.submitted[job.name] = self.now()
            job_obj = cluster.request(
                "POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", pytorchjob(job, ns)
            )
            with self.lock:
                self.job_objs[job.name] = job_obj
            self.arm.before_pods(self.ctx, job, job_obj)
            time.sleep(OPERATOR_DELAY_S)
            self._create_pods(job, 0)
        except Exception as error:  # counted and reported; the run goes on
            self._error(f"submit {job.name}", error)

    def retry(self, job: TraceJob, failed: int) -> None:
        """The operator restarts a failed gang: its pods deleted, new ones created."""
        try:
            self.arm.ending(self.ctx, job, failed, succeeded=False)
            self._delete_pods(job, failed)
            self._create_pods(job, failed + 1)
        except Exception as error:
            self._error(f"retry {job.name}", error)

    def finish(self, job: TraceJob, number: int) -> None:
        try:
            self.arm.ending(self.ctx, job, number, succeeded=True)
            self._delete_pods(job)
            self.ctx.cluster.request(
                "DELETE",
                f"/apis/kubeflow.org/v1/namespaces/{self.ctx.namespace}/pytorchjobs/{job.name}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
        except Exception as error:
            self._error(f"finish {job.name}", error)

    def _at(self, t: float, kind: str, job: str, attempt: int) -> None:
        self._seq += 1
        heapq.heappush(self._due, (t, self._seq, kind, job, attempt))

    def _attempt(self, job: str, number: int) -> Attempt | None:
        with self.lock:
            attempts = self.attempts[job]
            return attempts[number] if number < len(attempts) else None

    def _on_watch(self, watch: PodWatch) -> None:
        """Bound and whole attempts: when they time out, split-fail or finish."""
        while True:
            try:
                kind, job, number, t = watch.events.get_nowait()
            except queue.Empty:
                return
            attempt = self._attempt(job, number)
            if attempt is None or attempt.outcome is not None:
                continue
            if kind == "bound":
                attempt.first_bound_s = t
                if self.timeout_s > 0:
                    self._at(t + self.timeout_s, "timeout", job, number)
                continue
            attempt.whole_s, attempt.zones = t, watch.zones(job, number)
            if len(attempt.zones) > 1 and self.timeout_s > 0:
                self._at(t + self.timeout_s, "split", job, number)
            else:
                self._at(t + self.by_name[job].duration_s, "finished", job, number)

    def _on_due(self, pool: ThreadPoolExecutor, now: float) -> None:
        while self._due and self._due[0][0] <= now:
            _, _, kind, name, number = heapq.heappop(self._due)
            attempt = self._attempt(name, number)
            if attempt is None or attempt.outcome is not None:
                continue
            if kind == "timeout" and attempt.whole_s is not None:
                continue  # whole in time: its own end is scheduled
            attempt.outcome, attempt.ended_s = kind, now
            job = self.by_name[name]
            if kind == "finished":
                with self.lock:
                    self.finished.add(name)
                pool.submit(self.finish, job, number)
            else:
                pool.submit(self.retry, job, number)

    def drive(self, watch: PodWatch, horizon: float) -> None:
        arrivals = sorted(self.jobs, key=lambda j: j.arrival_s)
        next_arrival, last_log = 0, 0.0
        with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="study") as pool:
            while True:
                now = self.now()
                while next_arrival < len(arrivals) and arrivals[next_arrival].arrival_s <= now:
                    pool.submit(self.submit, arrivals[next_arrival])
                    next_arrival += 1
                self._on_watch(watch)
                self._on_due(pool, now)
                if watch.error is not None:
                    raise RuntimeError("the pod watch failed") from watch.error
                with self.lock:
                    done = len(self.finished)
                    retries = sum(len(a) - 1 for a in self.attempts.values() if a)
                if now - last_log >= 15:
                    last_log = now
                    self.log(
                        f"[{self.arm.name} seed {self.seed}] t={now:5.0f}s submitted "
                        f"{next_arrival}/{len(arrivals)} finished {done} retries {retries}"
                    )
                if (next_arrival == len(arrivals) and done == len(arrivals)) or now > horizon:
                    return
                time.sleep(0.05)

    def run(self, *, drain_s: float, setup_s: float) -> dict[str, Any]:
        cluster, arm = self.ctx.cluster, self.arm
        nodes = cluster.request("GET", "/api/v1/nodes")["items"]
        node_zone = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE_LABEL] for n in nodes}
        node_labels = {
            n["metadata"]["name"]: {
                key: n["metadata"]["labels"].get(key) for key in self.layout.recorded_labels
            }
            for n in nodes
        }
        before = _scrape(cluster, arm)
        horizon = max((j.arrival_s for j in self.jobs), default=0.0) + drain_s
        self.t0 = time.monotonic()
        watch = PodWatch(cluster, self.ctx.namespace, self.jobs, node_zone, self.t0)
        watch.start()
        arm.replay_started(self.ctx, self.t0)
        self.drive(watch, horizon)
        # Every finished job's pods are gone once the watch has seen them deleted.
        # Pods under a finalizer (Kueue's) may take longer: a run is not lost for that, the
        # error says so and the metrics cut every pod at the end.
        if self.finished:
            try:
                cluster.wait_for(
                    "the finished jobs' pods to be deleted",
                    lambda: _finished_pods_gone(watch, self.finished),
                    timeout=FINISHED_GONE_S,
                )
            except ControlPlaneError as error:
                self._error("the finished jobs' pods", error)
        end_s = self.now()
        after = _scrape(cluster, arm)
        watch.stopping.set()
        watch.join(timeout=10)
        with watch.lock:
            pods = sorted(watch.pods.values(), key=lambda row: (row[0], row[7], row[2]))
            reasons = dict(watch.reason)
        with self.lock:
            attempts = {name: [a.as_json() for a in tries] for name, tries in self.attempts.items()}
        return {
            "arm": arm.name,
            "seed": self.seed,
            "end_s": round(end_s, 3),
            "horizon_s": round(horizon, 3),
            "timeout_s": self.timeout_s,
            "gang_gates": arm.gang_gates,
            "setup_s": round(setup_s, 1),
            "capacity_gpus": self.layout.capacity(),
            "zones": self.layout.zone_gpus(),
            "jobs": [
                {
                    "name": j.name,
                    "arrival_s": j.arrival_s,
                    "submitted_s": _round(self.submitted.get(j.name)),
                    "pods": j.pods,
                    "gpus_per_pod": j.gpus_per_pod,
                    "duration_s": j.duration_s,
                    "reason": reasons.get(j.name),
                    "attempts": attempts[j.name],
                }
                for j in self.jobs
            ],
            "pods": [
                [*row[:2], *(_round(t) for t in row[2:6]), *row[6:9], _round(row[9]), row[10]]
                for row in pods
            ],
            "scrapes": {
                "scheduler": {
                    k: v - before["scheduler"].get(k, 0.0) for k, v in after["scheduler"].items()
                },
                "webhook": (
                    analysis.histogram_delta(after["webhook"], before["webhook"])
                    if after["webhook"] is not None
                    else None
                ),
            },
            "errors": list(self.errors),
            "observed": arm.observations(),
            **(
                {"layout": described, "node_labels": node_labels}
                if (described := self.layout.describe()) is not None
                else {}
            ),
        }


def _finished_pods_gone(watch: PodWatch, finished: set[str]) -> bool:
    with watch.lock:
        index = {watch.index[name] for name in finished}
        return all(
            row[analysis.DELETED] is not None for row in watch.pods.values() if row[0] in index
        )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
