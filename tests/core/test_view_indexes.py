"""Each index of the cluster view (webhook/core/view/) against a brute-force scan of the objects
the events left alive, after random sequences of ADDED/MODIFIED/DELETED pods, nodes, namespaces,
jobs and decision records. The reservations and the candidate-zone cache have their own scans in
test_view.py (``test_reserved_is_the_running_sum_a_scan_would_compute``,
``test_cached_candidate_zones_always_match_a_scan``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.builders import ZONE, NodeBuilder, PodBuilder
from webhook.core import adapters, labels, resources
from webhook.core.objects import Obj, ObjectKey, key_of, parse_time
from webhook.core.view import TERMINAL_PHASES, ClusterView, has_gate

NAMESPACES = ("ns-a", "ns-b")
GANGS = ("a", "b")
MEMBER = "training.kubeflow.org/job-name"  # an indexed label (an adapter's member label)
MEMBERS = ("x", "y")
NODES = ("n0", "n1", "n2")
TIMES = ("2030-01-01T00:00:00Z", "2030-01-01T00:00:05Z", "2030-01-01T00:00:10Z", "soon")

EVENTS = st.lists(
    st.one_of(
        st.tuples(
            st.just("pod"),
            st.sampled_from(NAMESPACES),
            st.sampled_from(["p0", "p1", "p2"]),
            st.integers(0, 1),  # generation: a pod deleted and created again has a new UID
            st.sampled_from([*GANGS, None]),
            st.sampled_from([*MEMBERS, None]),
            st.booleans(),  # behind podium's gate
            st.sampled_from([*NODES, "gone-node", None]),
            st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
            st.integers(0, 2),  # GPUs
        ),
        st.tuples(
            st.just("node"),
            st.sampled_from(NODES),
            st.integers(0, 1),
            st.sampled_from(["zone-a", "zone-b", None]),
            st.booleans(),  # ready
            st.sampled_from([4, 8]),
        ),
        st.tuples(
            st.just("object"),
            st.sampled_from(["Namespace", "PyTorchJob", "record", "ConfigMap"]),
            st.sampled_from(NAMESPACES),
            st.sampled_from(["o0", "o1"]),
            st.integers(0, 1),
            st.sampled_from(TIMES),
        ),
        st.tuples(st.just("delete"), st.integers(0, 40)),
    ),
    max_size=30,
)


def _pod(
    ns: str,
    name: str,
    gen: int,
    gang: str | None,
    member: str | None,
    gated: bool,
    node: str | None,
    phase: str,
    gpus: int,
) -> Obj:
    pod = PodBuilder(ns, name=name).uid(f"pod-{ns}-{name}-{gen}").gpus(gpus)
    if gang:
        pod.label(labels.JOB, gang)
    if member:
        pod.label(MEMBER, member)
    if gated:
        pod.gate()
    if node:
        pod.bound(node, phase)
    obj = pod.obj()
    obj["status"] = {"phase": phase}
    return obj


def _node(name: str, gen: int, zone: str | None, ready: bool, gpus: int) -> Obj:
    node = NodeBuilder(name).zone(zone).gpus(gpus)
    if not ready:
        node.not_ready()
    obj = node.obj()
    obj["metadata"]["uid"] = f"node-{name}-{gen}"
    return obj


def _object(kind: str, ns: str, name: str, gen: int, decided: str) -> Obj:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"{kind}-{ns}-{name}-{gen}"}
    if kind == "Namespace":
        meta = {"name": ns, "uid": f"ns-{ns}-{gen}"}
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
    if kind == "PyTorchJob":
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta}
    if kind == "record":
        meta["labels"] = {labels.MANAGED_BY: labels.MANAGER, labels.COMPONENT: "decision"}
    data = {"gang": name, "zone": "zone-a", "decidedAt": decided, "demand": '{"pods": 2}'}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _run(
    events: list[tuple[Any, ...]],
    check: Callable[[ClusterView, dict[ObjectKey, Obj]], None],
    ask: Sequence[Obj] = (),
) -> None:
    """Apply ``events`` to an empty view (that was first asked for the candidate zones of each
    spec in ``ask``), keeping ``live`` (by key, in the order each object last changed) beside it;
    ``check`` the view against ``live`` after every event."""
    snap = ClusterView(zone_label=ZONE, kept=adapters.KEPT)
    for spec in ask:
        snap.candidate_zones(spec)
    live: dict[ObjectKey, Obj] = {}
    for event in events:
        match event:
            case ("pod", *fields):
                obj = _pod(*fields)
            case ("node", *fields):
                obj = _node(*fields)
            case ("object", *fields):
                obj = _object(*fields)
            case ("delete", at):
                if not live:
                    continue
                key = list(live)[at % len(live)]
                snap.apply("DELETED", live.pop(key))
                check(snap, live)
                continue
        key = key_of(obj)
        live.pop(key, None)
        live[key] = obj
        snap.apply("MODIFIED", obj)
        check(snap, live)


def _pods(live: dict[ObjectKey, Obj]) -> list[Obj]:
    return [o for k, o in live.items() if k[:2] == ("", "Pod")]


def _labels(obj: Obj) -> dict[str, str]:
    return dict(obj["metadata"].get("labels") or {})


def _done(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def _bound(pod: Obj) -> bool:
    return bool(pod["spec"].get("nodeName")) and not _done(pod)


def _nonzero(amounts: resources.Resources) -> resources.Resources:
    return {k: v for k, v in amounts.items() if v}


# -- owners: who carries a UID ------------------------------------------------------------------

UIDS = {
    *(f"pod-{ns}-p{i}-{g}" for ns in NAMESPACES for i in range(3) for g in (0, 1)),
    *(f"node-{n}-{g}" for n in NODES for g in (0, 1)),
    *(f"ns-{ns}-{g}" for ns in NAMESPACES for g in (0, 1)),
    *(
        f"{k}-{ns}-o{i}-{g}"
        for k in ("PyTorchJob", "record", "ConfigMap")
        for ns in NAMESPACES
        for i in range(2)
        for g in (0, 1)
    ),
}


@hsettings(max_examples=200, deadline=None)
@given(EVENTS)
def test_by_uid_finds_each_live_object_by_its_uid_and_nothing_else(
    events: list[tuple[Any, ...]],
) -> None:
    def check(snap: ClusterView, live: dict[ObjectKey, Obj]) -> None:
        by_uid = {o["metadata"]["uid"]: (k, o) for k, o in live.items()}
        for uid in UIDS:
            found = snap.by_uid(uid)
            if uid not in by_uid:
                assert found is None, uid
                continue
            (group, kind, ns, name), obj = by_uid[uid]
            if (group, kind) == ("", "Pod"):
                pod = snap.pod(ns, name)
                assert pod is not None and found == pod.as_object()
            elif (group, kind) == ("", "Node"):
                node = snap.node(name)
                assert node is not None and found == node.as_object()
            else:
                assert found is obj

    _run(events, check)


# -- the label index: a label's pods ------------------------------------------------------------


@hsettings(max_examples=200, deadline=None)
@given(EVENTS)
def test_the_label_index_lists_a_labels_pods_in_the_order_they_last_changed(
    events: list[tuple[Any, ...]],
) -> None:
    def check(snap: ClusterView, live: dict[ObjectKey, Obj]) -> None:
        pods = _pods(live)
        for ns in NAMESPACES:
            mine = [p for p in pods if p["metadata"]["namespace"] == ns]
            wanted: list[dict[str, str]] = [
                *({labels.JOB: g} for g in GANGS),
                *({MEMBER: m} for m in MEMBERS),
                *({labels.JOB: g, MEMBER: m} for g in GANGS for m in MEMBERS),
            ]
            for want in wanted:
                expected = [
                    p["metadata"]["name"]
                    for p in mine
                    if all(_labels(p).get(k) == v for k, v in want.items())
                ]
                assert [p.name for p in snap.pod_summaries(ns, want)] == expected, want
            assert [p.name for p in snap.pod_summaries(ns)] == [p["metadata"]["name"] for p in mine]
        gangs = list(snap.gangs())
        assert len(gangs) == len(set(gangs))
        assert set(gangs) == {
            (p["metadata"]["namespace"], _labels(p)[labels.JOB])
            for p in pods
            if labels.JOB in _labels(p)
        }

    _run(events, check)


# -- the bound-pod label index: a label's pods that run ------------------------------------------


@hsettings(max_examples=200, deadline=None)
@given(EVENTS)
def test_the_bound_pod_index_lists_a_labels_bound_unfinished_pods_as_a_scan_does(
    events: list[tuple[Any, ...]],
) -> None:
    def check(snap: ClusterView, live: dict[ObjectKey, Obj]) -> None:
        pods = _pods(live)
        for ns in NAMESPACES:
            mine = [p for p in pods if p["metadata"]["namespace"] == ns and _bound(p)]
            wanted: list[dict[str, str]] = [
                *({labels.JOB: g} for g in GANGS),
                *({MEMBER: m} for m in MEMBERS),
                *({labels.JOB: g, MEMBER: m} for g in GANGS for m in MEMBERS),
            ]
            for want in wanted:
                expected = sorted(
                    p["metadata"]["name"]
                    for p in mine
                    if all(_labels(p).get(k) == v for k, v in want.items())
                )
                found = [p.name for p in snap.bound_pods(ns, want)]
                assert sorted(found) == expected and len(found) == len(set(found)), want
                assert all(p.bound for p in snap.bound_pods(ns, want))
            # No indexed label among those asked: nothing (the index answers only what it holds).
            assert list(snap.bound_pods(ns, {"unindexed": "x"})) == []

    _run(events, check)


# -- gang counts: held and released pods -----------------------------------------------------------


@hsettings(max_examples=200, deadline=None)
@given(EVENTS)
def test_gang_counts_say_how_many_unfinished_pods_are_held_and_how_many_released(
    events: list[tuple[Any, ...]],
) -> None:
    def check(snap: ClusterView, live: dict[ObjectKey, Obj]) -> None:
        members = [
            (p["metadata"]["namespace"], _labels(p)[labels.JOB], has_gate(p["spec"]))
            for p in _pods(live)
            if labels.JOB in _labels(p) and not _done(p)
        ]
        held = sorted({(ns, gang) for ns, gang, gated in members if gated})
        assert snap.held_gangs() == held
        assert snap.holds_any() == bool(held)
        for ns in NAMESPACES:
            for gang in GANGS:
                released = [m for m in members if m == (ns, gang, False)]
                assert snap.released(ns, gang) == len(released)

    _run(events, check)


# -- gang usage: what a gang's bound pods request ------------------------------------------------


@hsettings(max_examples=200, deadline=None)
@given(EVENTS)
def test_gang_usage_is_what_the_gangs_bound_running_pods_request(
    events: list[tuple[Any, ...]],
) -> None:
    def check(snap: ClusterView, live: dict[ObjectKey, Obj]) -> None:
        for gang in GANGS:
            used: resources.Resources = {}
            for pod in _pods(live):
                if _labels(pod).get(labels.JOB) == gang and _bound(pod):
                    used = resources.add(used, resources.pod_requests(pod["spec"]))
            assert _nonzero(snap.gang_usage(gang)) == _nonzero(used)

    _run(events, check)


# -- capacity: room per node and per candidate zone -----------------------------------------------

SPECS: list[dict[str, Any]] = [{}, {"nodeSelector": {ZONE: "zone-b"}}]


@hsettings(max_examples=200, deadline=None)
@given(EVENTS, st.booleans())
@example(  # a running pod moved to another node with the same requests
    [
        ("node", "n0", 0, "zone-a", True, 8),
        ("node", "n1", 0, "zone-a", True, 8),
        ("pod", "ns-a", "p0", 0, "a", None, False, "n0", "Running", 1),
        ("pod", "ns-a", "p0", 0, "a", None, False, "n1", "Running", 1),
    ],
    True,
)
def test_capacity_is_allocatable_less_what_bound_pods_use_per_node_and_per_zone(
    events: list[tuple[Any, ...]], asked_first: bool
) -> None:
    def check(snap: ClusterView, live: dict[ObjectKey, Obj]) -> None:
        free: dict[str, resources.Resources] = {}
        zones: dict[str, set[str]] = {}
        for key, obj in live.items():
            if key[:2] != ("", "Node"):
                continue
            name = key[3]
            free[name] = resources.parse_resource_list(obj["status"].get("allocatable"))
            ready = obj["status"]["conditions"][0]["status"] == "True"
            zone = _labels(obj).get(ZONE)
            if ready and zone:
                zones.setdefault(zone, set()).add(name)
        for pod in _pods(live):
            node = pod["spec"].get("nodeName")
            if node in free and _bound(pod):
                free[node] = resources.add(free[node], resources.pod_requests(pod["spec"]), -1)
        for name, expected in free.items():
            node_info = snap.node(name)
            assert node_info is not None
            assert _nonzero(snap.free_on(node_info)) == _nonzero(expected)
        for spec in SPECS:
            wanted = {z: n for z, n in zones.items() if spec == {} or z == "zone-b"}
            cached = snap.candidate_zones(spec)
            assert {z: set(c.nodes) for z, c in cached.items()} == wanted
            for zone_nodes in cached.values():
                total: resources.Resources = {}
                for name in zone_nodes.nodes:
                    total = resources.add(total, free[name])
                assert _nonzero(zone_nodes.free()) == _nonzero(total)

    # A cache built before the events must follow them as one built after does.
    _run(events, check, ask=SPECS if asked_first else ())


# -- derived values: kept while the store holds the object ---------------------------------------

CALLS: list[int] = []


def _derive(obj: Obj) -> str:
    CALLS.append(id(obj))
    return str(obj["metadata"].get("uid"))


@hsettings(max_examples=200, deadline=None)
@given(EVENTS)
def test_derived_values_are_kept_for_the_objects_the_store_holds_and_only_those(
    events: list[tuple[Any, ...]],
) -> None:
    def check(snap: ClusterView, live: dict[ObjectKey, Obj]) -> None:
        held = {id(o): o for k, o in live.items() if k[:2] not in {("", "Pod"), ("", "Node")}}
        for obj_id, (obj, _) in snap._derived.items():
            assert held.get(obj_id) is obj
        for obj in held.values():
            CALLS.clear()
            assert snap.derived(obj, _derive) == str(obj["metadata"]["uid"])
            assert snap.derived(obj, _derive) == str(obj["metadata"]["uid"])
            assert len(CALLS) <= 1
        copy = dict(next(iter(held.values()), {"metadata": {}}))
        CALLS.clear()
        snap.derived(copy, _derive)
        snap.derived(copy, _derive)
        assert len(CALLS) == 2  # an object the view does not hold is derived every time

    _run(events, check)


# -- decision records, in the order decided -------------------------------------------------------


@hsettings(max_examples=200, deadline=None)
@given(EVENTS)
def test_records_are_podiums_decided_configmaps_in_the_order_decided(
    events: list[tuple[Any, ...]],
) -> None:
    def check(snap: ClusterView, live: dict[ObjectKey, Obj]) -> None:
        expected = []
        for key, obj in live.items():
            is_record = _labels(obj).get(labels.COMPONENT) == "decision"
            decided = parse_time((obj.get("data") or {}).get("decidedAt"))
            if key[:2] == ("", "ConfigMap") and is_record and decided is not None:
                expected.append((decided.timestamp(), key))
        assert snap._records.order == sorted(expected)

    _run(events, check)
