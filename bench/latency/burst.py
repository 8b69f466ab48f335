"""One burst per arm on the real local control plane (``testbed.controlplane.LocalCluster``,
``podium serve`` as a process beside it, or the no-op webhook): ``GANGS`` PyTorchJobs of
``PODS`` pods each asking ``GPUS`` GPU, created first, then all their pods at once from
``THREADS`` client threads, into a namespace opted in to podium. The cluster has 3 zones of one
8-GPU KWOK node, each node taken whole by a filler pod bound to it in a namespace podium does not
serve: a gang (8 GPUs) fits an empty zone but no zone has room. With ``zone-chooser: hold`` every
pod is held; with the immediate pin every gang's first pod writes its record and policy and the
rest follow it. No room is the fair case: it is what the hold exists for, and with room the
releaser's ungating patches (UPDATE admissions with their own latency) would run during the
burst in one mode only.

The no-op arm (`NOOP`, ``bench.latency.noop``) runs first: a webhook that answers every review
``allowed`` with no patch, on the same TLS and registered with the same configuration, on the
same cluster in the same run — the floor any webhook pays here, for podium's modes to be read
against.

Read afterwards, per arm: the apiserver's own histogram (`METRIC`) for the webhook (what the
burst added, every bucket), podium's audit outcomes (the no-op's: the reviews it answered), and
from the apiserver's audit log every write in the namespace other than the bench's own creations
and kube-scheduler's (podium's records, policies and pod patches: what a held admission must not
cause).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.latency import noop, report
from bench.placement import runner, trace
from bench.report import machine
from testbed.build import controlplane_bin_dir
from testbed.controlplane import CRD_DIR, LocalCluster
from testbed.podium import Podium, opted_in_namespace, serving

WEBHOOK = "pods.podium.dev"
METRIC = "apiserver_admission_webhook_admission_duration_seconds"
OWN_METRIC = "podium_admission_duration_seconds"
GANGS, PODS, GPUS, THREADS = 125, 8, 1, 16
ZONE_NODES = {zone: [8] for zone in ("zone-a", "zone-b", "zone-c")}
FILLERS = "burst-fillers"
CRDS = ("kubeflow.org_pytorchjobs.yaml", "cilium.io_ciliumnetworkpolicies.yaml")
#: The two modes, as podium.yaml's ``zone-chooser`` names them (``pin``: the immediate pin, once
#: called ``podium``; podium reads both).
MODES = ("hold", "pin")
#: The no-op webhook's arm; `ARMS`: what one run bursts, in order (the floor first, on the
#: freshest cluster).
NOOP = report.NOOP
ARMS = (NOOP, *MODES)
#: Writes the bench itself makes in the namespace: its jobs and its pods.
OWN_WRITES = {("create", "pytorchjobs"), ("create", "pods")}
#: User agents of the control plane's own components.
COMPONENTS = ("kube-scheduler/", "kube-controller-manager/", "kwok")
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


@dataclass(frozen=True)
class Spec:
    gangs: int = GANGS
    pods: int = PODS
    gpus: int = GPUS
    threads: int = THREADS


def histogram(metrics_text: str, webhook: str = WEBHOOK) -> dict[str, Any]:
    """The webhook's admission-duration histogram summed over its other labels: cumulative
    bucket counts by ``le``, the count and the sum (seconds)."""
    buckets: defaultdict[str, float] = defaultdict(float)  # counts are floats in the exposition
    count = total = 0.0
    for family in text_string_to_metric_families(metrics_text):
        if family.name != METRIC:
            continue
        for sample in family.samples:
            if sample.labels.get("name") != webhook:
                continue
            if sample.name.endswith("_bucket"):
                buckets[sample.labels["le"]] += sample.value
            elif sample.name.endswith("_count"):
                count += sample.value
            elif sample.name.endswith("_sum"):
                total += sample.value
    return {"buckets": dict(buckets), "count": count, "sum": total}


def own_histogram(metrics_text: str) -> dict[str, Any]:
    """podium's own ``podium_admission_duration_seconds`` (from parsed request to answer), in
    `histogram`'s shape: set beside the apiserver's, what the call spent outside podium's
    handler (TLS, HTTP, the event loop busy with something else)."""
    buckets: dict[str, float] = {}
    count = total = 0.0
    for family in text_string_to_metric_families(metrics_text):
        if family.name != OWN_METRIC:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets[sample.labels["le"]] = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
    return {"buckets": buckets, "count": count, "sum": total}


def difference(after: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    """What the histogram gained between two scrapes."""
    return {
        "buckets": {
            le: value - before["buckets"].get(le, 0.0) for le, value in after["buckets"].items()
        },
        "count": after["count"] - before["count"],
        "sum": after["sum"] - before["sum"],
    }


def _jobs(spec: Spec) -> list[trace.TraceJob]:
    return [
        trace.TraceJob(
            index=i,
            name=f"burst-{i:03d}",
            arrival_s=0.0,
            pods=spec.pods,
            gpus_per_pod=spec.gpus,
            duration_s=0.0,
        )
        for i in range(spec.gangs)
    ]


def _writes(events: list[dict[str, Any]], namespace: str, since: int) -> Counter[str]:
    """Write requests in ``namespace`` after the first ``since`` audit events, as ``verb
    resource[/sub] status``, other than the bench's own creations and those of the control
    plane's components (every client here has the admin's certificate: the user agent tells
    them apart). What is left is podium's."""
    out: Counter[str] = Counter()
    for event in events[since:]:
        ref = event.get("objectRef") or {}
        verb, resource = event.get("verb", ""), ref.get("resource", "")
        if ref.get("namespace") != namespace or verb not in WRITE_VERBS:
            continue
        if (verb, resource) in OWN_WRITES and not ref.get("subresource"):
            continue
        if str(event.get("userAgent", "")).startswith(COMPONENTS):
            continue
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        code = (event.get("responseStatus") or {}).get("code", "?")
        out[f"{verb} {resource}{sub} {code}"] += 1
    return out


def webhook(cluster: LocalCluster, work_dir: Path, arm: str) -> Podium:
    """The webhook of one arm: podium with ``zone-chooser: <arm>``, or the no-op; each set up
    and registered by `Podium`'s code (same certificate, configuration and probes)."""
    if arm == NOOP:
        return noop.NoOpWebhook(cluster, work_dir)
    if arm not in MODES:
        raise ValueError(f"no such arm {arm!r}: {', '.join(ARMS)}")
    return Podium(cluster, work_dir, config=f"zone-chooser: {arm}\n")


def burst(cluster: LocalCluster, work_dir: Path, mode: str, spec: Spec) -> dict[str, Any]:
    """One arm's burst on ``cluster``: its webhook started and registered, the jobs, then every
    pod at once; what the apiserver measured and what was written."""
    server = webhook(cluster, work_dir / mode, mode)
    with serving(server, unregister=True), opted_in_namespace(cluster, f"burst-{mode}") as ns:
        jobs = _jobs(spec)
        created = [
            cluster.request(
                "POST",
                f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs",
                runner.pytorchjob(j, ns),
            )
            for j in jobs
        ]
        pods = [
            p for j, obj in zip(jobs, created, strict=True) for p in runner.operator_pods(j, obj)
        ]
        time.sleep(5)  # podium's watch has the jobs: the read-through is not what is measured
        audited = len(cluster.audit_events())
        before = histogram(cluster.metrics())
        own_before = None if mode == NOOP else own_histogram(server.get("/metrics"))
        load_before = os.getloadavg()
        started = time.monotonic()
        path = f"/api/v1/namespaces/{ns}/pods"
        with ThreadPoolExecutor(spec.threads) as pool:
            list(pool.map(lambda pod: cluster.request("POST", path, pod), pods))
        seconds = time.monotonic() - started
        load_after = os.getloadavg()
        measured = difference(histogram(cluster.metrics()), before)
        own = (
            None
            if own_before is None
            else difference(own_histogram(server.get("/metrics")), own_before)
        )
        time.sleep(2)  # the audit backend writes in batches
        # Admissions only (the releaser's entries carry no request UID).
        admitted = [
            r for r in server.audit_records() if r.get("namespace") == ns and r.get("requestUID")
        ]
        outcomes = Counter(str(r.get("outcome", "?")) for r in admitted)
        held_effects = sum(len(r.get("effects") or []) for r in admitted if r["outcome"] == "held")
        writes = _writes(cluster.audit_events(), ns, audited)
        podium_metrics = None if mode == NOOP else server.get("/metrics")
    return {
        "mode": mode,
        "pods": len(pods),
        "seconds": round(seconds, 3),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "histogram": measured,
        "podium_histogram": own,
        "outcomes": dict(outcomes),
        "writes": dict(writes),
        "held_effects": held_effects,
        "podium_policies_created": (
            None
            if podium_metrics is None
            else _podium_counter(podium_metrics, "podium_policies_created")
        ),
    }


def _podium_counter(text: str, name: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for s in family.samples
        if s.name.endswith("_total")
    )


def _fill(cluster: LocalCluster) -> None:
    """Take every node's GPUs with a pod bound to it, in a namespace podium does not serve."""
    cluster.create_namespace(FILLERS)
    for zone, gpus in ZONE_NODES.items():
        for index, count in enumerate(gpus):
            node = f"kwok-{zone}-{index}"
            request = {"nvidia.com/gpu": str(count)}
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"filler-{node}", "namespace": FILLERS},
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "fill",
                            "image": "filler:1",
                            "resources": {"requests": request, "limits": request},
                        }
                    ],
                },
            }
            cluster.request("POST", f"/api/v1/namespaces/{FILLERS}/pods", pod)


@contextlib.contextmanager
def local_cluster(work_dir: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(controlplane_bin_dir(), work_dir / "cluster")
    cluster.start()
    try:
        cluster.create_fake_nodes(ZONE_NODES, timeout=180)
        cluster.install_crds([CRD_DIR / name for name in CRDS])
        cluster.create_namespace("podium-system")
        _fill(cluster)
        yield cluster
    finally:
        cluster.stop()


def run(work_dir: Path, spec: Spec = Spec(), modes: tuple[str, ...] = ARMS) -> dict[str, Any]:
    """Every arm's burst, one after the other on one control plane."""
    with local_cluster(work_dir) as cluster:
        results = [burst(cluster, work_dir / uuid.uuid4().hex[:6], mode, spec) for mode in modes]
    return {
        "machine": machine(),
        "spec": {
            "gangs": spec.gangs,
            "pods": spec.pods,
            "gpus": spec.gpus,
            "threads": spec.threads,
        },
        "zones": {zone: len(nodes) for zone, nodes in ZONE_NODES.items()},
        "runs": results,
    }


def write(results: Mapping[str, Any], path: Path) -> None:
    path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")


RESULTS, DOCUMENT = "latency.json", "latency.md"


def report_only(out: Path) -> int:
    """Rewrite ``latency.md``'s tables from ``latency.json`` in ``out``."""
    results = json.loads((out / RESULTS).read_text())
    doc = out / DOCUMENT
    doc.write_text(report.document(results, doc.read_text() if doc.exists() else None))
    return 0


def study(out: Path, work: Path | None, spec: Spec) -> int:
    """Run every arm's burst, keep the raw results in ``out`` and write the tables."""
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="podium-burst-")))
        results = run(work, spec)
    out.mkdir(parents=True, exist_ok=True)
    write(results, out / RESULTS)
    report_only(out)
    print((out / DOCUMENT).read_text())
    return 0
