"""Read-through of a pod's owners the watch has not delivered yet (``serve/owners.py``)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import PIN, JobBuilder, PodBuilder, pinning
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, reviews
from webhook.core.objects import Obj, group_of
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import errors, twins
from webhook.kube.cache import WatchCache
from webhook.serve import admission, audit, owners


def body_for(pod: dict[str, Any]) -> bytes:
    return orjson.dumps(reviews.review_for_pod(pod, uid="u-1"))


def setup(
    in_view: list[dict[str, Any]],
    in_api: list[dict[str, Any]],
    now: datetime,
    *,
    api: twins.InMemoryApi | None = None,
    settings: Settings | None = None,
) -> tuple[admission.Admitter, audit.MemorySink, ClusterView, twins.InMemoryApi]:
    """An admitter whose view holds ``in_view`` while the apiserver also has ``in_api``."""
    settings = settings or PIN
    view = ClusterView.from_objects(in_view, zone_label=settings.zone_label, kept=adapters.KEPT)
    api = api or twins.InMemoryApi()
    for obj in [*in_view, *in_api]:
        api.put(obj)
    cache = WatchCache(view, twins.InMemoryLister())
    sink = audit.MemorySink()
    admitter = admission.Admitter(
        view=lambda: view,
        api=api,
        settings=settings,
        sink=sink,
        clock=lambda: now,
        read_owners=owners.OwnerReader(cache, api),
    )
    return admitter, sink, view, api


def gets(api: twins.InMemoryApi) -> list[tuple[str, str]]:
    return [(kind, name) for op, kind, name in api.calls if op == "get"]


def held(view: ClusterView, obj: dict[str, Any]) -> Obj | None:
    meta = obj["metadata"]
    return view.get(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


async def test_a_job_the_watch_has_not_delivered_is_read_and_sizes_the_gang(
    now: datetime,
) -> None:
    pj = pytorchjob(workers=3)
    admitter, sink, view, api = setup(base_cluster(), [pj], now)
    await admitter.admit(body_for(pytorch_pod(pj, "master").obj()))
    (record,) = sink.entries
    assert gets(api) == [("PyTorchJob", "llama")]
    assert record["read"] == ["PyTorchJob/llama"]
    assert record["job"] is not None
    assert record["job"]["demandSource"] == "job"
    assert record["job"]["demand"]["nvidia.com/gpu"] == 32
    assert held(view, pj) is not None


async def test_without_the_read_the_same_pod_gets_a_guessed_size(now: datetime) -> None:
    """The case the read-through exists for: the decision on the bare view guesses."""
    pj = pytorchjob(workers=3)
    admitter, sink, _, _ = setup(base_cluster(), [pj], now)
    admitter.read_owners = None
    await admitter.admit(body_for(pytorch_pod(pj, "master").obj()))
    (record,) = sink.entries
    assert "read" not in record
    assert record["job"] is not None and record["job"]["demandSource"] != "job"


async def test_an_owner_the_view_holds_costs_no_request(now: datetime) -> None:
    pj = pytorchjob()
    admitter, sink, _, api = setup(base_cluster(pj), [], now)
    await admitter.admit(body_for(pytorch_pod(pj).obj()))
    assert gets(api) == []
    assert "read" not in sink.entries[0]


async def test_the_chain_is_read_up_to_the_job(now: datetime) -> None:
    """pod → batch Job → JobSet, neither delivered yet: both read, in that order."""
    js = JobBuilder("jobset.x-k8s.io/v1alpha2", "JobSet", "train", NS).obj()
    batch = JobBuilder("batch/v1", "Job", "train-node-0", NS).owned_by(js).obj()
    pod = (
        PodBuilder(NS, generate_name="train-node-0-0-")
        .owner("batch/v1", "Job", "train-node-0", batch["metadata"]["uid"])
        .obj()
    )
    admitter, sink, view, api = setup(base_cluster(), [js, batch], now)
    await admitter.admit(body_for(pod))
    assert gets(api) == [("Job", "train-node-0"), ("JobSet", "train")]
    assert sink.entries[0]["read"] == ["Job/train-node-0", "JobSet/train"]
    assert held(view, batch) is not None and held(view, js) is not None


async def test_a_job_re_created_under_the_name_is_not_taken_for_the_pods_owner(
    now: datetime,
) -> None:
    old = pytorchjob()
    new = pytorchjob(uid="another-uid")
    admitter, sink, view, api = setup(base_cluster(), [new], now)
    await admitter.admit(body_for(pytorch_pod(old).obj()))
    assert gets(api) == [("PyTorchJob", "llama")]
    assert "read" not in sink.entries[0]
    assert held(view, new) is None


async def test_an_older_job_of_the_same_name_in_the_view_is_replaced(now: datetime) -> None:
    """The job was deleted and submitted again; the watch still holds the old one."""
    old = pytorchjob()
    new = pytorchjob(uid="new-uid")
    admitter, sink, view, _ = setup(base_cluster(old), [], now)
    admitter.api = api = twins.InMemoryApi()
    assert isinstance(admitter.read_owners, owners.OwnerReader)
    admitter.read_owners.api = api
    api.put(new)
    await admitter.admit(body_for(pytorch_pod(new).obj()))
    assert sink.entries[0]["read"] == ["PyTorchJob/llama"]
    job = held(view, new)
    assert job is not None and job["metadata"]["uid"] == "new-uid"


async def test_a_gone_owner_or_a_kind_podium_does_not_read_costs_at_most_one_request(
    now: datetime,
) -> None:
    pj = pytorchjob()
    admitter, sink, _, api = setup(base_cluster(), [], now)
    await admitter.admit(body_for(pytorch_pod(pj).obj()))
    replica_set_pod = PodBuilder(NS, name="web-1").owner("apps/v1", "ReplicaSet", "web", "u").obj()
    await admitter.admit(body_for(replica_set_pod))
    assert gets(api) == [("PyTorchJob", "llama")]
    assert all("read" not in r for r in sink.entries)


async def test_an_api_error_leaves_the_decision_to_the_view(now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    api.fail = lambda op, key: errors.ApiError("etcd is sad", status=500) if op == "get" else None
    admitter, sink, _, _ = setup(base_cluster(), [pj], now, api=api)
    answer = await admitter.admit(body_for(pytorch_pod(pj).obj()))
    (record,) = sink.entries
    assert answer.body["response"]["allowed"] is True
    assert record["outcome"] == "pinned" and "read" not in record


class SlowGets(twins.InMemoryApi):
    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj:
        self.calls.append(("get", kind, name))
        await asyncio.sleep(30)
        return self.store.get((group_of(api_version), kind, namespace, name))


async def test_a_slow_apiserver_costs_a_quarter_of_the_budget_not_the_admission(
    now: datetime,
) -> None:
    pj = pytorchjob()
    settings = pinning(time_budget_seconds=0.4)
    admitter, sink, _, _ = setup(base_cluster(), [pj], now, api=SlowGets(), settings=settings)
    answer = await asyncio.wait_for(admitter.admit(body_for(pytorch_pod(pj).obj())), timeout=5)
    (record,) = sink.entries
    assert answer.body["response"]["allowed"] is True
    assert record["outcome"] == "pinned" and "read" not in record


async def test_only_pod_creations_read(now: datetime) -> None:
    pj = pytorchjob()
    admitter, _, _, api = setup(base_cluster(), [pj], now)
    pod = pytorch_pod(pj).obj()
    review = reviews.review_for_pod(pod, uid="u-2")
    review["request"]["operation"] = "UPDATE"
    review["request"]["oldObject"] = pod
    await admitter.admit(orjson.dumps(review))
    assert gets(api) == []


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_ref = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["kubeflow.org/v1", "batch/v1", "v1", ""]) | _json,
        "kind": st.sampled_from(["PyTorchJob", "Job", "Pod", "Namespace"]) | _json,
        "name": st.sampled_from(["llama", "", "x/y"]) | _json,
        "uid": _json,
        "controller": st.booleans() | _json,
    },
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(refs=st.lists(_ref, max_size=3) | _json)
def test_any_owner_references_never_break_the_reader(refs: Any) -> None:
    """Owner references come from the request: whatever their shape, the reader reads at most
    what it may and raises nothing but ``ApiError``; and ``lacking``, the walk without I/O that
    runs at every creation, says exactly whether the read GETs anything."""
    pj = pytorchjob()
    view = ClusterView.from_objects(base_cluster(), zone_label=PIN.zone_label, kept=adapters.KEPT)
    api = twins.InMemoryApi()
    api.put(pj)
    reader = owners.OwnerReader(WatchCache(view, twins.InMemoryLister()), api)
    pod = PodBuilder(NS, name="p").obj()
    pod["metadata"]["ownerReferences"] = refs
    lacking = reader.lacking(pod, NS, view)
    read = asyncio.run(reader(pod, NS, view))
    assert lacking == bool(api.calls)
    assert len(read) <= owners.MAX_DEPTH
    assert len(api.calls) <= owners.MAX_DEPTH


def test_lacking_is_the_walk_without_io(now: datetime) -> None:
    """``lacking`` says whether the read-through would GET anything: a job the view lacks or
    holds under another UID; not a job it holds, nor a pod without a watched owner."""
    pj = pytorchjob()
    admitter, _, view, api = setup(base_cluster(pj), [], now)
    reader = admitter.read_owners
    assert isinstance(reader, owners.OwnerReader)
    assert not reader.lacking(pytorch_pod(pj).obj(), NS, view)
    assert reader.lacking(pytorch_pod(pytorchjob(uid="another-uid")).obj(), NS, view)
    assert reader.lacking(pytorch_pod(pytorchjob(name="other")).obj(), NS, view)
    replica_set_pod = PodBuilder(NS, name="web-1").owner("apps/v1", "ReplicaSet", "web", "u").obj()
    assert not reader.lacking(replica_set_pod, NS, view)
    assert gets(api) == []
