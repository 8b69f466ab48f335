"""The reconciler's plan (webhook/core/reconcile.py), pure, as table tests: what a gang needs
created, repaired, marked, unmarked, deleted, labelled or unlabelled. Carried out against the
in-memory API twin: tests/serve/test_reconciler.py."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import PodBuilder
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, engine, labels, mergepatch, policies, reconcile, records, updates
from webhook.core.adapters.base import Gang
from webhook.core.reconcile import ORPHAN_SINCE, Action, Owned, Tuning
from webhook.core.release import TOO_BIG_SPREAD
from webhook.core.settings import PolicyMode, PolicyScope, Settings
from webhook.core.view import ClusterView

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
TUNING = Tuning(grace_seconds=120)
OLD = (NOW - timedelta(minutes=10)).isoformat()
YOUNG = (NOW - timedelta(seconds=5)).isoformat()


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat(timespec="seconds")


@dataclasses.dataclass
class World:
    """A PyTorchJob with two admitted pods, and the record and policy podium made for it."""

    job: dict[str, Any]
    pods: list[dict[str, Any]]
    gang: Gang
    record: dict[str, Any]
    policy: dict[str, Any]
    settings: Settings = dataclasses.field(default_factory=Settings)

    def view(self, *, job: bool = True, pods: bool = True) -> ClusterView:
        objects = base_cluster(*([self.job] if job else []), *(self.pods if pods else []))
        return ClusterView.from_objects(
            objects, zone_label=self.settings.zone_label, kept=adapters.KEPT
        )

    def plan(
        self,
        *,
        job: bool = True,
        pods: bool = True,
        records: list[dict[str, Any]] | None = None,
        policies_: list[dict[str, Any]] | None = None,
    ) -> list[Action]:
        owned = Owned(
            decisions=[self.record] if records is None else records,
            policies=[self.policy] if policies_ is None else policies_,
        )
        return reconcile.plan(
            self.view(job=job, pods=pods), self.settings, owned=owned, now=NOW, tuning=TUNING
        )


def stamp(obj: dict[str, Any], created: str, rv: str) -> dict[str, Any]:
    obj["metadata"].update(creationTimestamp=created, resourceVersion=rv, uid=f"uid-{rv}")
    return obj


def zone_policy(gang: Gang, mode: PolicyMode = PolicyMode.CILIUM, zone: str = "zone-c") -> Any:
    """The policy admission writes for a gang pinned to ``zone`` (the record's)."""
    return policies.build_policy(
        gang=gang, namespace=NS, mode=mode, scope=PolicyScope.ZONE, zone=zone, record_zone=zone
    )


def make_world(mode: PolicyMode = PolicyMode.CILIUM, created: str = OLD) -> World:
    pj = pytorchjob(workers=1)
    uid = pj["metadata"]["uid"]
    pods = [
        pytorch_pod(pj, rtype, 0)
        .uid()
        .label(labels.JOB, uid)
        .label(labels.ZONE, "zone-c")
        .annotate(labels.ZONE, "zone-c")
        .annotate(labels.REASON, "best-fit")
        .obj()
        for rtype in ("master", "worker")
    ]
    settings = Settings(policy_mode=mode)
    view = ClusterView.from_objects(
        base_cluster(pj, *pods), zone_label=settings.zone_label, kept=adapters.KEPT
    )
    gang = adapters.recognise(pods[0], NS, view)
    assert gang is not None
    record = policies.build_record(
        gang=gang, namespace=NS, zone="zone-c", reason="best-fit", detail="", decided_at=created
    )
    policy = zone_policy(gang)
    assert policy is not None
    return World(
        pj, pods, gang, stamp(record, created, "11"), stamp(policy, created, "12"), settings
    )


@pytest.fixture
def world() -> World:
    return make_world()


def marked(obj: dict[str, Any], since: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("annotations", {})[ORPHAN_SINCE] = since
    return obj


def summary(actions: list[Action]) -> list[tuple[str, str, str]]:
    return [(a.verb, a.reason, a.target[0]) for a in actions]


# --- plan: healthy, missing, drifted --------------------------------------------------------


def test_a_healthy_job_needs_nothing(world: World) -> None:
    assert world.plan() == []


def test_a_deleted_policy_is_recreated_exactly_as_admission_builds_it(world: World) -> None:
    actions = world.plan(policies_=[])
    assert summary(actions) == [("create", "missing-policy", "CiliumNetworkPolicy")]
    expected = zone_policy(world.gang)
    assert actions[0].manifest == expected


def test_a_deleted_record_is_recreated_with_the_zone_the_pods_were_pinned_to(
    world: World,
) -> None:
    (action,) = world.plan(records=[])
    assert (action.verb, action.reason) == ("create", "missing-record")
    meta = action.manifest["metadata"]
    assert meta == {k: v for k, v in world.record["metadata"].items() if k in meta}
    assert set(meta) == {"name", "namespace", "labels", "ownerReferences"}
    data = action.manifest["data"]
    assert (data["zone"], data["reason"], data["gang"]) == ("zone-c", "best-fit", world.gang.key)
    assert data["decidedAt"] == NOW.isoformat(timespec="seconds")


def test_a_recreated_record_keeps_the_domain_its_pods_were_released_into(world: World) -> None:
    """With ``topology-levels``, released pods carry the domain below the zone; the record built
    again from them names it, so pods released later still follow it (docs/topology.md)."""
    domain = "topology.k8s.aws/network-node-layer-3=nn-b3"
    for pod in world.pods:
        pod["metadata"]["annotations"][labels.TOPOLOGY] = domain
    (action,) = world.plan(records=[])
    assert action.manifest["data"]["topology"] == domain
    assert records.parse_record(action.manifest).domain == domain


def test_with_both_gone_the_pods_name_the_gang_and_both_are_rebuilt(world: World) -> None:
    """Record and policy deleted while the job runs: podium's label on the pods names the gang,
    their adapter names the job, and both objects come back as admission built them."""
    actions = world.plan(records=[], policies_=[])
    assert summary(actions) == [
        ("create", "missing-record", "ConfigMap"),
        ("create", "missing-policy", "CiliumNetworkPolicy"),
    ]
    record, policy = (a.manifest for a in actions)
    assert (record["data"]["zone"], record["data"]["gang"]) == ("zone-c", world.gang.key)
    assert record["metadata"]["ownerReferences"] == world.record["metadata"]["ownerReferences"]
    assert policy == zone_policy(world.gang)
    assert {(a.owner["kind"], a.owner["uid"]) for a in actions} == {
        ("PyTorchJob", world.job["metadata"]["uid"])
    }


def scheduler_world() -> World:
    """The same job admitted for kube-scheduler to place (engine._group): no zone, a job-wide
    policy, and a record that says ``zoneChooser: scheduler``."""
    world = make_world()
    for pod in world.pods:
        pod["metadata"]["annotations"].update({labels.ZONE: "", labels.REASON: "scheduler-chooses"})
        del pod["metadata"]["labels"][labels.ZONE]
    record = policies.build_record(
        gang=world.gang,
        namespace=NS,
        zone=None,
        reason="scheduler-chooses",
        detail="",
        decided_at=OLD,
        chooser="scheduler",
    )
    policy = policies.build_policy(
        gang=world.gang, namespace=NS, mode=PolicyMode.CILIUM, scope=PolicyScope.JOB, zone=None
    )
    assert policy is not None
    world.record, world.policy = stamp(record, OLD, "11"), stamp(policy, OLD, "12")
    return world


def test_a_scheduler_gangs_record_and_policy_come_back_as_the_schedulers() -> None:
    """Record and policy of a gang whose zone kube-scheduler chooses, both deleted: the record
    comes back with ``zoneChooser: scheduler`` and no zone, the policy job-wide, exactly as
    admission built them (not as a podium pin to no zone)."""
    sched = scheduler_world()
    assert sched.plan() == []
    actions = sched.plan(records=[], policies_=[])
    assert summary(actions) == [
        ("create", "missing-record", "ConfigMap"),
        ("create", "missing-policy", "CiliumNetworkPolicy"),
    ]
    record, policy = (a.manifest for a in actions)
    assert record["data"]["zoneChooser"] == "scheduler"
    assert record["data"]["zone"] == ""
    assert record["data"]["reason"] == "scheduler-chooses"
    assert policy["metadata"]["name"] == sched.policy["metadata"]["name"]
    assert policy["spec"] == sched.policy["spec"]


def spread_world() -> World:
    """The job released across zones by ``too-big: spread`` (release.TOO_BIG_SPREAD): no zone,
    one job-wide policy, its pods bound in zone-a and zone-b without a zone label yet."""
    world = make_world()
    for pod, node in zip(world.pods, ("a-1", "b-1"), strict=True):
        pod["metadata"]["annotations"].update({labels.ZONE: "", labels.REASON: TOO_BIG_SPREAD})
        del pod["metadata"]["labels"][labels.ZONE]
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running"}
    record = policies.build_record(
        gang=world.gang, namespace=NS, zone=None, reason=TOO_BIG_SPREAD, detail="", decided_at=OLD
    )
    policy = policies.build_policy(
        gang=world.gang, namespace=NS, mode=PolicyMode.CILIUM, scope=PolicyScope.JOB, zone=None
    )
    assert policy is not None
    world.record, world.policy = stamp(record, OLD, "11"), stamp(policy, OLD, "12")
    return world


@pytest.mark.parametrize("with_record", [True, False], ids=["record", "record-gone"])
def test_a_spread_gang_keeps_its_job_wide_policy_and_its_pods_get_their_zone(
    with_record: bool,
) -> None:
    """``too-big: spread``: narrowing the gang's policy to zones would take back the cross-zone
    allow the admin opted into (tests/cilium/test_spread.py); its bound pods still get their
    node's zone label, so that an admin's zone isolation covers them."""
    spread = spread_world()
    actions = spread.plan(records=None if with_record else [])
    labelled = {a.target[2]: a.patch for a in actions if a.verb == "label"}
    assert summary(actions) == [
        *([] if with_record else [("create", "missing-record", "ConfigMap")]),
        ("label", "zone-known", "Pod"),
        ("label", "zone-known", "Pod"),
    ]
    assert sorted(p["metadata"]["labels"][labels.ZONE] for p in labelled.values()) == [  # type: ignore[index]
        "zone-a",
        "zone-b",
    ]


def test_with_both_gone_and_the_job_gone_nothing_is_rebuilt(world: World) -> None:
    assert world.plan(job=False, records=[], policies_=[]) == []


def test_labelled_pods_no_adapter_recognises_rebuild_nothing(world: World) -> None:
    """A pod with the gang's label but no controller: nothing is rebuilt from it, and the label,
    which no controller chain backs, is removed."""
    lone = PodBuilder(NS, name="lone").uid().label(labels.JOB, world.gang.key).obj()
    actions = dataclasses.replace(world, pods=[lone]).plan(records=[], policies_=[])
    assert summary(actions) == [("unlabel", "label-disowned", "Pod")]


EDITS: list[tuple[str, Callable[[dict[str, Any]], None], dict[str, Any]]] = [
    (
        "selector widened",
        lambda s: s.update(endpointSelector={"matchLabels": {}}),
        {"endpointSelector": {"matchLabels": {labels.JOB: "KEY", labels.ZONE: "zone-c"}}},
    ),
    (
        "ingress opened to the world",
        lambda s: s["ingress"].append({"fromEntities": ["world"]}),
        {
            "ingress": [
                {"fromEndpoints": [{"matchLabels": {labels.JOB: "KEY", labels.ZONE: "zone-c"}}]}
            ]
        },
    ),
    (
        "deny rule added",
        lambda s: s.update(egressDeny=[{"toEntities": ["all"]}]),
        {"egressDeny": None},
    ),
    (
        "default deny switched on",
        lambda s: s["enableDefaultDeny"].update(ingress=True),
        {"enableDefaultDeny": {"ingress": False}},
    ),
]


@pytest.mark.parametrize(("what", "edit", "patch"), EDITS, ids=[e[0] for e in EDITS])
def test_an_edited_policy_is_patched_back(
    world: World,
    what: str,
    edit: Callable[[dict[str, Any]], None],
    patch: dict[str, Any],
) -> None:
    edited = copy.deepcopy(world.policy)
    edit(edited["spec"])
    (action,) = world.plan(policies_=[edited])
    assert (action.verb, action.reason) == ("repair", "policy-drifted")
    key = world.gang.key
    expected = {k: _fill(v, key) for k, v in patch.items()}
    assert action.patch == {"metadata": {"resourceVersion": "12"}, "spec": expected}
    assert mergepatch.apply(edited, action.patch)["spec"] == world.policy["spec"]


def _fill(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, key) for v in value]
    return key if value == "KEY" else value


def test_policy_mode_none_creates_no_policy() -> None:
    w = make_world(PolicyMode.NONE)
    assert w.plan(policies_=[]) == []


def test_kubernetes_mode_recreates_a_network_policy() -> None:
    w = make_world(PolicyMode.KUBERNETES)
    actions = w.plan(policies_=[])
    assert summary(actions) == [("create", "missing-policy", "NetworkPolicy")]


# --- plan: orphans in two passes ------------------------------------------------------------

ORPHANS = [
    # (case, job exists, pods exist, created, mark on both objects, expected verb)
    ("job gone, old objects: marked", False, True, OLD, None, ("mark", "job-gone")),
    ("job gone, objects seconds old: in flight, left", False, False, YOUNG, None, None),
    ("no pod ever persisted, old: marked", True, False, OLD, None, ("mark", "no-pods")),
    ("no pod yet, record seconds old: left", True, False, YOUNG, None, None),
    ("marked 60 s ago: waits out the grace", False, False, OLD, ago(60), None),
    (
        "marked 120 s ago, still orphaned: deleted",
        False,
        False,
        OLD,
        ago(120),
        ("delete", "job-gone"),
    ),
    ("marked, pods still missing: deleted", True, False, OLD, ago(600), ("delete", "no-pods")),
    ("marked, but the pods came: unmarked", True, True, OLD, ago(600), ("unmark", "adopted")),
]


@pytest.mark.parametrize(
    ("case", "job", "pods", "created", "mark", "expected"), ORPHANS, ids=[o[0] for o in ORPHANS]
)
def test_orphans(
    case: str,
    job: bool,
    pods: bool,
    created: str,
    mark: str | None,
    expected: tuple[str, str] | None,
) -> None:
    w = make_world(created=created)
    record, policy = w.record, w.policy
    if mark:
        record, policy = marked(record, mark), marked(policy, mark)
    actions = w.plan(job=job, pods=pods, records=[record], policies_=[policy])
    want = (
        [] if expected is None else [(*expected, k) for k in ("ConfigMap", "CiliumNetworkPolicy")]
    )
    assert summary(actions) == want


def test_a_mark_is_a_guarded_annotation(world: World) -> None:
    actions = world.plan(job=False)
    assert [a.patch for a in actions] == [
        {"metadata": {"resourceVersion": rv, "annotations": {ORPHAN_SINCE: NOW.isoformat()}}}
        for rv in ("11", "12")
    ]


def test_a_job_of_the_same_uid_in_another_namespace_does_not_keep_objects_alive(
    world: World,
) -> None:
    moved = copy.deepcopy(world.job)
    moved["metadata"]["namespace"] = "elsewhere"
    w = dataclasses.replace(world, job=moved)
    assert {a.reason for a in w.plan()} == {"job-gone"}


def test_objects_without_a_gang_label_are_not_judged(world: World) -> None:
    stray = copy.deepcopy(world.policy)
    del stray["metadata"]["labels"][labels.JOB]
    assert world.plan(job=False, records=[], policies_=[stray]) == []


def test_pods_no_adapter_recognises_are_not_rebuilt_from(world: World) -> None:
    """Pods with the label but no controller owner: alive, but nothing to build a policy from."""
    lone = PodBuilder(NS, name="lone").uid().label(labels.JOB, world.gang.key).obj()
    w = dataclasses.replace(world, pods=[lone])
    assert [a.verb for a in w.plan(policies_=[])] == ["unlabel"]


# --- plan: pods created with a copied label while podium was down ---------------------------


def spoof(world: World, name: str = "spy", **build: Any) -> dict[str, Any]:
    """A pod carrying the world's gang label, owned as ``build`` says (nothing by default)."""
    pod = PodBuilder(NS, name=name).uid().label(labels.JOB, world.gang.key)
    if "owner" in build:
        pod.owner(*build["owner"])
    if "phase" in build:
        pod.bound("a-1", phase=build["phase"])
    return pod.obj()


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("own pod", None),
        ("bare pod", "no job in its controller chain (no controller)"),
        ("deployment's pod", "no job in its controller chain (ReplicaSet/web-7d9)"),
        ("another job's pod", "its controller chain leads to PyTorchJob/other"),
        ("finished bare pod", None),
        ("own pod, job being deleted", None),
    ],
)
def test_disowned_label(world: World, case: str, why: str | None) -> None:
    other = pytorchjob("other", workers=0)
    pod = {
        "own pod": world.pods[0],
        "own pod, job being deleted": world.pods[0],
        "bare pod": spoof(world),
        "finished bare pod": spoof(world, phase="Succeeded"),
        "deployment's pod": spoof(world, owner=("apps/v1", "ReplicaSet", "web-7d9", "rs-1")),
        "another job's pod": copy.deepcopy(pytorch_pod(other, "master").uid().obj()),
    }[case]
    if case == "another job's pod":
        pod["metadata"]["labels"][labels.JOB] = world.gang.key
    objects = [world.job, other] if case != "own pod, job being deleted" else [other]
    view = ClusterView.from_objects(base_cluster(*objects, pod), zone_label="x", kept=adapters.KEPT)
    found = updates.disowned_label(pod, NS, view)
    assert (found is None) if why is None else (found is not None and found.startswith(why))


def test_copied_labels_are_removed_only_in_opted_in_namespaces(world: World) -> None:
    elsewhere = spoof(world, "spy-2")
    elsewhere["metadata"]["namespace"] = "sandbox"  # not opted in: podium's policies never
    w = dataclasses.replace(world, pods=[*world.pods, spoof(world), elsewhere])
    (action,) = [a for a in w.plan() if a.verb == "unlabel"]
    assert action.target == ("Pod", NS, "spy")
    assert action.patch == {
        "metadata": {"uid": action.manifest["metadata"]["uid"], "labels": {labels.JOB: None}}
    }
    assert action.owner["uid"] == world.job["metadata"]["uid"]  # the job whose label it copied
    assert "spy" in action.detail and world.gang.key in action.detail


def test_only_podium_itself_may_remove_the_label(world: World) -> None:
    """The UPDATE guard refuses every change of the label, except the removal of a disowned one
    by podium's own user (the reconciler's patch above)."""
    from webhook.core import reviews  # noqa: PLC0415

    before = spoof(world)
    after = copy.deepcopy(before)
    del after["metadata"]["labels"][labels.JOB]
    podium = "system:serviceaccount:podium-system:podium"

    def decide(user: str, old: dict[str, Any], new: dict[str, Any], own_user: str = podium) -> str:
        review = reviews.review_for_pod(new)
        review["request"].update(operation="UPDATE", oldObject=old, userInfo={"username": user})
        request = reviews.from_document(review)
        settings = Settings(own_user=own_user)
        return engine.decide(request, world.view(), settings, now=NOW).outcome

    assert decide(podium, before, after) == "skipped"
    assert decide("alice", before, after) == "denied"
    assert decide(podium, after, before) == "denied"  # adding it: nobody
    assert decide("", before, after, own_user="") == "denied"  # own user unknown: nobody
    own = world.pods[0]  # a label that is the pod's own: not even podium may take it away
    stripped = copy.deepcopy(own)
    del stripped["metadata"]["labels"][labels.JOB]
    assert decide(podium, own, stripped) == "denied"


def test_tuning_from_the_settings() -> None:
    assert Tuning.from_settings(Settings()) == Tuning(grace_seconds=120, interval_seconds=30)
    tuned = Settings.from_mapping({"orphan-grace-seconds": 3, "reconcile-interval-seconds": 0.5})
    assert Tuning.from_settings(tuned) == Tuning(grace_seconds=3, interval_seconds=0.5)


# --- zone-scoped policies: labels from the node's zone, migration of job-wide policies -------


def job_wide(world: World) -> dict[str, Any]:
    """The policy podium wrote before it scoped policies to zones (and under policy-scope: job),
    as listed (resourceVersion 12)."""
    policy = policies.build_policy(
        gang=world.gang, namespace=NS, mode=PolicyMode.CILIUM, scope=PolicyScope.JOB, zone=None
    )
    assert policy is not None
    return stamp(policy, OLD, "12")


def before_zone_labels(world: World, *nodes: str | None) -> World:
    """The world's pods as podium admitted them before it wrote the zone label (annotation only),
    bound to ``nodes`` (None: not bound yet)."""
    pods = []
    for admitted, node in zip(world.pods, nodes, strict=True):
        pod = copy.deepcopy(admitted)
        del pod["metadata"]["labels"][labels.ZONE]
        if node is not None:
            pod["spec"]["nodeName"] = node
            pod["status"] = {"phase": "Running"}
        pods.append(pod)
    return dataclasses.replace(world, pods=pods)


def label_pods(world: World, actions: list[Action]) -> World:
    """The world after the reconciler's ``label`` actions were carried out."""
    patches = {a.target[2]: a.patch for a in actions if a.verb == "label"}
    pods = [
        mergepatch.apply(p, patches[p["metadata"]["name"]])
        if p["metadata"]["name"] in patches
        else p
        for p in world.pods
    ]
    return dataclasses.replace(world, pods=pods)


def test_a_job_wide_policy_is_narrowed_once_every_running_pod_carries_its_zone(
    world: World,
) -> None:
    """Migration: first the running pods get their node's zone (the old policy still covers
    them, whatever identity Cilium gives them meanwhile); the next pass narrows the policy."""
    old = before_zone_labels(world, "c-1", "c-2")
    first = old.plan(policies_=[job_wide(world)])
    assert summary(first) == [("label", "zone-known", "Pod")] * 2
    assert {a.patch["metadata"]["labels"][labels.ZONE] for a in first if a.patch} == {"zone-c"}
    assert all(a.patch and a.patch["metadata"]["uid"] for a in first)  # guarded by the pod's uid
    labelled = label_pods(old, first)
    (repair,) = labelled.plan(policies_=[job_wide(world)])
    assert (repair.verb, repair.reason) == ("repair", "policy-scope")
    assert repair.patch is not None
    after = mergepatch.apply(job_wide(world), repair.patch)
    assert after["spec"] == world.policy["spec"]
    assert after["metadata"]["labels"] == world.policy["metadata"]["labels"]
    assert repair.patch["metadata"]["resourceVersion"] == "12"
    assert labelled.plan(policies_=[stamp(after, OLD, "13")]) == []  # converged


def test_a_pending_pod_pinned_before_zone_labels_holds_the_narrowing_back(world: World) -> None:
    """A pod podium pinned before it wrote zone labels, not bound yet: the job-wide policy stays
    until it is bound and labelled, so it does not start outside its job's policy."""
    old = before_zone_labels(world, "c-1", None)
    first = old.plan(policies_=[job_wide(world)])
    assert summary(first) == [("label", "zone-known", "Pod")]  # only the bound one
    assert label_pods(old, first).plan(policies_=[job_wide(world)]) == []


def unpinned_world(world: World, *nodes: str | None) -> World:
    """The gang decided ``no-fit-unpinned`` (its record has no zone), its pods bound to
    ``nodes`` without a zone label (podium did not know their zone at admission)."""
    record = copy.deepcopy(world.record)
    record["data"]["zone"] = ""
    moved = before_zone_labels(world, *nodes)
    for pod in moved.pods:
        pod["metadata"]["annotations"][labels.ZONE] = ""
    return dataclasses.replace(moved, record=record)


def test_an_unpinned_gang_gets_one_policy_per_zone_its_pods_run_in(world: World) -> None:
    w = unpinned_world(world, "a-1", "b-1")
    first = w.plan(policies_=[])
    assert summary(first) == [
        ("label", "zone-known", "Pod"),
        ("label", "zone-known", "Pod"),
        ("create", "missing-policy", "CiliumNetworkPolicy"),
        ("create", "missing-policy", "CiliumNetworkPolicy"),
    ]
    created = [a.manifest for a in first if a.verb == "create"]
    assert [policies.policy_zone(p) for p in created] == ["zone-a", "zone-b"]
    assert created == policies.build_policies(
        gang=world.gang,
        namespace=NS,
        mode=PolicyMode.CILIUM,
        scope=PolicyScope.ZONE,
        zones=["zone-a", "zone-b"],
    )
    # No name is the record's: neither zone is the gang's recorded zone.
    assert world.record["metadata"]["name"] not in {p["metadata"]["name"] for p in created}
    owned = [stamp(copy.deepcopy(p), OLD, str(20 + i)) for i, p in enumerate(created)]
    assert label_pods(w, first).plan(policies_=owned) == []


def test_an_unpinned_gangs_job_wide_policy_goes_once_its_pods_carry_their_zones(
    world: World,
) -> None:
    w = label_pods(unpinned_world(world, "a-1", "b-1"), unpinned_world(world, "a-1", "b-1").plan())
    actions = w.plan(policies_=[job_wide(world)])
    assert summary(actions) == [
        ("create", "missing-policy", "CiliumNetworkPolicy"),
        ("create", "missing-policy", "CiliumNetworkPolicy"),
        ("delete", "policy-not-needed", "CiliumNetworkPolicy"),
    ]
    assert actions[-1].manifest["metadata"]["name"] == world.record["metadata"]["name"]
    # While a bound pod still waits for its label, the job-wide policy stays.
    waiting = unpinned_world(world, "a-1", "b-1")
    assert "delete" not in {a.verb for a in waiting.plan(policies_=[job_wide(world)])}


def test_a_wrong_zone_label_is_corrected_to_the_nodes(world: World) -> None:
    pods = copy.deepcopy(world.pods)
    pods[0]["spec"]["nodeName"] = "c-1"
    pods[1]["spec"]["nodeName"] = "b-1"  # labelled zone-c, runs in zone-b (not podium's doing)
    actions = dataclasses.replace(world, pods=pods).plan()
    assert [(a.verb, a.target[2]) for a in actions][:1] == [("label", pods[1]["metadata"]["name"])]
    assert actions[0].patch == {
        "metadata": {"uid": pods[1]["metadata"]["uid"], "labels": {labels.ZONE: "zone-b"}}
    }
    assert "(was zone-c)" in actions[0].detail


def test_policy_scope_job_keeps_one_job_wide_policy(world: World) -> None:
    w = dataclasses.replace(world, settings=Settings(policy_scope=PolicyScope.JOB))
    (repair,) = w.plan()
    assert (repair.verb, repair.reason, repair.detail) == ("repair", "policy-scope", "job-wide")
    assert repair.patch is not None
    assert mergepatch.apply(world.policy, repair.patch)["spec"] == job_wide(world)["spec"]
    # ... and labels nobody: relabelling a running pod changes its Cilium identity for nothing.
    assert before_zone_labels(w, "c-1", "c-2").plan(policies_=[job_wide(world)]) == []


def test_on_an_old_cilium_the_reconciler_writes_no_policy(world: World) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": policies.CILIUM_CRD},
        "spec": {"versions": [{"name": "v2", "schema": {"openAPIV3Schema": {}}}]},
    }
    old = before_zone_labels(world, "c-1", "c-2")
    view = ClusterView.from_objects(
        base_cluster(world.job, *old.pods, crd),
        zone_label=world.settings.zone_label,
        kept=adapters.KEPT,
    )
    owned = Owned(decisions=[world.record], policies=[])
    plan = reconcile.plan(view, world.settings, owned=owned, now=NOW, tuning=TUNING)
    assert plan == []
