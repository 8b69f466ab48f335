"""The audit entries of every source, byte for byte: an admission, a release, a wait, a
reconciler action and the Cilium guard, each as ``webhook.serve.audit.dumps`` writes it.

The expected lines (``tests/audit_entries.golden``) were written by the code before each source got
its own entry builder (``webhook.core.audit``); the lines are a wire format (``podium audit``,
log pipelines), so they stay as they were: the keys, their order and their values. Only
``latencyMs`` is set to a fixed number, since it is measured. Changed on purpose since (issue
29): the ``detail`` of a gang no zone could ever hold (``held-huge``: the numbers and the ways
out), and ``held-partial``, such a gang said at once before its last pod exists (reason
``too-big``); ``held-coming`` keeps a gang waiting for its pods.
"""

from __future__ import annotations

import copy
import pathlib
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
import yaml

from tests.builders import PIN
from tests.core.test_release import cluster, hogs
from tests.scenarios import NS, audit_entry_for, base_cluster, pytorch_pod, pytorchjob
from tests.serve.test_guard import crd
from tests.serve.test_reconciler import NOW as RECONCILE_NOW
from tests.serve.test_reconciler import make_world
from webhook.core import adapters, audit, labels, mutation, policies, reconcile, reviews
from webhook.core.objects import ObjectKey
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import errors, twins
from webhook.serve import admission, guard, reconciler
from webhook.serve.audit import MemorySink, dumps

from .test_releaser import World, fail_on_patch

GOLDEN = pathlib.Path(__file__).parent.parent / "audit_entries.golden"


def golden() -> dict[str, bytes]:
    """``case<TAB>line`` per line."""
    out: dict[str, bytes] = {}
    for line in GOLDEN.read_bytes().splitlines():
        case, _, entry = line.partition(b"\t")
        out[case.decode()] = entry
    return out


def wire(entry: audit.AuditEntry) -> bytes:
    entry = copy.deepcopy(entry)
    entry["latencyMs"] = 1.5
    return dumps(entry)


def held(name: str, pods: int, at: datetime, *, present: int | None = None) -> list[Any]:
    """``tests.core.test_release.held_job`` with fixed UIDs, so that the lines are too."""
    pj = pytorchjob(name, workers=pods - 1, uid=f"uid-{name}")
    out: list[Any] = [pj]
    for i in range(pods if present is None else present):
        rtype, index = ("master", 0) if i == 0 else ("worker", i - 1)
        pod = pytorch_pod(pj, rtype, index).uid(f"uid-{name}-{i}").obj()
        hold = mutation.hold(pod, gang_key=pj["metadata"]["uid"]).pod
        hold["metadata"]["creationTimestamp"] = at.isoformat().replace("+00:00", "Z")
        out.append(hold)
    return out


# -- the cases: each yields (case, entry) ------------------------------------------------------


def admission_entries(now: datetime) -> list[tuple[str, audit.AuditEntry]]:
    pj = pytorchjob(uid="uid-llama")
    pod = pytorch_pod(pj, "master").uid("uid-llama-0").obj()
    return [("admission", audit_entry_for(pod, base_cluster(pj), now))]


async def admitted_entries(now: datetime) -> list[tuple[str, audit.AuditEntry]]:
    """Admissions through the whole ``Admitter``: what the writer did lands in ``effects``."""
    out: list[tuple[str, audit.AuditEntry]] = []
    pj = pytorchjob(uid="uid-llama")
    pods = [pytorch_pod(pj, "worker", i).uid(f"uid-llama-{i}").obj() for i in range(3)]

    def admitter(api: Any, settings: Settings = PIN) -> tuple[admission.Admitter, MemorySink]:
        view = ClusterView.from_objects(
            base_cluster(pj), zone_label=settings.zone_label, kept=adapters.KEPT
        )
        sink = MemorySink()
        admit = admission.Admitter(
            view=lambda: view, api=api, settings=settings, sink=sink, clock=lambda: now
        )
        return admit, sink

    def review(pod: dict[str, Any], *, dry_run: bool = False) -> bytes:
        return orjson.dumps(reviews.review_for_pod(pod, uid="u-1", dry_run=dry_run))

    api = twins.InMemoryApi()
    admit, sink = admitter(api)
    await admit.admit(review(pods[0]))
    await admit.admit(review(pods[1]))
    out += [("admitted-first", sink.entries[0]), ("admitted-second", sink.entries[1])]
    # Another replica recorded the gang into zone-b first: followed.
    (record,) = [o for (_, k, _, _), o in api.objects.items() if k == "ConfigMap"]
    other = twins.InMemoryApi()
    await other.create({**record, "data": {**record["data"], "zone": "zone-b"}})
    admit, sink = admitter(other)
    await admit.admit(review(pods[2]))
    out.append(("admitted-followed", sink.entries[0]))
    admit, sink = admitter(twins.InMemoryApi(missing_kinds={"CiliumNetworkPolicy"}))
    await admit.admit(review(pods[0]))
    out.append(("admitted-crd-missing", sink.entries[0]))
    admit, sink = admitter(twins.InMemoryApi())
    await admit.admit(review(pods[0], dry_run=True))
    out.append(("admitted-dry-run", sink.entries[0]))
    return out


async def release_entries(now: datetime) -> list[tuple[str, audit.AuditEntry]]:
    out: list[tuple[str, audit.AuditEntry]] = []
    world = World([*cluster(), *held("llama", 2, now)], now)
    (entry,) = await world.pass_()
    out.append(("released", entry))

    world = World([*cluster(), *held("llama", 3, now)], now)
    world.api.fail = fail_on_patch(2)
    (entry,) = await world.pass_()
    out.append(("released-stopped", entry))

    world = World([*cluster(), *held("llama", 2, now)], now)
    world.api.fail = lambda op, key: (
        errors.ApiError("down") if op == "get" and key[1] == "Pod" else None
    )
    await world.pass_()
    for hog in hogs("b", range(2)):
        world.api.put(hog)
    world.api.fail = twins.no_fault
    (entry,) = await world.pass_()
    out.append(("released-replaced", entry))

    objects = [*cluster(), *hogs("c", range(5)), *held("admin", 4, now)]
    objects[len(objects) - 5]["metadata"]["annotations"] = {
        labels.RELEASE: "zone",
        labels.RELEASED_BY: "alice",
    }
    (entry,) = await World(objects, now).pass_()
    out.append(("released-by-admin", entry))

    world = World(
        [
            *cluster(c=0),
            *held("older", 2, now),
            *held("newer", 2, now + timedelta(1)),
            *held("partial", 3, now, present=2),
            *held("huge", 12, now),
            # 2 of 2 × 8 GPUs: it fits zone-b once whole; "partial" (3 × 8) never fits (issue 29)
            *held("coming", 2, now, present=1),
        ],
        now + timedelta(days=2),
    )
    for entry in await world.pass_():
        out.append((f"{entry['outcome']}-{entry['job']['name']}", entry))
    return out


async def reconcile_entries() -> list[tuple[str, audit.AuditEntry]]:
    out: list[tuple[str, audit.AuditEntry]] = []

    def live(api: twins.InMemoryObjects, settings: Settings, objects: list[Any]) -> Any:
        def view() -> ClusterView:
            return ClusterView.from_objects(
                objects, zone_label=settings.zone_label, kept=adapters.KEPT
            )

        return reconciler.Reconciler(
            view=view,
            ready=lambda: True,
            api=api,
            settings=settings,
            sink=MemorySink(),
            clock=lambda: RECONCILE_NOW,
        )

    world = make_world()
    fixed(world)
    objects = base_cluster(world.job, *world.pods)

    api = twins.InMemoryObjects()
    api.put(world.record)
    (entry,) = await live(api, world.settings, objects).run_once()
    out.append(("reconcile-created", entry))

    api = twins.InMemoryObjects(missing_kinds=frozenset({"CiliumNetworkPolicy"}))
    api.put(world.record)
    (entry,) = await live(api, world.settings, objects).run_once()
    out.append(("reconcile-resource-missing", entry))

    api = twins.InMemoryObjects()
    api.put(world.record)
    api.fail = lambda op, _k: (
        errors.ApiError("403: forbidden", status=403) if op == "create" else None
    )
    (entry,) = await live(api, world.settings, objects).run_once()
    out.append(("reconcile-failed", entry))

    api = twins.InMemoryObjects()
    api.put(world.record)
    api.put(world.policy)
    edited = copy.deepcopy(world.policy)
    edited["spec"]["ingress"] = []

    def conflict(op: str, key: ObjectKey) -> errors.ApiError | None:
        return errors.Conflict("the object has been modified") if op == "patch" else None

    api.fail = conflict
    keeper = live(api, world.settings, objects)
    owned = reconcile.Owned(decisions=[world.record], policies=[edited])
    (action,) = reconcile.plan(
        keeper.view(), world.settings, owned=owned, now=RECONCILE_NOW, tuning=keeper.tuning
    )
    out.append(("reconcile-conflict", await keeper.execute(action, now=RECONCILE_NOW)))

    # A pod that carries a job label its controller chain does not lead to: unlabelled.
    stray = (
        pytorch_pod(pytorchjob("other", uid="uid-other"), "master")
        .uid("uid-stray")
        .label(labels.JOB, world.gang.key)
        .obj()
    )
    api = twins.InMemoryObjects()
    for obj in (world.record, world.policy, stray):
        api.put(obj)
    keeper = live(api, world.settings, [*objects, stray])
    for entry in await keeper.run_once():
        out.append((f"reconcile-{entry['action']}", entry))

    api = twins.InMemoryObjects()
    for obj in (world.record, world.policy):
        api.put(obj)
    for entry in await live(api, world.settings, base_cluster(*world.pods)).run_once():
        out.append((f"reconcile-{entry['action']}-{entry['effects'][0]['kind']}", entry))

    out.extend(await delete_entries(world, live))

    api = twins.InMemoryObjects()
    api.put(world.record)
    api.put(edited)
    (entry,) = await live(api, world.settings, objects).run_once()
    out.append(("reconcile-repair", entry))
    return out


async def delete_entries(world: Any, live: Any) -> list[tuple[str, audit.AuditEntry]]:
    """Marked long ago, the job gone from the view: deleted, kept (the apiserver still has the
    job), or gone already."""
    out: list[tuple[str, audit.AuditEntry]] = []
    since = (RECONCILE_NOW - timedelta(hours=1)).isoformat(timespec="seconds")
    for case, job in (("deleted", False), ("kept", True), ("gone", False)):
        record = copy.deepcopy(world.record)
        record["metadata"]["annotations"] = {reconcile.ORPHAN_SINCE: since}
        api = twins.InMemoryObjects()
        if case != "gone":
            api.put(record)
            key = ("", "ConfigMap", NS, record["metadata"]["name"])
            record["metadata"]["resourceVersion"] = api.objects[key]["metadata"]["resourceVersion"]
        if job:
            api.put(world.job)
        keeper = live(api, world.settings, base_cluster(*world.pods))
        owned = reconcile.Owned(decisions=[record], policies=[])
        (action,) = reconcile.plan(
            keeper.view(), world.settings, owned=owned, now=RECONCILE_NOW, tuning=keeper.tuning
        )
        out.append((f"reconcile-delete-{case}", await keeper.execute(action, now=RECONCILE_NOW)))
    return out


def fixed(world: Any) -> None:
    """``make_world`` with fixed UIDs for its job and pods."""
    old = world.job["metadata"]["uid"]
    world.job["metadata"]["uid"] = "uid-llama"
    for i, pod in enumerate(world.pods):
        pod["metadata"]["uid"] = f"uid-llama-{i}"
        pod["metadata"]["ownerReferences"][0]["uid"] = "uid-llama"
        pod["metadata"]["labels"][labels.JOB] = "uid-llama"
    view = ClusterView.from_objects(
        base_cluster(world.job, *world.pods),
        zone_label=world.settings.zone_label,
        kept=adapters.KEPT,
    )
    gang = adapters.recognise(world.pods[0], NS, view)
    assert gang is not None and old != gang.key
    world.gang = gang
    record = policies.build_record(
        gang=gang,
        namespace=NS,
        zone="zone-c",
        reason="best-fit",
        detail="",
        decided_at=world.record["metadata"]["creationTimestamp"],
    )
    record["metadata"].update(
        creationTimestamp=world.record["metadata"]["creationTimestamp"],
        resourceVersion="11",
        uid="uid-11",
    )
    world.record = record
    policy = policies.build_policy(
        gang=gang,
        namespace=NS,
        mode=world.settings.policy_mode,
        scope=world.settings.policy_scope,
        zone="zone-c",
        record_zone="zone-c",
    )
    assert policy is not None
    policy["metadata"].update(
        creationTimestamp=world.record["metadata"]["creationTimestamp"],
        resourceVersion="12",
        uid="uid-12",
    )
    world.policy = policy


def guard_entries() -> list[tuple[str, audit.AuditEntry]]:
    out: list[tuple[str, audit.AuditEntry]] = []
    view = ClusterView(zone_label="z", kept=adapters.KEPT)
    keeper = guard.CiliumGuard(
        view=lambda: view,
        ready=lambda: True,
        settings=Settings(),
        sink=MemorySink(),
        clock=lambda: RECONCILE_NOW,
    )
    for case, obj in (("old", crd(default_deny=False)), ("additive", crd(default_deny=True))):
        view.apply("MODIFIED", obj)
        entry = keeper.check()
        assert entry is not None
        out.append((f"guard-{case}", entry))
    view.apply("DELETED", crd(default_deny=True))
    entry = keeper.check()
    assert entry is not None
    out.append(("guard-absent", entry))
    return out


async def all_entries(now: datetime) -> list[tuple[str, audit.AuditEntry]]:
    return [
        *admission_entries(now),
        *(await admitted_entries(now)),
        *(await release_entries(now)),
        *(await reconcile_entries()),
        *guard_entries(),
    ]


async def test_every_source_writes_the_lines_it_always_wrote(now: datetime) -> None:
    entries = await all_entries(now)
    expected = golden()
    assert [case for case, _ in entries] == list(expected)
    for case, entry in entries:
        assert wire(entry) == expected[case], case
        # Plain JSON types only: entries are written as YAML too (podium review -o yaml).
        assert yaml.safe_load(yaml.safe_dump(entry)) == orjson.loads(dumps(entry)), case


@pytest.mark.parametrize("case", ["released-stopped", "reconcile-failed"])
async def test_a_failure_says_its_error_twice(now: datetime, case: str) -> None:
    """``result`` is ``failed: <error>`` and ``error`` the error itself."""
    (entry,) = [e for c, e in await all_entries(now) if c == case]
    assert entry["result"] == f"failed: {entry['error']}"
