"""Held gangs said right (issue 29 items 5 and 6), on the real apiserver, scheduler and kwok.

The cluster's zones hold 8, 16 and 64 GPUs (8-GPU nodes).

* A gang of 9 × 8 GPUs can never fit one zone: within seconds every pod's ``podium.dev/held``
  says so with the ways out, the job has a Warning ``GangHeld`` Event, ``podium_gangs_too_big``
  counts it and ``podium doctor -n NS`` reports ``too-big``.
* Another namespace's work fills zone-c and a 4 × 8-GPU job is held: ``podium doctor -n NS``
  says it is held (first in line) as the unscoped run does — it used to list only NS's pods,
  see zone-c empty and print "no problems found". With podium stopped, both say ``no-leader``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.controlplane import LocalCluster
from testbed.podium import Podium, doctor, opted_in_namespace, serving

from .test_hold import fill_zone_c
from .test_hold_faults import events, held_job, metric
from .test_podium import listed, wait_until_no_gpu_is_taken
from .test_reconciler import ensure_namespace

pytestmark = pytest.mark.e2e

HOLD = "zone-chooser: hold\nrelease-interval-seconds: 1\n"
HELD_WHY = "podium.dev/held"


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    ensure_namespace(local_cluster, "podium-system")  # for the leader's Lease
    server = Podium(local_cluster, tmp_path_factory.mktemp("doctor-hold"), config=HOLD)
    with serving(server, unregister=True) as started:
        yield started


def job_in(report: dict[str, Any], ns: str, job: str) -> dict[str, Any]:
    (found,) = [j for j in report["jobs"] if (j["namespace"], j["job"]) == (ns, job)]
    return found


def whys(cluster: LocalCluster, ns: str, names: list[str]) -> set[str | None]:
    pods = [p for p in listed(cluster, "v1", "Pod", ns) if p["metadata"]["name"] in names]
    return {(p["metadata"].get("annotations") or {}).get(HELD_WHY) for p in pods}


def test_a_gang_that_can_never_fit_says_so_at_once(
    local_cluster: LocalCluster, podium: Podium
) -> None:
    wait_until_no_gpu_is_taken(local_cluster)
    with opted_in_namespace(local_cluster, "never") as ns:
        started = time.monotonic()
        names = held_job(local_cluster, ns, "huge", workers=8)  # 9 × 8 GPUs; zone-c holds 64

        def said() -> bool:
            found = whys(local_cluster, ns, names)
            return len(found) == 1 and "more than any zone holds even empty" in str(found.pop())

        local_cluster.wait_for("every held pod to say it never fits", said, timeout=30)
        took = time.monotonic() - started
        (why,) = whys(local_cluster, ns, names)
        assert why is not None
        assert f"podium release pytorchjob/huge -n {ns} --unpinned" in why
        assert "too-big: spread" in why and "at most 8 pod(s) of 8 nvidia.com/gpu" in why

        def warned() -> list[dict[str, Any]]:
            return [
                e
                for e in events(local_cluster, ns, "huge")
                if e.get("reason") == "GangHeld" and e.get("type") == "Warning"
            ]

        local_cluster.wait_for("a Warning GangHeld Event on the job", lambda: bool(warned()))
        (event,) = warned()
        assert event["note"].endswith(why)
        local_cluster.wait_for(
            "podium_gangs_too_big to count it", lambda: metric(podium, "podium_gangs_too_big") == 1
        )
        code, report, _ = doctor(local_cluster, "-n", ns)
        job = job_in(report, ns, "PyTorchJob/huge")
        assert code == 1 and [f["check"] for f in job["findings"]] == ["too-big"]
        assert job["findings"][0]["detail"] == why and job["held"] == why
        assert whys(local_cluster, ns, names) == {why}  # still held: nothing released
    local_cluster.wait_for(
        "podium_gangs_too_big back to 0", lambda: metric(podium, "podium_gangs_too_big") == 0
    )
    print(f"never fits: said on all {len(names)} pods {took:.1f}s after they were created")
    print(f"GangHeld (Warning): {event['note']}")
    print(f"doctor -n {ns}: too-big: {job['findings'][0]['detail']}")
    print(f"  fix: {job['findings'][0]['fix']}")


def test_doctor_n_judges_a_held_gang_against_the_whole_cluster(
    local_cluster: LocalCluster, podium: Podium
) -> None:
    """Runs last in the module: it stops podium (and starts it again)."""
    wait_until_no_gpu_is_taken(local_cluster)
    with (
        opted_in_namespace(local_cluster, "others") as others,
        opted_in_namespace(local_cluster, "waits") as ns,
    ):
        fill_zone_c(local_cluster, others)  # another team's work on all of zone-c
        names = held_job(local_cluster, ns, "llama")  # 4 × 8 GPUs: zone-a, zone-b too small

        def waiting() -> bool:
            found = whys(local_cluster, ns, names)
            return len(found) == 1 and "1st in line" in str(found.pop())

        local_cluster.wait_for("the held gang to say why it waits", waiting, timeout=30)
        _, unscoped, _ = doctor(local_cluster)
        code, scoped, _ = doctor(local_cluster, "-n", ns)
        whole, one = (
            job_in(unscoped, ns, "PyTorchJob/llama"),
            job_in(scoped, ns, "PyTorchJob/llama"),
        )
        assert (code, one["verdict"], one["findings"]) == (0, "held", [])
        assert one["held"] == whole["held"] and "1st in line" in one["held"]
        assert "(8/8/8" not in one["held"]  # zone-c is full: the roomiest is zone-b, 8/8
        assert "zone-b, has 16 nvidia.com/gpu free (8/8 per node)" in one["held"], one["held"]
        assert {j["namespace"] for j in scoped["jobs"]} == {ns}

        podium.stop()
        try:
            code, down, _ = doctor(local_cluster, "-n", ns)
            _, down_whole, _ = doctor(local_cluster)
        finally:
            podium.start()
        checks = [f["check"] for f in job_in(down, ns, "PyTorchJob/llama")["findings"]]
        whole_checks = [f["check"] for f in job_in(down_whole, ns, "PyTorchJob/llama")["findings"]]
        assert code == 1 and checks == whole_checks == ["no-leader"]
    print(f"doctor -n {ns}: held: {one['held']}")
    print(f"podium stopped, doctor -n {ns}: {checks}")
