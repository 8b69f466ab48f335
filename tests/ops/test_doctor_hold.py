"""``podium doctor`` on held gangs (``zone-chooser: hold``): a held job is neither "not pinned"
nor "without policy" — it is held, with the releaser's why; a hold longer than half of
``hold-timeout-seconds`` (without one, half an hour) and a job too big for any zone are
findings."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from tests.core.test_release import HOLD, cluster, held_job, hogs
from webhook.ops import doctor


def test_a_held_job_is_held_with_its_why_not_broken(now: datetime) -> None:
    objects = [*cluster(), *hogs("c", range(5)), *held_job("llama", 4, now - timedelta(seconds=30))]
    result = doctor.diagnose(objects, HOLD, now=now)
    (job,) = [j for j in result.jobs if j.job == "PyTorchJob/llama"]
    assert job.findings == () and result.ok
    assert job.as_dict()["verdict"] == "held"
    assert job.held == (
        "needs 4 × 8 nvidia.com/gpu in one zone; the roomiest zone, zone-c, has "
        "24 nvidia.com/gpu free (8/8/8 per node, none on 5 others); 1st in line "
        "(first: zone-c is kept for it)"
    )


def test_a_long_hold_is_flagged(now: datetime) -> None:
    objects = [*cluster(), *hogs("c", range(5)), *held_job("llama", 4, now - timedelta(hours=1))]
    settings = dataclasses.replace(HOLD, hold_timeout_seconds=7000)
    (finding,) = doctor.diagnose(objects, settings, now=now).findings
    assert finding.check == "long-hold" and finding.detail.startswith("held 3600s")
    assert "podium's releaser" in finding.fix and len(finding.pods) == 4


@pytest.mark.parametrize(("minutes", "flagged"), [(29, False), (31, True)])
def test_without_a_hold_timeout_a_hold_over_half_an_hour_is_flagged(
    now: datetime, minutes: int, flagged: bool
) -> None:
    held = held_job("llama", 4, now - timedelta(minutes=minutes))
    findings = doctor.diagnose([*cluster(), *hogs("c", range(5)), *held], HOLD, now=now).findings
    assert HOLD.hold_timeout_seconds == 0
    assert [f.check for f in findings] == (["long-hold"] if flagged else [])
    if flagged:
        assert "(no hold-timeout-seconds)" in findings[0].detail


def test_a_job_too_big_for_any_zone_is_flagged_at_once(now: datetime) -> None:
    result = doctor.diagnose([*cluster(), *held_job("huge", 9, now)], HOLD, now=now)
    (finding,) = result.findings
    assert finding.check == "too-big" and "even empty" in finding.detail


def lease(holder: str, renewed: datetime, duration: int = 15) -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "podium-reconciler", "namespace": "podium-system"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    }


@pytest.mark.parametrize(
    ("leases", "says"),
    [
        ([], "does not exist"),
        ([lease("", datetime(2026, 1, 1, tzinfo=UTC))], "has no holder"),
        ([lease("podium-0", datetime(2026, 1, 1, tzinfo=UTC))], "podium-0 last renewed it"),
    ],
    ids=["no-lease", "released", "expired"],
)
def test_held_pods_wait_for_podium_when_no_replica_leads(
    now: datetime, leases: list[dict[str, object]], says: str
) -> None:
    objects = [*cluster(), *hogs("c", range(5)), *held_job("llama", 4, now), *leases]
    (finding,) = doctor.diagnose(objects, HOLD, now=now, lease_read=True).findings
    assert finding.check == "no-leader" and says in finding.detail, finding.detail
    assert "wait for podium's releaser" in finding.detail and len(finding.pods) == 4
    assert "start podium" in finding.fix


def test_a_leader_renewing_its_lease_is_no_finding(now: datetime) -> None:
    alive = lease("podium-0", now - timedelta(seconds=3))
    objects = [*cluster(), *hogs("c", range(5)), *held_job("llama", 4, now), alive]
    assert doctor.diagnose(objects, HOLD, now=now, lease_read=True).findings == []


def test_without_the_lease_read_nothing_is_said_of_leaders(now: datetime) -> None:
    objects = [*cluster(), *hogs("c", range(5)), *held_job("llama", 4, now)]
    assert doctor.diagnose(objects, HOLD, now=now).findings == []
