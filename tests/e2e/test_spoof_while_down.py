"""A pod created with a copied ``podium.dev/job`` label while podium was down — the webhook
fails open, so nothing stripped the label and the job's allow policy selects the pod — is found
by ``podium doctor`` meanwhile, and by the reconciler once podium is back: the label is gone
within one reconcile interval, with an audit record and a ``JobLabelRemoved`` Event on the pod.
The job's own pod keeps its label."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.controlplane import ApiError, LocalCluster
from testbed.podium import PIN, Podium, opted_in_namespace, run_doctor

from .test_podium import JOB, create, create_concurrently, pod, pytorch_pods, pytorchjob, serving

pytestmark = pytest.mark.e2e

#: Seconds between reconciler passes (``reconcile-interval-seconds``).
INTERVAL = 3.0
#: What one pass itself may take on a loaded 2-core machine: list, plan, one PATCH.
PASS = 2.0


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    with contextlib.suppress(ApiError):  # the reconciler's Lease lives in podium's namespace
        local_cluster.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "podium-system"}},
        )
    config = PIN + f"reconcile-interval-seconds: {INTERVAL}\n"
    server = Podium(local_cluster, tmp_path_factory.mktemp("podium-spoof"), config=config)
    with serving(server) as running:
        yield running


def labels_of(cluster: LocalCluster, ns: str, name: str) -> dict[str, str]:
    found: dict[str, str] = cluster.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}")[
        "metadata"
    ].get("labels", {})
    return found


def label_removed_events(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    """podium's JobLabelRemoved events on the pod (the scheduler posts its own about it too)."""
    items = cluster.request("GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")["items"]
    return [
        e
        for e in items
        if (e.get("regarding") or {}).get("name") == name and e.get("reason") == "JobLabelRemoved"
    ]


def test_a_label_copied_while_podium_was_down_is_gone_within_one_interval(
    local_cluster: LocalCluster, podium: Podium
) -> None:
    with opted_in_namespace(local_cluster, "spoof") as ns:
        job = pytorchjob(local_cluster, ns, "victim", workers=0, gpus=0)
        (victim,) = create_concurrently(local_cluster, pytorch_pods(job, workers=0, gpus=0))
        key = victim["metadata"]["labels"][JOB]

        podium.stop()
        try:
            spy = create(
                local_cluster, pod(ns, name="spy", gpus=0, owners=[], labels={JOB: key, "a": "b"})
            )
            assert spy["metadata"]["labels"][JOB] == key  # nobody stripped it: podium was down
            code, report = run_doctor(local_cluster, ns)  # doctor needs no running podium
            copied = [f for f in report["findings"] if f["check"] == "copied-label"]
            assert code == 1 and [f["pods"] for f in copied] == [["spy"]]
            assert copied[0]["job"] == "PyTorchJob/victim"
        finally:
            podium.start()  # returns once /readyz says the watch cache has synced
        back = time.monotonic()

        local_cluster.wait_for(
            "the copied label to be removed",
            lambda: JOB not in labels_of(local_cluster, ns, "spy"),
            timeout=INTERVAL + PASS + 30,
        )
        took = time.monotonic() - back
        print(f"label removed {took:.2f} s after podium was ready (interval {INTERVAL} s)")
        assert took <= INTERVAL + PASS
        assert labels_of(local_cluster, ns, "spy")["a"] == "b"  # only podium's label went
        assert labels_of(local_cluster, ns, victim["metadata"]["name"])[JOB] == key

        def audited() -> list[dict[str, Any]]:
            return [r for r in podium.audit_records() if r.get("action") == "unlabel"]

        local_cluster.wait_for("the unlabel audit record", lambda: bool(audited()), timeout=10)
        (record,) = audited()
        assert (record["namespace"], record["pod"], record["result"]) == (ns, "spy", "unlabelled")
        assert (record["job"]["name"], record["job"]["gang"]) == ("victim", key)

        local_cluster.wait_for(
            "the JobLabelRemoved event",
            lambda: bool(label_removed_events(local_cluster, ns, "spy")),
            timeout=10,
        )
        (event,) = label_removed_events(local_cluster, ns, "spy")
        assert (event["reason"], event["type"]) == ("JobLabelRemoved", "Warning")
        assert event["related"]["name"] == "victim"

        _, report = run_doctor(local_cluster, ns)
        assert not [f for f in report["findings"] if f["check"] == "copied-label"]
