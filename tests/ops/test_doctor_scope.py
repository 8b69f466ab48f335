"""``podium doctor`` says held gangs right (issue 29 item 5): with ``-n`` a held gang is judged
against the whole cluster's room and line, as the releaser judges it; a held gang the releaser
would release now is still held (and, podium down, ``no-leader``); the releaser's why stays beside
other findings; held pods are not "not admitted"; a gang spread across zones on purpose is not a
split to repair."""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime, timedelta
from typing import Any

from tests.builders import namespace
from tests.core.test_release import HOLD, cluster, held_job, hogs
from tests.ops.test_doctor import Cluster, split
from tests.scenarios import NS
from webhook.core import adapters, labels, reconcile, release
from webhook.core.objects import ObjectKey
from webhook.core.settings import PolicyMode, Settings
from webhook.core.view import ClusterView
from webhook.kube import errors, twins
from webhook.ops import doctor, output

Obj = dict[str, Any]


def busy_elsewhere(now: datetime) -> list[Obj]:
    """Every zone full of another team's work but zone-c, where 3 of 8 nodes are free; a
    4 × 8-GPU job held in ``NS``: it waits (first in line), though ``NS`` alone takes no room."""
    return [
        *cluster(),
        namespace("other"),
        *hogs("a", range(1)),
        *hogs("b", range(2)),
        *hogs("c", range(5)),
        *held_job("llama", 4, now - timedelta(seconds=30)),
    ]


def api_with(objects: list[Obj]) -> twins.InMemoryObjects:
    api = twins.InMemoryObjects()
    for obj in objects:
        api.put(obj)
    return api


def collected(api: twins.InMemoryObjects, ns: str | None, notes: list[str] | None = None) -> Any:
    return asyncio.run(doctor.collect(api, namespace=ns, notes=notes))


def verdict_of(result: doctor.Diagnosis, job: str) -> doctor.JobVerdict:
    (found,) = [j for j in result.jobs if j.job == job]
    return found


def test_with_a_namespace_held_gangs_are_judged_against_the_whole_cluster(now: datetime) -> None:
    api = api_with(busy_elsewhere(now))
    unscoped = doctor.diagnose(collected(api, None), HOLD, now=now, lease_read=True)
    scoped = doctor.diagnose(collected(api, NS), HOLD, namespace=NS, now=now, lease_read=True)
    whole, one = verdict_of(unscoped, "PyTorchJob/llama"), verdict_of(scoped, "PyTorchJob/llama")
    assert [j.namespace for j in scoped.jobs] == [NS]
    assert one.held == whole.held and one.held is not None and "1st in line" in one.held
    # no podium Lease: no replica leads, said with -n as without
    assert [f.check for f in one.findings] == [f.check for f in whole.findings] == ["no-leader"]
    assert not scoped.ok


def test_the_namespaces_own_kinds_stay_scoped(now: datetime) -> None:
    api = api_with(busy_elsewhere(now))
    lists: set[tuple[str, str]] = set()

    def record(op: str, key: ObjectKey) -> None:
        if op == "list":
            lists.add((key[1], key[2]))

    api.fail = record
    collected(api, NS)
    assert ("Pod", "") in lists and ("PyTorchJob", "") in lists and ("ConfigMap", "") in lists
    assert ("CiliumNetworkPolicy", NS) in lists and ("CiliumNetworkPolicy", "") not in lists


def test_without_leave_to_list_every_namespace_it_says_so(now: datetime) -> None:
    api = api_with(busy_elsewhere(now))

    def forbidden(op: str, key: ObjectKey) -> errors.ApiError | None:
        if op == "list" and key[2] == "" and key[1] in ("Pod", "ConfigMap"):
            return errors.ApiError("pods is forbidden", status=403)
        return None

    api.fail = forbidden
    notes: list[str] = []
    objects = collected(api, NS, notes)
    assert {o["metadata"]["namespace"] for o in objects if o["kind"] == "Pod"} == {NS}
    (note,) = notes
    assert note.startswith("you may not list ConfigMap, Pod in every namespace: held gangs are ")
    # Judged on what it holds: zone-c looks free, and the job still reads held, not ok.
    found = verdict_of(doctor.diagnose(objects, HOLD, namespace=NS, now=now), "PyTorchJob/llama")
    assert found.held is not None and "releases it into zone-c at its next pass" in found.held


def test_an_api_error_other_than_forbidden_is_not_hidden(now: datetime) -> None:
    api = api_with(busy_elsewhere(now))
    api.fail = lambda op, key: errors.ApiError("boom", status=500) if op == "list" else None
    try:
        collected(api, NS)
    except errors.ApiError as err:
        assert err.status == 500
    else:
        raise AssertionError("the error was swallowed")


def test_a_gang_the_releaser_would_release_is_still_held_and_waits_for_a_leader(
    now: datetime,
) -> None:
    """podium down with room free: nothing removes the gate; doctor must not say ok."""
    objects = [*cluster(), *held_job("llama", 4, now - timedelta(seconds=30))]
    result = doctor.diagnose(objects, HOLD, now=now, lease_read=True)
    job = verdict_of(result, "PyTorchJob/llama")
    assert job.held is not None and job.held.startswith(
        "podium's releaser releases it into zone-c at its next pass (best-fit: zone-c has room"
    )
    (finding,) = job.findings
    assert finding.check == "no-leader" and len(finding.pods) == 4
    assert job.as_dict()["verdict"] == "broken" and job.as_dict()["held"] == job.held


def test_held_pods_beside_running_ones_are_not_called_not_admitted(now: datetime) -> None:
    """A gang whose master runs (admitted before the namespace opted in) and whose worker is
    held: the master has no zone (not-pinned), the held worker is podium's own."""
    objects = [*cluster(), *held_job("llama", 2, now)]
    master = next(o for o in objects if o["metadata"].get("name") == "llama-master-0")
    master["spec"].pop("schedulingGates")
    master["spec"]["nodeName"] = "a-0"
    master["metadata"]["labels"].pop(labels.JOB, None)
    result = doctor.diagnose(objects, HOLD, now=now)
    job = verdict_of(result, "PyTorchJob/llama")
    pinned = [f for f in job.findings if f.check == "not-pinned"]
    assert [f.pods for f in pinned] == [("llama-master-0",)]
    assert "llama-worker-0" not in {p for f in job.findings for p in f.pods}
    # The releaser's why stays beside the finding, in the table too.
    assert job.held is not None
    table = doctor.table(result)
    output.make_plain(table)
    cells = [str(c) for c in table.columns[5].cells]
    assert any(c.startswith("not-pinned: ") for c in cells)
    assert f"held: {job.held}" in cells


def test_a_too_big_finding_is_not_said_twice_in_the_table(now: datetime) -> None:
    result = doctor.diagnose([*cluster(), *held_job("huge", 9, now)], HOLD, now=now)
    table = doctor.table(result)
    output.make_plain(table)
    cells = [str(c) for c in table.columns[5].cells]
    assert len(cells) == 1 and cells[0].startswith("too-big: needs 9 × 8 nvidia.com/gpu")
    assert "--unpinned" in cells[0] and "at most 8 pod(s)" in cells[0]


def spread_on_purpose(c: Cluster, reason: str) -> None:
    split(c)
    for pod in c.pods:
        pod["metadata"]["annotations"].update({labels.ZONE: "", labels.REASON: reason})
        pod["metadata"]["labels"].pop(labels.ZONE)
    c.settings = Settings(policy_mode=PolicyMode.NONE)


def view_of(c: Cluster) -> ClusterView:
    return ClusterView.from_objects(
        copy.deepcopy(c.objects()), zone_label=c.settings.zone_label, kept=adapters.KEPT
    )


def test_a_gang_spread_on_purpose_is_not_a_split_to_repair() -> None:
    for reason in (release.TOO_BIG_SPREAD, release.ADMIN):
        c = Cluster()
        spread_on_purpose(c, reason)
        result = c.diagnose()
        (job,) = result.jobs
        assert result.ok and job.findings == () and job.zones == ("zone-a", "zone-c")
        assert job.note is not None and "on purpose" in job.note
        assert job.as_dict()["note"] == job.note
        assert reconcile.split_gangs(view_of(c)) == []


def test_a_split_without_such_a_reason_is_still_one() -> None:
    for reason in (release.TIMEOUT, "no-fit-unpinned", "best-fit"):
        c = Cluster()
        spread_on_purpose(c, reason)
        (job,) = c.diagnose().jobs
        assert [f.check for f in job.findings] == ["split-zones"] and job.note is None
    c = Cluster()
    split(c)
    (job,) = c.diagnose().jobs
    assert "note" not in job.as_dict()
    assert reconcile.split_gangs(view_of(c)) == [(NS, c.key)]
