"""``release.plan``: which held gangs go now, where and why the rest waits — fit node by node,
FIFO with one head and backfill, no starvation, no interleaved partial gangs, completion of a
half-released gang, re-decision, hold-timeout and too-big."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import jsonpatch
import pytest

from tests.builders import ZONE, NodeBuilder, PodBuilder, namespace, template
from tests.core.adapters import (
    child_job,
    cpu_template,
    jobset,
    jobset_pod,
    kubeflow_job,
    leaderworkerset,
    lws_pod,
    mpi_worker_pod,
    mpijob,
    statefulset,
    uid,
)
from tests.scenarios import NS, pytorch_pod, pytorchjob
from webhook.core import adapters, labels, mutation, policies, release
from webhook.core.adapters.base import PodGroup
from webhook.core.release.waits import needs
from webhook.core.settings import HoldOrder, NoFit, Placement, Settings, TooBig, ZoneChooser
from webhook.core.view import ClusterView

HOLD = Settings(zone_chooser=ZoneChooser.HOLD)


def cluster(a: int = 1, b: int = 2, c: int = 8) -> list[dict[str, Any]]:
    """zone-a, zone-b and zone-c with ``a``, ``b`` and ``c`` nodes of 8 GPUs."""
    nodes = [("zone-a", "a", a), ("zone-b", "b", b), ("zone-c", "c", c)]
    return [
        namespace(NS),
        *(NodeBuilder(f"{p}-{i}").zone(z).obj() for z, p, n in nodes for i in range(n)),
    ]


def held_job(
    name: str, pods: int, at: datetime, *, gpus: int = 8, present: int | None = None
) -> list[dict[str, Any]]:
    """A PyTorchJob of ``pods`` pods (1 master) and ``present`` of its pods, held since ``at``."""
    pj = pytorchjob(name, workers=pods - 1, gpus=gpus)
    out = [pj]
    for i in range(pods if present is None else present):
        rtype, index = ("master", 0) if i == 0 else ("worker", i - 1)
        pod = pytorch_pod(pj, rtype, index, gpus=gpus).uid().obj()
        held = mutation.hold(pod, gang_key=pj["metadata"]["uid"]).pod
        held["metadata"]["creationTimestamp"] = at.isoformat().replace("+00:00", "Z")
        out.append(held)
    return out


def hogs(zone_prefix: str, nodes: range, gpus: int = 8) -> list[dict[str, Any]]:
    """Other work running on the given nodes."""
    return [
        PodBuilder("other", name=f"hog-{zone_prefix}-{i}")
        .gpus(gpus)
        .bound(f"{zone_prefix}-{i}")
        .obj()
        for i in nodes
    ]


def plan(
    objects: list[dict[str, Any]], now: datetime, settings: Settings = HOLD, **kw: Any
) -> release.Plan:
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    return release.plan(view, settings, now=now, **kw)


def names(p: release.Plan) -> list[tuple[str, str | None, str]]:
    return [(r.held.gang.owner.name, r.zone, r.reason) for r in p.releases]


def apply(objects: list[dict[str, Any]], p: release.Plan) -> list[dict[str, Any]]:
    """The cluster after the releaser carried ``p`` out and the scheduler bound what it released
    (first node of the zone with room), as kube-scheduler would."""
    out = list(objects)
    view = ClusterView.from_objects(out, zone_label=HOLD.zone_label, kept=adapters.KEPT)
    free = {n.name: dict(view.free_on(n)) for n in view.nodes()}
    zone_of = {n.name: n.zone for n in view.nodes()}
    for r in p.releases:
        if r.record is not None:
            out = [o for o in out if o["metadata"].get("name") != r.record["metadata"]["name"]]
            out.append(r.record)
        refs = {ref.name for ref in r.pods}
        for i, obj in enumerate(out):
            if obj["kind"] != "Pod" or obj["metadata"]["name"] not in refs:
                continue
            patched = jsonpatch.apply_patch(obj, release.release_patch(obj, r, HOLD))
            gpus = int(patched["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
            node = next(
                (
                    n
                    for n in sorted(free)
                    if zone_of[n] == r.zone and free[n]["nvidia.com/gpu"] >= gpus
                ),
                None,
            )
            if node is not None:
                free[node]["nvidia.com/gpu"] -= gpus
                patched["spec"]["nodeName"] = node
                patched["status"] = {"phase": "Running"}
            out[i] = patched
    return out


def ungated(objects: list[dict[str, Any]], p: release.Plan) -> list[dict[str, Any]]:
    """The cluster right after the releaser carried out ``p``'s one release: its record written
    and its pods ungated, none of them bound yet."""
    (r,) = p.releases
    assert r.record is not None
    pods = {ref.name for ref in r.pods}
    patched = [
        jsonpatch.apply_patch(o, release.release_patch(o, r, HOLD))
        if o["kind"] == "Pod" and o["metadata"]["name"] in pods
        else o
        for o in objects
    ]
    return [*patched, r.record]


# -- fit -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "placement", "zone"),
    [
        (1, Placement.BEST_FIT, "zone-a"),
        (2, Placement.BEST_FIT, "zone-b"),
        (3, Placement.BEST_FIT, "zone-c"),
        (2, Placement.MOST_FREE, "zone-c"),
    ],
)
def test_a_ready_gang_that_fits_is_released_whole(
    pods: int, placement: Placement, zone: str, now: datetime
) -> None:
    objects = [*cluster(), *held_job("llama", pods, now)]
    p = plan(objects, now, dataclasses.replace(HOLD, placement=placement))
    assert names(p) == [("llama", zone, placement.value)] and p.waits == ()
    (r,) = p.releases
    assert len(r.pods) == pods and not r.replace
    assert r.record is not None and r.record["data"]["zone"] == zone
    assert [m["kind"] for m in r.policies] == ["CiliumNetworkPolicy"]
    assert r.policy_name == r.policies[0]["metadata"]["name"]


def test_a_gang_waits_for_its_pods(now: datetime) -> None:
    p = plan([*cluster(), *held_job("llama", 4, now, present=3)], now)
    assert p.releases == ()
    (w,) = p.waits
    assert (w.position, w.why) == (0, "waiting for its pods: 3 of 4 exist")


def test_fit_is_node_by_node_and_counts_bound_pods(now: datetime) -> None:
    # zone-a is taken; zone-b has 8 free GPUs, but as 4 + 4 on two nodes: no 8-GPU pod fits.
    objects = [*cluster(c=0), *hogs("a", range(1)), *hogs("b", range(2), gpus=4)]
    p = plan([*objects, *held_job("llama", 1, now)], now)
    assert p.releases == ()
    assert p.waits[0].why == (
        "needs 1 × 8 nvidia.com/gpu in one zone; the roomiest zone, zone-b, has "
        "8 nvidia.com/gpu free (4/4 per node); 1st in line (first: zone-b is kept for it)"
    )


def test_pods_released_but_not_bound_take_room(now: datetime) -> None:
    first = held_job("first", 2, now - timedelta(seconds=5))
    objects = [*cluster(c=0), *first]
    once = plan(objects, now)
    assert names(once) == [("first", "zone-b", "best-fit")]
    # Released, not bound yet (no node): zone-b's room is theirs; a new gang must not take it.
    p = plan([*ungated(objects, once), *held_job("second", 2, now)], now)
    assert names(p) == [] and p.waits[0].held.gang.owner.name == "second"


def test_pods_on_their_way_are_counted_spread_as_the_scheduler_spreads_them(
    now: datetime,
) -> None:
    """Eight 1-GPU pods released into zone-b (two 8-GPU nodes) and not bound yet: kube-scheduler
    spreads them, 4 and 4, so no 8-GPU pod fits there until they bind. Counted first-fit they
    would leave a whole node free, and the 8-GPU gang would be released into room that is not
    there (the study's stuck gang, docs/benchmarks/placement.md)."""
    small = held_job("small", 8, now - timedelta(seconds=5), gpus=1)
    objects = [*cluster(c=0), *hogs("a", range(1)), *small]
    once = plan(objects, now)
    assert names(once) == [("small", "zone-b", "best-fit")]
    waiting = [*ungated(objects, once), *held_job("big", 1, now)]
    p = plan(waiting, now)
    assert names(p) == [] and p.waits[0].held.gang.owner.name == "big"
    assert "zone-b, has 8 nvidia.com/gpu free" in p.waits[0].why
    # Bound as they were spread, the room is what the view shows: still no whole node.
    bound = [
        {**o, "spec": {**o["spec"], "nodeName": f"b-{i % 2}"}, "status": {"phase": "Running"}}
        if o["kind"] == "Pod" and o["metadata"]["name"].startswith("small")
        else o
        for i, o in enumerate(waiting)
    ]
    assert names(plan(bound, now)) == []


# -- order: interleaved gangs, head and backfill, starvation ----------------------------------


def test_interleaved_gangs_one_whole_the_other_waits_whole(now: datetime) -> None:
    """Two gangs that each fit zone-b alone but not together (zone-a and zone-c are too small):
    the older is released whole, the other waits whole; no partial state."""
    objects = [
        *cluster(c=0),
        *held_job("older", 2, now - timedelta(seconds=10)),
        *held_job("newer", 2, now - timedelta(seconds=5)),
    ]
    p = plan(objects, now)
    assert names(p) == [("older", "zone-b", "best-fit")]
    assert len(p.releases[0].pods) == 2
    (w,) = p.waits
    assert (w.held.gang.owner.name, w.position, len(w.held.held)) == ("newer", 1, 2)
    after = apply(objects, p)
    again = plan(after, now)
    assert names(again) == [] and [w.held.gang.owner.name for w in again.waits] == ["newer"]
    gated = [o for o in after if o["kind"] == "Pod" and o["spec"].get("schedulingGates")]
    assert {o["metadata"]["labels"][labels.JOB] for o in gated} == {w.held.key for w in again.waits}


def test_small_gangs_backfill_but_never_into_the_heads_zone(now: datetime) -> None:
    big = held_job("big", 4, now - timedelta(seconds=60))  # 32 GPUs: only zone-c could hold it
    objects = [*cluster(c=4), *hogs("c", range(1)), *big]
    smalls = [held_job(f"small-{i}", 1, now - timedelta(seconds=50 - i)) for i in range(4)]
    p = plan([*objects, *(o for s in smalls for o in s)], now)
    released = {name: zone for name, zone, _ in names(p)}
    assert "big" not in released
    assert "zone-c" not in released.values()
    assert sorted(released.values()) == ["zone-a", "zone-b", "zone-b"]
    head = next(w for w in p.waits if w.held.gang.owner.name == "big")
    assert head.position == 1 and "zone-c is kept for it" in head.why
    assert [w.position for w in p.waits if w.held.gang.owner.name == "small-3"] == [2]


def test_fit_first_lets_small_gangs_into_the_zone_a_big_one_waits_for(now: datetime) -> None:
    """``hold-order: fit-first``: no head, so the same small gangs also take zone-c, and the big
    gang waits without a zone kept for it."""
    big = held_job("big", 4, now - timedelta(seconds=60))
    objects = [*cluster(c=4), *hogs("c", range(1)), *big]
    smalls = [held_job(f"small-{i}", 1, now - timedelta(seconds=50 - i)) for i in range(4)]
    settings = dataclasses.replace(HOLD, hold_order=HoldOrder.FIT_FIRST)
    p = plan([*objects, *(o for s in smalls for o in s)], now, settings)
    released = {name: zone for name, zone, _ in names(p)}
    assert "big" not in released
    assert set(released) == {f"small-{i}" for i in range(4)}
    assert "zone-c" in released.values()
    (head,) = p.waits
    assert head.held.gang.owner.name == "big" and "kept for it" not in head.why


def test_a_big_gang_is_not_starved_by_small_ones_that_keep_coming(now: datetime) -> None:
    """A 4-pod gang waits for zone-c (running work holds 3 of its 4 nodes) while a 1-pod gang
    arrives every pass. The small ones run in zone-a and zone-b as room allows; none takes
    zone-c; once the running work there ends, the big gang gets zone-c whole."""
    objects = [*cluster(c=4), *hogs("c", range(3)), *held_job("big", 4, now)]
    waited: dict[str, int] = {}
    released_at: dict[str, int] = {}
    for step in range(12):
        objects.extend(held_job(f"small-{step}", 1, now + timedelta(seconds=step + 1)))
        if step == 6:  # the running work in zone-c ends
            objects = [o for o in objects if not o["metadata"]["name"].startswith("hog-c")]
        if step in (3, 8):  # and small jobs end, so zone-a and zone-b free up now and then
            objects = [
                o
                for o in objects
                if not (o["kind"] == "Pod" and o["spec"].get("nodeName", "x")[:1] in ("a", "b"))
            ]
        p = plan(objects, now + timedelta(seconds=step + 2))
        for name, zone, _ in names(p):
            released_at[name] = step
            if name != "big":
                assert zone != "zone-c" or "big" in released_at, (step, name)
        for w in p.waits:
            waited[w.held.gang.owner.name] = waited.get(w.held.gang.owner.name, 0) + 1
        objects = apply(objects, p)
    assert released_at["big"] == 6
    big_pods = [o for o in objects if o["metadata"]["name"].startswith("big-")]
    assert {o["spec"].get("nodeName", "")[:1] for o in big_pods} == {"c"}
    assert not any(o["spec"].get("schedulingGates") for o in big_pods)
    # Wait by gang size: the big one waited for the running work; the small ones not for it.
    assert waited["big"] == 6
    assert sum(waited.get(f"small-{i}", 0) for i in range(12)) <= 12 * 6


# -- completion, re-decision -----------------------------------------------------------------


def test_a_half_released_gang_is_completed_into_its_zone_without_a_fit_check(now: datetime) -> None:
    objects = [*cluster(), *held_job("llama", 3, now)]
    first = plan(objects, now)
    (r,) = first.releases
    # The leader died after the record, the policy and one pod: zone-b then filled up.
    one = r.pods[0].name
    half = [
        jsonpatch.apply_patch(o, release.release_patch(o, r, HOLD))
        if o["metadata"].get("name") == one
        else o
        for o in objects
    ]
    full = [*half, r.record, *hogs("c", range(8)), *hogs("b", range(2))]
    p = plan(full, now)
    (done,) = p.releases
    assert (done.zone, done.reason, done.record) == (r.zone, release.COMPLETED, None)
    assert sorted(ref.name for ref in done.pods) == sorted(ref.name for ref in r.pods[1:])


def test_a_recorded_gang_with_no_pod_released_is_decided_again(now: datetime) -> None:
    objects = [*cluster(), *held_job("llama", 2, now)]
    (r,) = plan(objects, now).releases
    assert r.zone == "zone-b" and r.record is not None
    # Nothing was released; zone-b filled up meanwhile: the gang goes elsewhere.
    p = plan([*objects, r.record, *hogs("b", range(2))], now)
    (again,) = p.releases
    assert (again.zone, again.replace) == ("zone-c", True)
    assert again.record is not None and again.record["data"]["zone"] == "zone-c"


# -- timeout, too big ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "no_fit", "outcome"),
    [
        (1800.0, NoFit.PIN_MOST_FREE, ("zone-c", release.TIMEOUT)),
        (1800.0, NoFit.UNPINNED, (None, release.TIMEOUT)),
        (0.0, NoFit.PIN_MOST_FREE, None),  # 0: hold for ever
        (7200.0, NoFit.PIN_MOST_FREE, None),  # not yet
    ],
)
def test_hold_timeout(
    timeout: float, no_fit: NoFit, outcome: tuple[str | None, str] | None, now: datetime
) -> None:
    objects = [*cluster(), *hogs("c", range(5)), *held_job("llama", 4, now - timedelta(hours=1))]
    settings = dataclasses.replace(HOLD, hold_timeout_seconds=timeout, no_fit=no_fit)
    p = plan(objects, now, settings)
    if outcome is None:
        assert p.releases == () and p.waits[0].position == 1
    else:
        (r,) = p.releases
        assert (r.zone, r.reason) == outcome
        assert "held 3600s" in r.detail and r.waited_seconds == 3600


@pytest.mark.parametrize("too_big", list(TooBig))
def test_a_gang_no_zone_could_ever_hold(too_big: TooBig, now: datetime) -> None:
    objects = [*cluster(), *held_job("huge", 9, now)]  # 72 GPUs; zone-c holds 64 at most
    p = plan(objects, now, dataclasses.replace(HOLD, too_big=too_big))
    if too_big is TooBig.HOLD:
        (w,) = p.waits
        assert w.too_big and "more than any zone holds even empty" in w.why
        assert p.releases == ()
    else:
        (r,) = p.releases
        assert (r.zone, r.reason) == (None, release.TOO_BIG_SPREAD)
        (policy,) = r.policies
        # Job-wide: selects the gang's pods wherever they run (no zone in the selector).
        assert policy["spec"]["endpointSelector"] == {"matchLabels": {labels.JOB: r.held.key}}


def test_a_too_big_gang_does_not_become_the_head(now: datetime) -> None:
    objects = [*cluster(), *held_job("huge", 9, now), *held_job("small", 1, now + timedelta(1))]
    assert names(plan(objects, now)) == [("small", "zone-a", "best-fit")]


# -- the patch --------------------------------------------------------------------------------


def test_the_release_patch_pins_labels_and_ungates(now: datetime) -> None:
    objects = [*cluster(), *held_job("llama", 1, now)]
    (r,) = plan(objects, now).releases
    pod = next(o for o in objects if o["kind"] == "Pod")
    after = jsonpatch.apply_patch(pod, release.release_patch(pod, r, HOLD))
    assert "schedulingGates" not in after["spec"]
    assert after["metadata"]["labels"][labels.ZONE] == "zone-a"
    assert after["metadata"]["annotations"][labels.REASON] == "best-fit"
    assert after["metadata"]["annotations"][labels.POLICY] == r.policy_name
    terms = after["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert all(
        {"key": labels.ZONE_LABEL, "operator": "In", "values": ["zone-a"]} in t["matchExpressions"]
        for t in terms
    )
    assert r.record["kind"] == policies.RECORD_KIND  # type: ignore[index]


# -- an admin's release (podium release) ------------------------------------------------------


@pytest.mark.parametrize(("asked", "zone"), [("zone", "zone-c"), ("unpinned", None)])
def test_an_admin_releases_a_gang_now_out_of_turn(
    asked: str, zone: str | None, now: datetime
) -> None:
    """No zone fits (zone-c has 24 free for 32): the admin's release goes into the roomiest
    zone, or none, ahead of an older gang, naming who asked."""
    older = held_job("older", 4, now - timedelta(seconds=60))
    mine = held_job("mine", 4, now)
    mine[0]["metadata"]["annotations"] = {
        labels.RELEASE: asked,
        labels.RELEASED_BY: "alice",
    }
    p = plan([*cluster(), *hogs("c", range(5)), *older, *mine], now)
    (r,) = p.releases
    assert (r.held.gang.owner.name, r.zone, r.reason, r.by) == ("mine", zone, "admin", "alice")
    assert "released by alice" in r.detail and len(r.pods) == 4
    assert [w.held.gang.owner.name for w in p.waits] == ["older"]


# -- readiness: elastic and staged starts ----------------------------------------------------


def held(pods: list[dict[str, Any]], key: str, at: datetime) -> list[dict[str, Any]]:
    """``pods`` as podium's admission leaves them in ``hold`` mode, created at ``at``."""
    out = []
    for pod in pods:
        meta = pod["metadata"]
        meta.setdefault("name", f"{meta.get('generateName', 'pod-')}{len(out)}")
        after = mutation.hold(pod, gang_key=key).pod
        after["metadata"]["creationTimestamp"] = at.isoformat().replace("+00:00", "Z")
        out.append(after)
    return out


def elastic_job(at: datetime, present: int) -> tuple[list[dict[str, Any]], str]:
    """A PyTorchJob of 4 × 8-GPU workers, ``elasticPolicy`` 2..4; ``present`` workers exist."""
    pj = kubeflow_job("PyTorchJob", "elastic", {"Worker": (4, template(8))}, uid=uid(31))
    pj["spec"]["elasticPolicy"] = {"minReplicas": 2, "maxReplicas": 4}
    key = pj["metadata"]["uid"]
    return [pj, *held([pytorch_pod(pj, "worker", i).obj() for i in range(present)], key, at)], key


def mpi_job(at: datetime, present: int) -> tuple[list[dict[str, Any]], str]:
    """An MPIJob of 4 × 8-GPU workers and a launcher created once they are ready."""
    mj = mpijob("pi", workers=4, uid=uid(32))
    mj["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    key = mj["metadata"]["uid"]
    return [mj, *held([mpi_worker_pod(mj, i).obj() for i in range(present)], key, at)], key


def in_order_jobset(at: datetime, present: int) -> tuple[list[dict[str, Any]], str]:
    """A JobSet started in order: one 8-GPU leader, then 3 × 8-GPU workers."""
    js = jobset(
        "ordered", [("leader", 1, 1, template(8)), ("workers", 1, 3, template(8))], uid=uid(33)
    )
    js["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    child = child_job(js, "leader", 0, uid=uid(34))
    pods = [jobset_pod(js, child, "leader", 0, i).obj() for i in range(present)]
    return [js, child, *held(pods, js["metadata"]["uid"], at)], js["metadata"]["uid"]


def depends_on_jobset(at: datetime, present: int) -> tuple[list[dict[str, Any]], str]:
    """A JobSet whose 4 × 8-GPU nodes wait for a CPU initializer (``dependsOn``)."""
    js = jobset(
        "initialised", [("init", 1, 1, cpu_template()), ("node", 1, 4, template(8))], uid=uid(35)
    )
    js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "init", "status": "Complete"}]
    child = child_job(js, "init", 0, uid=uid(36))
    pods = [jobset_pod(js, child, "init", 0, i, gpu=0).obj() for i in range(present)]
    return [js, child, *held(pods, js["metadata"]["uid"], at)], js["metadata"]["uid"]


def leader_ready_lws(at: datetime, present: int) -> tuple[list[dict[str, Any]], str]:
    """Group 0 of an LWS of groups of 3 × 8 GPUs whose workers come once the leader is ready."""
    lws = leaderworkerset("vllm", size=3, uid=uid(37))
    lws["spec"]["startupPolicy"] = "LeaderReady"
    sts = statefulset("vllm", lws, uid=uid(38))
    key = f"{lws['metadata']['uid']}-g0"
    return [lws, sts, *held([lws_pod(lws, sts, 0, 0).obj()][:present], key, at)], key


#: framework → (its job with ``present`` first-stage pods held, first stage, whole gang, why)
STAGED = {
    "elastic-pytorchjob": (
        elastic_job,
        2,
        4,
        "elastic: runs with elasticPolicy.minReplicas 2 workers",
    ),
    "mpijob-wait-for-workers": (
        mpi_job,
        4,
        5,
        "launcherCreationPolicy WaitForWorkersReady: the launcher follows its workers",
    ),
    "jobset-in-order": (in_order_jobset, 1, 4, "startupPolicyOrder InOrder: leader start(s) first"),
    "jobset-depends-on": (depends_on_jobset, 1, 5, "dependsOn: init start(s) first"),
    "lws-leader-ready": (
        leader_ready_lws,
        1,
        3,
        "startupPolicy LeaderReady: the workers follow their leader",
    ),
}


@pytest.mark.parametrize("framework", list(STAGED))
def test_a_staged_or_elastic_gang_is_decided_once_its_first_stage_exists(
    framework: str, now: datetime
) -> None:
    """Ready with the first stage alone (read from the job, not after a stable pass), and fitted
    with the whole gang's demand: zone-c, the only zone that holds it all, though best-fit would
    put the first stage alone into a smaller zone."""
    make, first, whole, _ = STAGED[framework]
    objects, key = make(now, first)
    p = plan([*cluster(), *objects], now)
    assert names(p) == [(objects[0]["metadata"]["name"], "zone-c", "best-fit")], p.waits
    (r,) = p.releases
    assert r.held.key == key and len(r.pods) == first
    assert release.size_of(r.held.gang) == whole > first


@pytest.mark.parametrize("framework", [f for f, s in STAGED.items() if s[1] > 1])
def test_a_staged_or_elastic_gang_waits_for_all_of_its_first_stage(
    framework: str, now: datetime
) -> None:
    make, first, _, why = STAGED[framework]
    objects, _ = make(now, first - 1)
    counts = {w.held.key: len(w.held.held) for w in plan([*cluster(), *objects], now).waits}
    # Not even once the count held for a pass: the job says how many pods to wait for.
    p = plan([*cluster(), *objects], now, stable=counts)
    assert p.releases == ()
    (w,) = p.waits
    assert (w.position, w.why) == (0, f"waiting for its pods: {first - 1} of {first} exist ({why})")


@pytest.mark.parametrize(
    ("framework", "room"),
    [
        ("elastic-pytorchjob", 8),
        ("jobset-in-order", 8),
        ("jobset-depends-on", 8),
        ("lws-leader-ready", 16),
    ],
)
def test_the_later_stages_keep_their_room_until_they_come(
    framework: str, room: int, now: datetime
) -> None:
    """Released with its first stage, which then binds: in a later pass the GPU pods still to
    come keep their room in the gang's zone (5 nodes of zone-c; zone-a and zone-b taken), so a
    gang bigger than the ``room`` they leave waits while one that size fits; past the
    reservation window only the bound pods count. (MPI's launcher needs no GPU.)"""
    make, first, _, _ = STAGED[framework]
    objects, _ = make(now, first)
    base = [*cluster(c=5), *hogs("a", range(1)), *hogs("b", range(2)), *objects]
    after = apply(base, plan(base, now))
    soon = now + timedelta(seconds=2)
    fits = held_job("fits", room // 8, now + timedelta(seconds=1))
    too_big = held_job("too-big", room // 8 + 1, now + timedelta(seconds=1))
    assert names(plan([*after, *too_big], soon)) == []
    assert names(plan([*after, *fits], soon)) == [("fits", "zone-c", "best-fit")]
    later = now + timedelta(seconds=HOLD.reservation_seconds + 1)
    assert names(plan([*after, *too_big], later)) == [("too-big", "zone-c", "best-fit")]


def test_the_why_counts_the_pods_that_ask_for_the_primary_resource_in_units_people_read() -> None:
    """An MPIJob's CPU-only launcher is not one of the 4 × 8-GPU workers the gang waits for; a
    CPU gang's need reads in cores, not millicores."""
    mj = mpijob(workers=4, uid="mj-uid")
    view = ClusterView.from_objects([namespace(NS), mj], zone_label=ZONE, kept=adapters.KEPT)
    gang = adapters.recognise(mpi_worker_pod(mj, 0).obj(), NS, view)
    assert gang is not None and sum(g.count for g in gang.demand) == 5
    assert needs(gang, "nvidia.com/gpu") == "4 × 8 nvidia.com/gpu"
    cpu = dataclasses.replace(gang, demand=(PodGroup(16, {"cpu": 8_000}),))
    assert needs(cpu, "cpu") == "16 × 8 cpu"
    mixed = dataclasses.replace(
        gang, demand=(PodGroup(1, {"cpu": 500}), PodGroup(2, {"cpu": 64_000}))
    )
    assert needs(mixed, "cpu") == "128500m cpu over 3 pods"


READY = {"type": "Ready", "status": "True"}


@pytest.mark.parametrize(
    ("event", "obj", "may"),
    [
        ("DELETED", {"kind": "Pod", "spec": {}}, True),
        ("MODIFIED", {"kind": "Pod", "spec": {}, "status": {"phase": "Succeeded"}}, True),
        ("MODIFIED", {"kind": "Pod", "spec": {}, "status": {"phase": "Failed"}}, True),
        ("MODIFIED", {"kind": "Pod", "spec": {}, "status": {"phase": "Running"}}, False),
        ("ADDED", {"kind": "Pod", "spec": {"schedulingGates": [{"name": labels.HOLD_GATE}]}}, True),
        ("ADDED", {"kind": "Pod", "spec": {"schedulingGates": [{"name": "other"}]}}, False),
        ("ADDED", {"kind": "Pod", "spec": {}}, False),
        ("ADDED", {"kind": "Node"}, True),
        ("MODIFIED", {"kind": "Node"}, False),  # not Ready
        ("MODIFIED", {"kind": "Node", "status": {"conditions": [READY]}}, True),
        (
            "MODIFIED",
            {"kind": "Node", "spec": {"unschedulable": True}, "status": {"conditions": [READY]}},
            False,
        ),
        (
            "MODIFIED",
            {"kind": "Node", "status": {"conditions": [{**READY, "status": "False"}]}},
            False,
        ),
        ("DELETED", {"kind": "Node", "status": {"conditions": [READY]}}, False),
        ("DELETED", {"kind": "ConfigMap"}, False),
    ],
)
def test_the_events_that_may_let_a_held_gang_go(event: str, obj: dict[str, Any], may: bool) -> None:
    assert release.may_release(event, obj) is may
