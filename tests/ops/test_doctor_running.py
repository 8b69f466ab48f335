"""``podium doctor`` on a job whose pods ran before podium admitted them (issue 29, "gangs that
already run"): it says what they are — running without podium's admission, in which zone, outside
podium's policy, followed by the job's new pods — and never advises deleting a running pod
(deleting a PyTorchJob's master restarts the whole job). A pod that waits unpinned keeps the old
finding and fix."""

from __future__ import annotations

from tests.ops.test_doctor import JOB_NAME, Cluster, not_pinned, pending
from webhook.core import labels
from webhook.ops import doctor


def test_a_running_pod_podium_did_not_admit_is_said_as_such_with_no_advice_to_delete_it() -> None:
    c = Cluster()
    not_pinned(c)  # the worker runs in zone-c without podium's label and zone
    (job,) = c.diagnose().jobs
    (finding,) = job.findings
    assert (finding.check, finding.job, finding.pods) == (
        "not-pinned",
        JOB_NAME,
        ("llama-worker-0",),
    )
    assert finding.detail == (
        "1 pod(s) run without podium's admission (zone-c: 1): created before the namespace opted "
        "in, while podium was down, or placed by another system; until podium labels them as the "
        "job's they carry no podium.dev/job label and no podium policy selects them (its "
        "reconciler does, in policy-mode cilium); podium keeps the job's new pods in zone-c"
    )
    assert "delete the pod" not in finding.fix.lower()
    assert "Do not delete a running pod" in finding.fix
    assert finding.fix != doctor.FIXES["not-pinned"]


def test_a_running_pod_podium_adopted_is_said_to_be_in_its_policy() -> None:
    c = Cluster()
    not_pinned(c)
    c.pods[1]["metadata"]["labels"][labels.JOB] = c.key  # the reconciler's adoption
    (job,) = c.diagnose().jobs
    (finding,) = job.findings
    assert "podium has labelled them as the job's, so its policy selects them" in finding.detail


def test_a_split_running_job_is_split_zones_and_podium_adds_no_zone() -> None:
    c = Cluster()
    not_pinned(c)
    c.pods[1]["spec"]["nodeName"] = "a-1"
    (job,) = c.diagnose().jobs
    assert [f.check for f in job.findings] == ["split-zones", "not-pinned"]
    assert job.findings[1].detail.endswith(
        "the job is split across zones (split-zones); podium adds no zone to it"
    )


def test_a_pending_unpinned_pod_keeps_the_fix_that_recreates_it() -> None:
    c = Cluster()
    pending(c)
    not_pinned(c)
    (job,) = c.diagnose().jobs
    (finding,) = job.findings
    assert finding.detail == f"1 pod(s) have no {labels.ZONE}: podium did not admit them"
    assert finding.fix == doctor.FIXES["not-pinned"]
