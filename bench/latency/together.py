"""The burst with its arms at once: ``python -m bench.latency.together [--rounds N]``.

``python -m bench burst`` runs the no-op and podium's modes one after the other; on a shared
machine the load between two arms moves the no-op's own mean by several times (8.8–47 ms in one
evening, docs/benchmarks/latency.md), far more than podium's difference from it. Here the arms
(`ARMS`: the no-op and ``zone-chooser: hold`` by default) serve the same burst: each webhook is
registered with the shipped configuration, renamed (`NAMES`, so that the apiserver's histogram
tells them apart) and limited to its own namespace by one more namespace selector term (`restrict`),
and their pods are created interleaved (`interleave`) from the same client threads. Whatever the
machine does meanwhile falls on every arm alike; each arm's figures are read as in
``bench.latency.burst`` and tabled by the same ``report``.

What differs from the sequential burst: the apiserver admits two (or three) arms' pods at once,
so each arm's mean includes queueing behind the others', and the burst is twice as long.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.latency import burst, report
from bench.placement import runner
from bench.report import machine
from testbed.controlplane import LocalCluster
from testbed.podium import Podium

#: The arms served at once, the no-op first: the floor the others are read against.
ARMS = (burst.NOOP, "hold")
#: Each arm's webhook name: the label the apiserver's histogram keeps them apart by.
NAMES = {burst.NOOP: "noop.podium.dev", "hold": burst.WEBHOOK, "pin": "pin.podium.dev"}
#: The namespace label that sends a namespace's pods to one arm's webhook only.
ARM_LABEL = "bench.podium.dev/arm"
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def restrict(config: Mapping[str, Any], arm: str) -> dict[str, Any]:
    """The shipped configuration for ``arm``: its own name and webhook name (`NAMES`), and one
    more namespace selector term (`ARM_LABEL` In [arm]); everything else as shipped."""
    out: dict[str, Any] = copy.deepcopy(dict(config))
    out["metadata"] = {**out["metadata"], "name": f"bench-{arm}"}
    for hook in out["webhooks"]:
        hook["name"] = NAMES[arm]
        selector = hook.setdefault("namespaceSelector", {})
        terms = selector.setdefault("matchExpressions", [])
        terms.append({"key": ARM_LABEL, "operator": "In", "values": [arm]})
    return out


def interleave(pods: Mapping[str, Sequence[Any]]) -> list[tuple[str, Any]]:
    """Every arm's pods, one of each arm in turn (the arms' order kept), until all are taken."""
    lists = list(pods.items())
    longest = max((len(p) for _, p in lists), default=0)
    return [(arm, items[i]) for i in range(longest) for arm, items in lists if i < len(items)]


@contextlib.contextmanager
def _serving(
    cluster: LocalCluster, work_dir: Path, arms: Sequence[str]
) -> Iterator[dict[str, tuple[Podium, str]]]:
    """Each arm's webhook started, its namespace made and its restricted configuration
    registered, seen by it (`Podium.wait_until_sees`); all of it gone afterwards."""
    served: dict[str, tuple[Podium, str]] = {}
    try:
        for arm in arms:
            server = burst.webhook(cluster, work_dir / arm, arm)
            served[arm] = (server, f"together-{arm}-{uuid.uuid4().hex[:6]}")
            server.start()
            cluster.request(
                "POST",
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": served[arm][1],
                        "labels": {"podium.dev/enabled": "true", ARM_LABEL: arm},
                    },
                },
            )
            cluster.request("POST", CONFIGURATIONS, restrict(server.webhook_configuration(), arm))
        for server, namespace in served.values():
            server.wait_until_sees(namespace)
        yield served
    finally:
        for arm, (server, namespace) in served.items():
            server.stop()
            for path in (f"{CONFIGURATIONS}/bench-{arm}", f"/api/v1/namespaces/{namespace}"):
                with contextlib.suppress(Exception):
                    cluster.request("DELETE", path)


def together(
    cluster: LocalCluster, work_dir: Path, spec: burst.Spec, arms: Sequence[str] = ARMS
) -> list[dict[str, Any]]:
    """One burst serving every arm at once; per arm, a result shaped as `burst.burst`'s."""
    with _serving(cluster, work_dir, arms) as served:
        pods: dict[str, list[Any]] = {}
        for arm, (_, namespace) in served.items():
            jobs = burst._jobs(spec)
            created = [
                cluster.request(
                    "POST",
                    f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs",
                    runner.pytorchjob(j, namespace),
                )
                for j in jobs
            ]
            pods[arm] = [
                p
                for j, obj in zip(jobs, created, strict=True)
                for p in runner.operator_pods(j, obj)
            ]
        time.sleep(5)  # podium's watch has the jobs: the read-through is not what is measured
        audited = len(cluster.audit_events())
        # The readiness probes (`Podium.wait_until_sees`) were answered in the arm's namespace.
        probes = {
            str(r.get("requestUID"))
            for server, _ in served.values()
            for r in server.audit_records()
        }
        text = cluster.metrics()
        before = {arm: burst.histogram(text, NAMES[arm]) for arm in served}
        own_before = {
            arm: burst.own_histogram(server.get("/metrics"))
            for arm, (server, _) in served.items()
            if arm != burst.NOOP
        }
        load_before = os.getloadavg()
        started = time.monotonic()
        with ThreadPoolExecutor(spec.threads) as pool:
            list(
                pool.map(
                    lambda item: cluster.request(
                        "POST", f"/api/v1/namespaces/{served[item[0]][1]}/pods", item[1]
                    ),
                    interleave(pods),
                )
            )
        seconds = time.monotonic() - started
        load_after = os.getloadavg()
        text = cluster.metrics()
        time.sleep(2)  # the audit backend writes in batches
        events = cluster.audit_events()
        results = []
        for arm, (server, namespace) in served.items():
            admitted = [
                r
                for r in server.audit_records()
                if r.get("namespace") == namespace
                and r.get("requestUID")
                and str(r["requestUID"]) not in probes
            ]
            own = own_before.get(arm)
            results.append(
                {
                    "mode": arm,
                    "pods": len(pods[arm]),
                    "seconds": round(seconds, 3),
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in load_after],
                    "histogram": burst.difference(burst.histogram(text, NAMES[arm]), before[arm]),
                    "podium_histogram": None
                    if own is None
                    else burst.difference(burst.own_histogram(server.get("/metrics")), own),
                    "outcomes": dict(Counter(str(r.get("outcome", "?")) for r in admitted)),
                    "writes": dict(burst._writes(events, namespace, audited)),
                    "held_effects": sum(
                        len(r.get("effects") or []) for r in admitted if r["outcome"] == "held"
                    ),
                }
            )
    return results


def ratios(rounds: Sequence[Sequence[Mapping[str, Any]]], arm: str) -> list[float]:
    """``arm``'s mean as a multiple of the no-op's, round by round (rounds without either
    left out)."""
    out = []
    for runs in rounds:
        floor = report.floor_ms(runs)
        mean = next((report.mean_ms(r["histogram"]) for r in runs if r["mode"] == arm), None)
        if floor and mean is not None:
            out.append(mean / floor)
    return out


def main(argv: Sequence[str]) -> int:
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m bench.latency.together")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", default=",".join(ARMS), help="noop first, then hold and/or pin")
    parser.add_argument("--gangs", type=int, default=burst.GANGS)
    parser.add_argument("--out", type=Path, help="write every round's results here (JSON)")
    args = parser.parse_args(argv)
    arms = tuple(args.arms.split(","))
    if arms[0] != burst.NOOP or not set(arms) <= set(NAMES):
        parser.error(f"--arms: {burst.NOOP} first, then any of hold, pin")
    spec = burst.Spec(gangs=args.gangs)
    rounds: list[list[dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="podium-together-") as scratch:
        work = Path(scratch)
        with burst.local_cluster(work) as cluster:
            for index in range(args.rounds):
                runs = together(cluster, work / f"round-{index}", spec, arms)
                rounds.append(runs)
                results = {
                    "machine": machine(),
                    "spec": {
                        "gangs": spec.gangs,
                        "pods": spec.pods,
                        "gpus": spec.gpus,
                        "threads": spec.threads,
                    },
                    "zones": {zone: len(nodes) for zone, nodes in burst.ZONE_NODES.items()},
                    "runs": runs,
                }
                print(f"round {index + 1} of {args.rounds}, every arm at once:", flush=True)
                print(report.markdown(results), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(rounds, indent=1, sort_keys=True) + "\n")
    for arm in arms[1:]:
        each = ratios(rounds, arm)
        if each:
            print(
                f"{arm}: × no-op mean per round "
                + ", ".join(f"{x:.2f}" for x in each)
                + f"; median {statistics.median(each):.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
