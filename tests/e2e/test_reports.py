"""podium's Reports (openreports.io, docs/reports.md) on the real control plane: podium runs with
exactly the chart's RBAC, a shadow namespace gets a job the default scheduler splits across zones
and an enforce namespace a job podium holds and releases into one zone; the leader writes one
Report per namespace, ``kubectl get reports`` lists them with their counts, and ``podium report
--from-cluster`` reads them with no log at all.

The shadow job runs on test_shadow.py's tainted node pool, where the scheduler's least-allocated
scoring splits a two-pod gang across shadow-a and shadow-b (that module says why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.controlplane import LocalCluster
from testbed.paths import REPO
from testbed.podium import Podium, opted_in_namespace, serving

from .test_podium import create_concurrently, pytorch_pods, pytorchjob, wait_bound
from .test_shadow import gang, pool

pytestmark = pytest.mark.e2e

__all__ = ["pool"]  # the shadow node pool, a module-scoped fixture of test_shadow.py

REPORTS = "/apis/openreports.io/v1alpha1/namespaces/{ns}/reports/podium"


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    """podium (holding gangs, the default) with the chart's RBAC, writing Reports every second."""
    server = Podium(
        local_cluster,
        tmp_path_factory.mktemp("reports"),
        config="report-interval-seconds: 1\n",
    )
    with serving(server, unregister=True) as s:
        yield s


@pytest.fixture
def shadow_ns(local_cluster: LocalCluster, podium: Podium) -> Iterator[str]:
    name = f"rep-shadow-{uuid.uuid4().hex[:6]}"
    local_cluster.create_namespace(name, {"podium.dev/enabled": "shadow"})
    try:
        podium.wait_until_sees(name)
        yield name
    finally:
        local_cluster.delete_namespace(name, gone=False)


@pytest.fixture
def enforce_ns(local_cluster: LocalCluster, podium: Podium) -> Iterator[str]:
    with opted_in_namespace(local_cluster, "rep-enforce", seen_by=podium) as name:
        yield name


def report_of(cluster: LocalCluster, ns: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = cluster.request("GET", REPORTS.format(ns=ns))
    except Exception:  # not written yet
        return None
    return found


def wait_for_result(
    cluster: LocalCluster, ns: str, job: str, result: str, timeout: float = 60
) -> dict[str, Any]:
    """Wait until podium's Report in ``ns`` says ``result`` for ``job``; the Report."""
    seen: dict[str, Any] = {}

    def written() -> bool:
        report = report_of(cluster, ns)
        for item in (report or {}).get("results") or []:
            if item["resources"][0]["name"] == job and item["result"] == result:
                seen.update(report or {})
                return True
        return False

    cluster.wait_for(f"podium's Report in {ns} to say {result} for {job}", written, timeout=timeout)
    return seen


def podium_report(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``podium report --from-cluster ARGS`` as a user runs it, with no log and nothing on
    stdin."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "report",
            "--from-cluster",
            "--kubeconfig",
            str(cluster.kubeconfig),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "80"},
    )


def test_reports_after_a_shadow_run_and_an_enforce_run(
    local_cluster: LocalCluster,
    podium: Podium,
    pool: list[str],
    shadow_ns: str,
    enforce_ns: str,
) -> None:
    # Shadow: admitted unchanged, split by the scheduler.
    sent = gang(local_cluster, shadow_ns, "split")
    stored = create_concurrently(local_cluster, sent)
    placed = wait_bound(local_cluster, shadow_ns, [p["metadata"]["name"] for p in stored])
    assert sorted(placed.values()) == ["shadow-a", "shadow-b"]
    # Enforce: held, then released whole into one zone.
    job = pytorchjob(local_cluster, enforce_ns, "kept", workers=1)
    pods = create_concurrently(local_cluster, pytorch_pods(job, workers=1))
    zones = wait_bound(local_cluster, enforce_ns, [p["metadata"]["name"] for p in pods])
    assert len(set(zones.values())) == 1

    shadow = wait_for_result(local_cluster, shadow_ns, "split", "fail")
    enforce = wait_for_result(local_cluster, enforce_ns, "kept", "pass")
    print("\nshadow Report:", json.dumps(shadow["results"], indent=1))
    print("enforce Report:", json.dumps(enforce["results"], indent=1))

    (finding,) = shadow["results"]
    assert finding["rule"] == "would-keep-together"
    assert finding["properties"]["zones"] == "shadow-a=1,shadow-b=1"
    assert finding["properties"]["mode"] == "shadow"
    assert shadow["summary"] == {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    assert shadow["metadata"]["labels"]["podium.dev/mode"] == "shadow"
    (kept,) = enforce["results"]
    (zone,) = set(zones.values())
    assert kept["rule"] == "one-zone" and kept["properties"]["zone"] == zone
    assert kept["properties"]["zones"] == f"{zone}=2"
    assert kept["properties"]["policies"]  # the CiliumNetworkPolicy podium wrote
    assert enforce["summary"]["pass"] == 1 and sum(enforce["summary"].values()) == 1
    assert kept["resources"][0] == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "kept",
        "namespace": enforce_ns,
        "uid": job["metadata"]["uid"],
    }

    # kubectl lists them, with the CRD's columns.
    listed = local_cluster.kubectl("get", "reports", "-A")
    print("\n$ kubectl get reports -A\n" + listed.stdout)
    wide = local_cluster.kubectl("get", "reports", "-A", "-o", "wide")
    print("$ kubectl get reports -A -o wide\n" + wide.stdout)
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert listed.stdout.split()[:7] == [
        "NAMESPACE",
        "NAME",
        "PASS",
        "FAIL",
        "WARN",
        "ERROR",
        "SKIP",
    ]
    assert rows[shadow_ns][1:7] == ["podium", "0", "1", "0", "0", "0"]
    assert rows[enforce_ns][1:7] == ["podium", "1", "0", "0", "0", "0"]

    # podium report reads them with no log at all.
    table = podium_report(local_cluster)
    print("$ podium report --from-cluster\n" + table.stdout + table.stderr)
    assert table.returncode == 1, table.stderr  # the split shadow job
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "MODE", "JOB", "RESULT", "ZONES", "AGE"]
    (split,) = [line.split() for line in lines if "PyTorchJob/split" in line]
    assert split[:4] == [shadow_ns, "shadow", "PyTorchJob/split", "fail"]
    (held,) = [line.split() for line in lines if "PyTorchJob/kept" in line]
    assert held[:5] == [enforce_ns, "enforce", "PyTorchJob/kept", "pass", f"{zone}:2"]
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    only = podium_report(local_cluster, "-n", enforce_ns, "-o", "json")
    assert only.returncode == 0, only.stderr
    assert [r["job"] for r in json.loads(only.stdout)["results"]] == ["PyTorchJob/kept"]
