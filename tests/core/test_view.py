"""The cluster view (webhook/core/view/): slim pods, incremental usage, the label index, the
candidate-zone cache, relist replacement, and what a pod costs to hold."""

from __future__ import annotations

import copy
import gc
import inspect
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.builders import ZONE, JobBuilder, NodeBuilder, PodBuilder, namespace
from tests.core.adapters import SAMPLES
from tests.scenarios import NS, pytorch_pod, pytorchjob
from webhook.core import adapters, labels, resources, selectors
from webhook.core.adapters import base, jobset, kuberay, lws, mpi, trainingoperator, volcano
from webhook.core.view import TERMINAL_PHASES, ClusterView

GPU = "nvidia.com/gpu"


def view(*objects: dict[str, Any]) -> ClusterView:
    return ClusterView.from_objects(objects, zone_label=ZONE, kept=adapters.KEPT)


def gpu_pod(name: str, node_name: str | None, gpus: int = 1, **labels_: str) -> dict[str, Any]:
    pod = PodBuilder(NS, name=name).uid().gpus(gpus)
    for key, value in labels_.items():
        pod.label(key, value)
    return (pod.bound(node_name) if node_name else pod).obj()


# -- usage, kept incrementally ------------------------------------------------------------------


def test_bound_running_pods_use_their_node_and_finished_ones_give_it_back() -> None:
    snap = view(
        NodeBuilder("n1").zone("zone-a").obj(), gpu_pod("p1", "n1", 2), gpu_pod("p2", "n1", 3)
    )
    n1 = snap.node("n1")
    assert n1 is not None
    assert snap.free_on(n1)[GPU] == 3
    done = gpu_pod("p1", "n1", 2)
    done["status"]["phase"] = "Succeeded"
    snap.apply("MODIFIED", done)
    assert snap.free_on(n1)[GPU] == 5
    snap.apply("DELETED", gpu_pod("p2", "n1", 3))
    assert snap.free_on(n1)[GPU] == 8
    snap.apply("ADDED", gpu_pod("p3", None, 4))  # not bound yet: uses nothing
    assert snap.free_on(n1)[GPU] == 8


def test_a_modified_pod_replaces_its_old_usage_and_never_counts_twice() -> None:
    snap = view(NodeBuilder("n1").zone("zone-a").obj(), NodeBuilder("n2").zone("zone-a").obj())
    pod = gpu_pod("p1", "n1", 2, **{labels.JOB: "gang-1"})
    for _ in range(3):
        snap.apply("MODIFIED", copy.deepcopy(pod))  # a relist re-applies every item
    moved = copy.deepcopy(pod)
    moved["spec"]["nodeName"] = "n2"
    snap.apply("MODIFIED", moved)
    n1, n2 = snap.node("n1"), snap.node("n2")
    assert n1 is not None and n2 is not None
    assert (snap.free_on(n1)[GPU], snap.free_on(n2)[GPU]) == (8, 6)
    assert snap.gang_usage("gang-1") == {GPU: 2, resources.PODS: 1}


def test_gang_usage_follows_podium_label_and_empties_when_the_gang_is_gone() -> None:
    snap = view(
        NodeBuilder("n1").zone("zone-a").obj(),
        gpu_pod("a", "n1", 2, **{labels.JOB: "g"}),
        gpu_pod("b", "n1", 2, **{labels.JOB: "g"}),
        gpu_pod("c", "n1", 2, **{labels.JOB: "other"}),
    )
    assert snap.gang_usage("g") == {GPU: 4, resources.PODS: 2}
    snap.apply(
        "DELETED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": NS, "name": "a"}}
    )
    snap.apply(
        "DELETED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": NS, "name": "b"}}
    )
    assert snap.gang_usage("g") == {}
    assert snap.gang_usage("other") == {GPU: 2, resources.PODS: 1}


def test_a_node_heartbeat_changes_nothing_and_a_real_change_is_seen() -> None:
    n1 = NodeBuilder("n1").zone("zone-a").obj()
    snap = view(n1, gpu_pod("p", "n1", 1))
    snap.candidate_zones({})  # cache the unconstrained candidates
    heartbeat = copy.deepcopy(n1)
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2030-01-01T00:00:00Z"
    snap.apply("MODIFIED", heartbeat)
    assert snap.candidate_zones({})["zone-a"].free()[GPU] == 7
    snap.apply("MODIFIED", NodeBuilder("n1").zone("zone-a").not_ready().obj())
    assert snap.candidate_zones({}) == {}


# -- pods: what is kept -------------------------------------------------------------------------


def test_a_pod_keeps_only_what_podium_reads() -> None:
    pj = pytorchjob()
    pod = (
        pytorch_pod(pj, "master")
        .label("app", "unrelated")
        .annotate("kubectl.kubernetes.io/restartedAt", "now")
        .annotate(labels.ZONE, "zone-a")
        .env("PET_MASTER_ADDR", "llama-master-0")
        .env("HUGE", "x" * 4000)
        .bound("n1")
        .obj()
    )
    pod["metadata"]["ownerReferences"].append(
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u", "controller": False}
    )
    snap = view(pod)
    kept = snap.get("v1", "Pod", NS, pod["metadata"]["name"])
    assert kept is not None
    assert kept["metadata"]["labels"] == {
        k: v for k, v in pod["metadata"]["labels"].items() if k != "app"
    }
    assert kept["metadata"]["annotations"] == {labels.ZONE: "zone-a"}
    controller = dict(pod["metadata"]["ownerReferences"][0])
    del controller["blockOwnerDeletion"]  # only the controller reference is kept, and only this
    assert kept["metadata"]["ownerReferences"] == [controller]
    assert kept["spec"] == {
        "nodeName": "n1",
        "containers": [{"env": [{"name": "PET_MASTER_ADDR", "value": "llama-master-0"}]}],
    }
    assert kept["status"] == {"phase": "Running"}
    assert snap.by_uid(pod["metadata"]["uid"]) == kept


def test_pods_with_the_same_requests_share_one_parsed_requests_dict() -> None:
    snap = view(gpu_pod("a", "n1", 2), gpu_pod("b", "n1", 2), gpu_pod("c", "n1", 3))
    a, b, c = (snap.pod(NS, n) for n in "abc")
    assert a is not None and b is not None and c is not None
    assert a.requests is b.requests and a.requests == {GPU: 2, resources.PODS: 1}
    assert c.requests == {GPU: 3, resources.PODS: 1}


ADAPTER_MODULES = [trainingoperator, mpi, jobset, lws, volcano, kuberay]


def _label_constants(module: Any) -> set[str]:
    """The label and annotation keys a module names (``domain/name``, not an API version)."""
    api_versions = {kind.api_version for kind in adapters.KINDS}
    return {
        v
        for k, v in inspect.getmembers(module)
        if k.isupper()
        and isinstance(v, str)
        and "/" in v
        and "." in v.split("/")[0]
        and v not in api_versions
    }


def _reads(module: Any) -> base.Reads:
    (adapter,) = (a for a in adapters.ADAPTERS if type(a).__module__ == module.__name__)
    return adapter.reads


@pytest.mark.parametrize("module", ADAPTER_MODULES)
def test_every_label_an_adapter_reads_is_declared_and_kept(module: Any) -> None:
    keys = _label_constants(module)
    reads = _reads(module)
    assert keys
    assert all(key.startswith(reads.pod_prefixes) or key in reads.pod_keys for key in keys)
    pod = PodBuilder(NS, name="p").bound("n1").obj()
    pod["metadata"]["labels"] = dict.fromkeys(keys, "v")
    pod["metadata"]["annotations"] = dict.fromkeys(keys, "v")
    kept = view(pod).get("v1", "Pod", NS, "p")
    assert kept is not None
    assert set(kept["metadata"]["labels"]) == keys
    assert set(kept["metadata"]["annotations"]) == keys


@pytest.mark.parametrize("module", ADAPTER_MODULES)
def test_member_labels_are_indexed(module: Any) -> None:
    reads = _reads(module)
    assert reads.member_labels
    indexed = ClusterView(zone_label=ZONE, kept=adapters.KEPT).kept.indexed_labels
    assert reads.member_labels <= indexed
    assert labels.JOB in indexed


def test_the_env_adapters_read_is_kept() -> None:
    env_names = {*inspect.signature(base.env_world).parameters["names"].default}
    assert {*env_names, *jobset.MASTER_ENV, lws.GROUP_SIZE_ENV} <= adapters.KEPT.env


@pytest.mark.parametrize(
    ("pod", "objects"),
    [(pod, objects) for _, _, pod, objects in SAMPLES],
    ids=[s[1] for s in SAMPLES],
)
def test_a_gangs_members_are_found_through_the_label_index(
    pod: dict[str, Any], objects: list[dict[str, Any]]
) -> None:
    gang = adapters.recognise(pod, NS, view(*objects))
    assert gang is not None
    assert not gang.member_labels or set(gang.member_labels) & adapters.KEPT.indexed_labels


@pytest.mark.parametrize(
    ("pod", "objects"),
    [(pod, objects) for _, _, pod, objects in SAMPLES],
    ids=[s[1] for s in SAMPLES],
)
def test_a_sibling_read_back_from_the_view_is_recognised_as_the_original(
    pod: dict[str, Any], objects: list[dict[str, Any]]
) -> None:
    """engine._placed_members recognises *other* pods from the view: the slim copy must give the
    same gang, role and coordinator as the pod itself."""
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("name", pod["metadata"].get("generateName", "p") + "x1")
    pod["metadata"]["uid"] = "pod-uid"
    pod["spec"]["nodeName"] = "n1"
    snap = view(*objects, pod)
    slim = snap.get("v1", "Pod", NS, pod["metadata"]["name"])
    assert slim is not None
    whole, again = adapters.recognise(pod, NS, snap), adapters.recognise(slim, NS, snap)
    assert (whole is None) == (again is None)
    if whole is not None and again is not None:
        assert (again.key, again.role, again.coordinator, dict(again.member_labels)) == (
            whole.key,
            whole.role,
            whole.coordinator,
            dict(whole.member_labels),
        )


# -- the label index ----------------------------------------------------------------------------


def test_pods_in_with_labels_reads_the_index_and_agrees_with_a_scan() -> None:
    pods = [
        gpu_pod(
            f"p{i}", "n1", **{trainingoperator.JOB_NAME: f"job-{i % 3}", labels.JOB: f"g{i % 2}"}
        )
        for i in range(12)
    ]
    snap = view(NodeBuilder("n1").zone("zone-a").obj(), *pods, gpu_pod("loner", "n1"))
    for query in (
        {trainingoperator.JOB_NAME: "job-1"},
        {labels.JOB: "g0"},
        {trainingoperator.JOB_NAME: "job-1", labels.JOB: "g0"},
        {trainingoperator.REPLICA_TYPE: "worker"},  # not indexed: scans the namespace
        {trainingoperator.JOB_NAME: "nope"},
    ):
        found = {p["metadata"]["name"] for p in snap.pods_in(NS, query)}
        scanned = {
            p["metadata"]["name"]
            for p in snap.pods_in(NS)
            if all(p["metadata"]["labels"].get(k) == v for k, v in query.items())
        }
        assert found == scanned
    assert {p["metadata"]["name"] for p in snap.pods_in(NS, {labels.JOB: "g1"})} == {
        f"p{i}" for i in range(1, 12, 2)
    }


def test_a_relabelled_or_deleted_pod_leaves_the_index() -> None:
    snap = view(gpu_pod("p", "n1", **{labels.JOB: "old"}))
    snap.apply("MODIFIED", gpu_pod("p", "n1", **{labels.JOB: "new"}))
    assert [p["metadata"]["name"] for p in snap.pods_in(NS, {labels.JOB: "new"})] == ["p"]
    assert list(snap.pods_in(NS, {labels.JOB: "old"})) == []
    snap.apply("DELETED", gpu_pod("p", "n1", **{labels.JOB: "new"}))
    assert list(snap.pods_in(NS, {labels.JOB: "new"})) == []
    assert list(snap.pods_in(NS)) == []


# -- relists ------------------------------------------------------------------------------------


def test_a_relist_that_reapplies_and_drops_objects_leaves_exact_usage() -> None:
    """What WatchCache does on a 410: MODIFIED for every listed item, DELETED (metadata only) for
    what the new list lacks."""
    snap = view(
        NodeBuilder("n1").zone("zone-a").obj(), gpu_pod("a", "n1", 2), gpu_pod("b", "n1", 3)
    )
    snap.apply("MODIFIED", gpu_pod("a", "n1", 2))
    snap.apply("MODIFIED", gpu_pod("c", "n1", 1))
    snap.apply(
        "DELETED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "namespace": NS}}
    )
    n1 = snap.node("n1")
    assert n1 is not None
    assert snap.free_on(n1)[GPU] == 5
    assert {p["metadata"]["name"] for p in snap.pods_in(NS)} == {"a", "c"}


# -- records ------------------------------------------------------------------------------------


def _record(name: str, decided: str) -> dict[str, Any]:
    obj = JobBuilder("v1", "ConfigMap", name, NS).obj()
    obj["metadata"]["labels"] = {labels.MANAGED_BY: labels.MANAGER, labels.COMPONENT: "decision"}
    obj["data"] = {"gang": name, "decidedAt": decided}
    return obj


def _gang_record(gang: str, zone: str, gpus: int, decided: datetime) -> dict[str, Any]:
    obj = _record(f"rec-{gang}", decided.isoformat())
    obj["data"].update(gang=gang, zone=zone, demand=f'{{"{GPU}": {gpus}, "pods": 2}}')
    return obj


#: The states a gang's pod can be in, as ``reserved`` tells them apart.
POD_STATES = ("pending", "bound", "succeeded", "failed-unscheduled")


def _gang_pod(name: str, gang: str, gpus: int, state: str) -> dict[str, Any]:
    pod = PodBuilder(NS, name=name).uid().gpus(gpus).label(labels.JOB, gang)
    if state == "bound":
        pod.bound("n1")
    elif state == "succeeded":
        pod.bound("n1", phase="Succeeded")
    obj = pod.obj()
    if state == "failed-unscheduled":
        obj["status"] = {"phase": "Failed"}
    return obj


def _gone(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}}


def _brute_reserved(
    held: dict[str, tuple[str, int, float]],
    pods: dict[str, tuple[str, int, str]],
    gone: dict[tuple[str, str], int],
    since: float,
    exclude: str,
) -> dict[str, dict[str, int]]:
    """What ``reserved`` must say, from scratch: per zone, for each recent record, its demand that
    no pod seen yet stands for (pods not yet created) plus its pods still pending, never more than
    its demand, per resource. Bound, finished and deleted (``gone``) pods need no room."""
    out: dict[str, dict[str, int]] = {}
    for gang, (zone, gpus, decided) in held.items():
        if decided < since or gang == exclude:
            continue
        demand = {GPU: gpus, "pods": 2}
        seen = {GPU: 0, "pods": 0}
        pending = {GPU: 0, "pods": 0}
        mine = [(g, "gone") for (pod_gang, _), g in gone.items() if pod_gang == gang]
        mine += [(g, state) for pod_gang, g, state in pods.values() if pod_gang == gang]
        for pod_gpus, state in mine:
            seen = {GPU: seen[GPU] + pod_gpus, "pods": seen["pods"] + 1}
            if state == "pending":
                pending = {GPU: pending[GPU] + pod_gpus, "pods": pending["pods"] + 1}
        zone_total = out.setdefault(zone, {})
        for name, amount in demand.items():
            share = min(amount, pending[name] + max(0, amount - seen[name]))
            zone_total[name] = zone_total.get(name, 0) + share
    return _nonzero(out)


def _nonzero(per_zone: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    cleaned = {z: {k: v for k, v in r.items() if v} for z, r in per_zone.items()}
    return {z: r for z, r in cleaned.items() if r}


GANGS = ("g1", "g2")
POD_NAMES = ("p1", "p2", "p3", "p4")
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("record"),
            st.sampled_from(GANGS),
            st.sampled_from(["zone-a", "zone-b"]),
            st.integers(1, 4),
            st.integers(0, 100),
        ),
        st.tuples(st.just("forget"), st.sampled_from(GANGS)),
        st.tuples(
            st.just("pod"),
            st.sampled_from(POD_NAMES),
            st.sampled_from(GANGS),
            st.integers(1, 3),
            st.sampled_from(POD_STATES),
        ),
        st.tuples(st.just("delete"), st.sampled_from(POD_NAMES)),
        st.tuples(st.just("query"), st.integers(-10, 110), st.sampled_from(["", *GANGS])),
    ),
    max_size=40,
)


@hsettings(max_examples=800, deadline=None)
@given(steps)
def test_reserved_is_the_running_sum_a_scan_would_compute(plan: list[tuple[Any, ...]]) -> None:
    epoch = datetime(2030, 1, 1, tzinfo=UTC)
    snap = view(
        NodeBuilder("n1").zone("zone-a").gpus(64).obj(),
        NodeBuilder("n2").zone("zone-b").gpus(64).obj(),
    )
    held: dict[str, tuple[str, int, float]] = {}
    pods: dict[str, tuple[str, int, str]] = {}
    #: Pods deleted while their gang had a record: they need no room, and the view remembers
    #: them (for as long as the gang has a record) so as not to take them for pods to come.
    gone: dict[tuple[str, str], int] = {}
    # End with a query excluding each gang in turn, from the widest window and from the newest.
    last = [("query", offset, gang) for offset in (-10, 60) for gang in ("", *GANGS)]
    for step in [*plan, *last]:
        if step[0] == "record":
            _, gang, zone, gpus, offset = step
            decided = epoch + timedelta(seconds=offset)
            snap.apply("MODIFIED", _gang_record(gang, zone, gpus, decided))
            held[gang] = (zone, gpus, decided.timestamp())
        elif step[0] == "forget" and step[1] in held:
            zone, gpus, decided_ts = held.pop(step[1])
            decided = datetime.fromtimestamp(decided_ts, UTC)
            snap.apply("DELETED", _gang_record(step[1], zone, gpus, decided))
            gone = {k: v for k, v in gone.items() if k[0] != step[1]}
        elif step[0] == "pod":
            _, name, gang, gpus, state = step
            snap.apply("MODIFIED", _gang_pod(name, gang, gpus, state))
            pods[name] = (gang, gpus, state)
            gone.pop((gang, name), None)
        elif step[0] == "delete" and step[1] in pods:
            snap.apply("DELETED", _gone(step[1]))
            gang, gpus, _ = pods.pop(step[1])
            if gang in held:
                gone[(gang, step[1])] = gpus
        elif step[0] == "query":
            _, offset, exclude = step
            since = epoch + timedelta(seconds=offset)
            got = snap.reserved(since=since, exclude=exclude)
            assert _nonzero(got) == _brute_reserved(held, pods, gone, since.timestamp(), exclude)


gang_pods = st.lists(
    st.tuples(st.integers(1, 4), st.sampled_from([*POD_STATES, "gone"])), min_size=0, max_size=6
)


@hsettings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.integers(1, 6), gang_pods)
def test_a_gang_never_reserves_more_than_its_demand_and_nothing_once_its_pods_are_done(
    demand_gpus: int, size: int, members: list[tuple[int, str]]
) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    snap = view(NodeBuilder("n1").zone("zone-a").gpus(64).obj())
    record = _gang_record("g", "zone-a", demand_gpus, now)
    record["data"]["demand"] = f'{{"{GPU}": {demand_gpus}, "pods": {size}}}'
    snap.apply("ADDED", record)
    for i, (gpus, state) in enumerate(members):
        snap.apply("ADDED", _gang_pod(f"p{i}", "g", gpus, "pending"))
        if state == "gone":
            snap.apply("DELETED", _gone(f"p{i}"))
        else:
            snap.apply("MODIFIED", _gang_pod(f"p{i}", "g", gpus, state))
    reserved = snap.reserved(since=now).get("zone-a", {})
    assert reserved.get(GPU, 0) <= demand_gpus and reserved.get("pods", 0) <= size
    # Every pod that exists is bound, finished or gone, and they stand for the whole gang.
    done = all(state != "pending" for _, state in members)
    if done and len(members) >= size and sum(gpus for gpus, _ in members) >= demand_gpus:
        assert _nonzero({"zone-a": reserved}) == {}


#: A gang of two 8-GPU pods (demand 16 GPUs, 2 pods), decided into zone-a: what it reserves
#: there as its pods come, bind, finish and go. ``+name:state`` creates or changes a pod,
#: ``-name`` deletes it, ``-record`` deletes the gang's record (its job was deleted).
RESERVATION_CASES = [
    ("decided, no pod created yet", [], 16),
    ("first pod admitted, the other not created yet", ["+m:pending"], 16),
    ("both created, pending", ["+m:pending", "+w:pending"], 16),
    ("one bound, the other not created yet", ["+m:bound"], 8),
    ("one bound, one pending", ["+m:bound", "+w:pending"], 8),
    ("both bound", ["+m:bound", "+w:bound"], 0),
    ("both finished (the reported case)", ["+m:succeeded", "+w:succeeded"], 0),
    ("one succeeded, one failed before it was scheduled", ["+m:succeeded", "+w:failed"], 0),
    ("one bound, one deleted while pending", ["+m:bound", "+w:pending", "-w"], 0),
    ("both deleted", ["+m:bound", "+w:bound", "-m", "-w"], 0),
    ("one deleted before the other was created", ["+m:pending", "-m"], 8),
    ("a deleted pod re-created under its name", ["+m:bound", "+w:bound", "-w", "+w:pending"], 8),
    ("a failed pod replaced under a new name", ["+m:bound", "+w:failed", "+w2:pending"], 8),
    ("elastic: scaled past its recorded size", ["+m:bound", "+w:bound", "+x:pending"], 8),
    ("its job deleted: the record goes", ["+m:pending", "-record"], 0),
]


@pytest.mark.parametrize(
    ("steps", "gpus"), [pytest.param(s, g, id=i) for i, s, g in RESERVATION_CASES]
)
def test_a_gang_reserves_what_its_pods_not_bound_finished_or_gone_need(
    steps: list[str], gpus: int
) -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    record = _gang_record("g", "zone-a", 16, now)
    snap = view(NodeBuilder("n1").zone("zone-a").gpus(64).obj(), record)
    states = {"failed": "failed-unscheduled"}
    for step in steps:
        if step == "-record":
            snap.apply("DELETED", record)
        elif step.startswith("-"):
            snap.apply("DELETED", _gone(step[1:]))
        else:
            name, state = step[1:].split(":")
            snap.apply("MODIFIED", _gang_pod(name, "g", 8, states.get(state, state)))
    assert snap.reserved(since=now).get("zone-a", {}).get(GPU, 0) == gpus


def test_a_gang_whose_pods_never_come_stops_reserving_after_the_window() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    snap = view(
        NodeBuilder("n1").zone("zone-a").gpus(64).obj(), _gang_record("g", "zone-a", 16, now)
    )
    snap.apply("ADDED", _gang_pod("m", "g", 8, "bound"))
    assert snap.reserved(since=now)["zone-a"][GPU] == 8
    assert _nonzero(snap.reserved(since=now + timedelta(seconds=1))) == {}


def test_an_updated_record_keeps_the_memory_of_deleted_pods() -> None:
    """A record modified (the reconciler marks or unmarks it) is not a new gang: its deleted pods
    stay counted as gone, and its reservation stays at zero."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    record = _gang_record("g", "zone-a", 16, now)
    snap = view(NodeBuilder("n1").zone("zone-a").gpus(64).obj(), record)
    for name in ("m", "w"):
        snap.apply("ADDED", _gang_pod(name, "g", 8, "succeeded"))
        snap.apply("DELETED", _gone(name))
    marked = copy.deepcopy(record)
    marked["metadata"]["annotations"] = {"podium.dev/orphan-since": now.isoformat()}
    snap.apply("MODIFIED", marked)
    assert _nonzero(snap.reserved(since=now)) == {}


def test_an_excluded_gang_whose_pods_are_all_bound_in_an_otherwise_empty_zone() -> None:
    """Regression: the excluded gang's share was empty and its zone's sum gone with the other
    gang's record, and subtracting it raised KeyError (the admission failed open)."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    snap = view(NodeBuilder("n1").zone("zone-a").gpus(64).obj())
    snap.apply("ADDED", _gang_record("g1", "zone-a", 1, now))
    snap.apply("ADDED", _gang_record("g2", "zone-a", 1, now))
    snap.apply("ADDED", gpu_pod("p1", "n1", 1, **{labels.JOB: "g2"}))
    snap.apply("DELETED", _gang_record("g1", "zone-a", 1, now))
    assert _nonzero(snap.reserved(since=now - timedelta(seconds=10), exclude="g2")) == {}


def test_reserved_skips_records_without_a_zone_or_a_readable_time() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    no_zone = _gang_record("g1", "", 4, now)
    bad_time = _gang_record("g2", "zone-a", 4, now)
    bad_time["data"]["decidedAt"] = "yesterday"
    snap = view(no_zone, bad_time, _gang_record("g3", "zone-b", 2, now))
    assert snap.reserved(since=now - timedelta(minutes=1)) == {"zone-b": {GPU: 2, "pods": 2}}


# -- the candidate-zone cache, against a scan ---------------------------------------------------


def _brute_zones(
    snap: ClusterView, spec: dict[str, Any]
) -> dict[str, tuple[list[str], dict[str, int]]]:
    """What candidate_zones must say, computed from scratch from nodes and free_on."""
    out: dict[str, tuple[list[str], dict[str, int]]] = {}
    for n in snap.nodes():
        admitted = selectors.admits_labels(spec, n.name, n.labels)
        if n.usable and n.zone and admitted and selectors.tolerates_all(spec, n.taints):
            names, free = out.setdefault(n.zone, ([], {}))
            names.append(n.name)
            free.update(resources.add(free, snap.free_on(n)))
    return out


SPECS = [
    {},
    {"nodeSelector": {"pool": "gpu"}},
    {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
]
NODE_NAMES = [f"n{i}" for i in range(6)]
EVENTS = st.lists(
    st.one_of(
        st.tuples(
            st.just("node"),
            st.sampled_from(NODE_NAMES),
            st.sampled_from(["zone-a", "zone-b", None]),
            st.booleans(),  # ready
            st.booleans(),  # gpu pool label
            st.booleans(),  # tainted
            st.sampled_from([4, 8]),
        ),
        st.tuples(st.just("del-node"), st.sampled_from(NODE_NAMES)),
        st.tuples(
            st.just("pod"),
            st.sampled_from(["p0", "p1", "p2", "p3"]),
            st.sampled_from([*NODE_NAMES, None]),
            st.integers(0, 3),
            st.sampled_from(["Running", "Succeeded"]),
        ),
        st.tuples(st.just("del-pod"), st.sampled_from(["p0", "p1", "p2", "p3"])),
        st.tuples(st.just("read"), st.integers(0, len(SPECS) - 1)),
    ),
    max_size=30,
)


@hsettings(max_examples=150, deadline=None)
@given(EVENTS)
def test_cached_candidate_zones_always_match_a_scan(events: list[tuple[Any, ...]]) -> None:
    snap = view()
    for event in events:
        match event:
            case ("node", name, zone, ready, pool, tainted, gpus):
                built = NodeBuilder(name).zone(zone).gpus(gpus)
                if not ready:
                    built.not_ready()
                if pool:
                    built.label("pool", "gpu")
                if tainted:
                    built.taint("gpu")
                snap.apply("MODIFIED", built.obj())
            case ("del-node", name):
                snap.apply(
                    "DELETED", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
                )
            case ("pod", name, node_name, gpus, phase):
                pod = PodBuilder(NS, name=name).gpus(gpus)
                obj = (pod.bound(node_name, phase) if node_name else pod).obj()
                snap.apply("MODIFIED", obj)
            case ("del-pod", name):
                snap.apply("DELETED", gpu_pod(name, None))
            case ("read", i):
                snap.candidate_zones(SPECS[i])
        for spec in SPECS:
            cached = snap.candidate_zones(spec)
            expected = _brute_zones(snap, spec)
            assert {z: list(c.nodes) for z, c in cached.items()} == {
                z: names for z, (names, _) in expected.items()
            }
            for zone, (_, free) in expected.items():
                assert {k: v for k, v in cached[zone].free().items() if v} == {
                    k: v for k, v in free.items() if v
                }
                assert list(cached[zone].frees()) == [
                    snap.free_on(n) for n in cached[zone].nodes.values()
                ]


def test_the_candidate_cache_is_bounded() -> None:
    snap = view(NodeBuilder("n1").zone("zone-a").obj())
    for i in range(40):
        snap.candidate_zones({"nodeSelector": {"k": str(i)}})
    assert len(snap._candidates) <= 16


# -- memory ---------------------------------------------------------------------------------------


def test_a_training_pod_costs_well_under_two_kib_to_hold() -> None:
    """A 3 KB pod kept as a dict costs ~20 KiB; at Kubernetes' limit of 150,000 pods
    (kubernetes/website ``content/en/docs/setup/best-practices/cluster-large.md``) the view
    must hold them in 200 MiB."""
    pj = pytorchjob()
    nodes = [NodeBuilder(f"n{i}").zone("zone-a").obj() for i in range(50)]
    pods = []
    for i in range(2000):
        pod = pytorch_pod(pj, "worker", i).uid().bound(f"n{i % 50}").obj()
        pod["metadata"]["labels"][labels.JOB] = pj["metadata"]["uid"]
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
            "x" * 2000
        )
        pods.append(pod)
    snap = view(namespace(NS), *nodes)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for pod in pods:
            snap.apply("ADDED", pod)
        del pods
        gc.collect()
        per_pod = (tracemalloc.get_traced_memory()[0] - before) / 2000
    finally:
        tracemalloc.stop()
    assert per_pod < 2048, per_pod


# -- what is derived from a job is kept per version of it ----------------------------------------


def test_derived_values_live_as_long_as_the_object_the_view_holds() -> None:
    pj = pytorchjob(workers=3)
    snap = view(pj)
    calls: list[int] = []

    def count_workers(obj: Any) -> int:
        calls.append(1)
        return int(obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])

    held = snap.get("kubeflow.org/v1", "PyTorchJob", NS, "llama")
    assert held is not None
    assert [snap.derived(held, count_workers) for _ in range(3)] == [3, 3, 3]
    assert len(calls) == 1
    # A copy the view does not hold is computed every time and never kept.
    assert snap.derived(copy.deepcopy(pj), count_workers) == 3 and len(calls) == 2
    # A watch event replaces the job: the new version is derived afresh, the old one forgotten.
    scaled = copy.deepcopy(pj)
    scaled["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 7
    snap.apply("MODIFIED", scaled)
    newer = snap.get("kubeflow.org/v1", "PyTorchJob", NS, "llama")
    assert newer is not None and snap.derived(newer, count_workers) == 7
    assert id(held) not in snap._derived
    snap.apply("DELETED", scaled)
    assert snap._derived == {}


def test_a_scaled_job_changes_the_demand_of_its_next_pod() -> None:
    pj = pytorchjob(workers=3, gpus=8)
    snap = view(pj)
    pod = pytorch_pod(pj).obj()
    first = adapters.recognise(pod, NS, snap)
    assert first is not None and first.total[GPU] == 32
    scaled = copy.deepcopy(pj)
    scaled["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 7
    snap.apply("MODIFIED", scaled)
    again = adapters.recognise(pod, NS, snap)
    assert again is not None and again.total[GPU] == 64


def test_held_gangs_follow_their_gated_pods_through_every_event() -> None:
    """The releaser's work list: a gang is held while one of its pods waits behind podium's
    gate and has not finished; released, finished or deleted pods take it off at once."""

    def pod(name: str, gang: str, *, gated: bool = True, phase: str = "Pending") -> dict[str, Any]:
        built = PodBuilder(NS, name=name).uid(f"uid-{name}").label(labels.JOB, gang).gpus(1)
        if gated:
            built = built.gate()
        obj = built.obj()
        obj["status"] = {"phase": phase}
        return obj

    snapshot = view(pod("a-0", "a"), pod("a-1", "a"), pod("b-0", "b"), pod("c-0", "c", gated=False))
    assert snapshot.held_gangs() == [(NS, "a"), (NS, "b")]
    snapshot.apply("MODIFIED", pod("a-0", "a", gated=False))  # released
    assert snapshot.held_gangs() == [(NS, "a"), (NS, "b")]
    snapshot.apply("DELETED", pod("a-1", "a"))
    assert snapshot.held_gangs() == [(NS, "b")]
    snapshot.apply("MODIFIED", pod("b-0", "b", phase="Failed"))  # finished while held
    assert snapshot.held_gangs() == []
    snapshot.apply("ADDED", pod("d-0", "d"))
    snapshot.apply("ADDED", PodBuilder(NS, name="plain").gate().obj())  # no gang: not podium's
    assert snapshot.held_gangs() == [(NS, "d")]


POD_EVENTS = st.lists(
    st.one_of(
        st.tuples(
            st.just("pod"),
            st.sampled_from(["p0", "p1", "p2"]),
            st.sampled_from(["a", "b", None]),  # podium's job label, or none
            st.booleans(),  # gated
            st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
        ),
        st.tuples(st.just("del-pod"), st.sampled_from(["p0", "p1", "p2"])),
    ),
    max_size=25,
)


@hsettings(max_examples=150, deadline=None)
@given(POD_EVENTS)
def test_released_counts_always_match_a_scan(events: list[tuple[Any, ...]]) -> None:
    """``released`` (asked at every admission in hold mode) is kept by the pod events: it always
    says what a scan of the gang's pods would."""
    snap = view()
    for event in events:
        match event:
            case ("pod", name, gang, gated, phase):
                built = PodBuilder(NS, name=name).uid(f"uid-{name}").gpus(1)
                if gang:
                    built = built.label(labels.JOB, gang)
                if gated:
                    built = built.gate()
                obj = built.obj()
                obj["status"] = {"phase": phase}
                snap.apply("MODIFIED", obj)
            case ("del-pod", name):
                snap.apply("DELETED", gpu_pod(name, None))
        for gang in ("a", "b"):
            scanned = [
                p
                for p in snap.pod_summaries(NS, {labels.JOB: gang})
                if not p.gated and p.phase not in TERMINAL_PHASES
            ]
            assert snap.released(NS, gang) == len(scanned)
