"""The reporter (webhook/serve/reports.py) against the in-memory API twin: it writes one Report
per opted-in namespace through podium's writer, writes nothing while nothing changed, replaces a
Report whose jobs changed, deletes the Report of a namespace that opted out, stops when the CRD is
not served (and asks again later), acts only while leading, and counts results in
``podium_report_results``. The builder itself: tests/core/test_reports.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.builders import namespace
from tests.core.test_reports import SHADOW, cluster, enforced_job, shadow_job
from tests.scenarios import NS
from webhook.core import labels, reports
from webhook.core.audit import EffectOutcome
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import errors, twins
from webhook.serve import reports as serve_reports
from webhook.serve.audit import MemorySink
from webhook.serve.metrics import Metrics

KEY = ("openreports.io", "Report")


@dataclasses.dataclass
class Live:
    api: twins.InMemoryObjects
    reporter: serve_reports.Reporter
    view: dict[str, ClusterView]
    leading: list[bool]
    clock: list[float]
    meter: Metrics


def live_with(view: ClusterView, *, settings: Settings | None = None, **twin: Any) -> Live:
    api = twins.InMemoryObjects(**twin)
    views = {"now": view}
    leading, clock, meter = [True], [0.0], Metrics()
    reporter = serve_reports.Reporter(
        view=lambda: views["now"],
        ready=lambda: True,
        api=api,
        settings=settings or Settings(),
        sink=MemorySink(),
        is_leader=lambda: leading[0],
        meter=meter,
        monotonic=lambda: clock[0],
    )
    return Live(api, reporter, views, leading, clock, meter)


@pytest.fixture
def live() -> Live:
    return live_with(cluster(*shadow_job("s", ["a-1", "b-1"]), *enforced_job("e", ["c-1"])))


def stored(live: Live, ns: str) -> dict[str, Any] | None:
    return live.api.objects.get((*KEY, ns, reports.NAME))


def writes(live: Live) -> list[tuple[str, str, str]]:
    return [c for c in live.api.calls if c[0] in ("create", "replace", "delete")]


async def test_the_first_pass_creates_one_report_per_namespace(live: Live) -> None:
    done = await live.reporter.run_once()
    assert sorted((w.namespace, w.outcome) for w in done) == [
        (NS, EffectOutcome.CREATED),
        (SHADOW, EffectOutcome.CREATED),
    ]
    shadow, enforce = stored(live, SHADOW), stored(live, NS)
    assert shadow is not None and enforce is not None
    assert shadow["summary"]["fail"] == 1 and enforce["summary"]["pass"] == 1
    assert shadow["metadata"]["labels"][labels.MANAGED_BY] == labels.MANAGER


async def test_an_unchanged_cluster_writes_nothing(live: Live) -> None:
    await live.reporter.run_once()
    before = len(live.api.calls)
    assert await live.reporter.run_once() == []
    assert live.api.calls[before:] == []  # not even a read


async def test_a_new_leader_reads_what_is_there_and_rewrites_nothing(live: Live) -> None:
    await live.reporter.run_once()
    successor = live_with(live.view["now"])
    successor.api.store = live.api.store  # the same apiserver
    successor.reporter.api = successor.api
    assert await successor.reporter.run_once() == []
    assert writes(successor) == []
    assert ("list", "Report", "") in successor.api.calls


async def test_a_changed_job_replaces_its_report_only() -> None:
    enforced = enforced_job("e", ["c-1"])
    live = live_with(cluster(*shadow_job("s", ["a-1", "b-1"]), *enforced))
    await live.reporter.run_once()
    live.view["now"] = cluster(*shadow_job("s", ["c-1", "c-2"]), *enforced)
    done = await live.reporter.run_once()
    assert [(w.namespace, w.outcome) for w in done] == [(SHADOW, EffectOutcome.REPLACED)]
    shadow = stored(live, SHADOW)
    assert shadow is not None and shadow["summary"]["fail"] == 0 and shadow["summary"]["pass"] == 1


async def test_a_report_edited_by_someone_else_is_put_back_by_the_next_leader(live: Live) -> None:
    await live.reporter.run_once()
    edited = stored(live, NS)
    assert edited is not None
    live.api.put({**edited, "results": []})
    successor = live_with(live.view["now"])
    successor.api.store = live.api.store
    successor.reporter.api = successor.api
    done = await successor.reporter.run_once()
    assert [(w.namespace, w.outcome) for w in done] == [(NS, EffectOutcome.REPLACED)]


async def test_a_namespace_whose_last_job_went_loses_its_report() -> None:
    enforced = enforced_job("e", ["c-1"])
    live = live_with(cluster(*shadow_job("s", ["a-1", "b-1"]), *enforced))
    await live.reporter.run_once()
    live.view["now"] = cluster(*enforced)
    done = await live.reporter.run_once()
    assert [(w.namespace, w.outcome) for w in done] == [(SHADOW, EffectOutcome.DELETED)]
    assert stored(live, SHADOW) is None and stored(live, NS) is not None


async def test_a_namespace_that_opts_out_loses_its_report(live: Live) -> None:
    await live.reporter.run_once()
    live.view["now"] = ClusterView.from_objects(
        [
            o
            for o in live.view["now"].objects()
            if not (o["kind"] == "Namespace" and o["metadata"]["name"] == SHADOW)
        ]
        + [namespace(SHADOW, enabled=False)],
        zone_label="topology.kubernetes.io/zone",
        kept=live.view["now"].kept,
    )
    done = await live.reporter.run_once()
    assert [(w.namespace, w.outcome) for w in done] == [(SHADOW, EffectOutcome.DELETED)]
    assert stored(live, SHADOW) is None and stored(live, NS) is not None


async def test_without_the_crd_nothing_is_written_until_it_is_asked_again() -> None:
    live = live_with(cluster(*shadow_job("s", ["a-1", "b-1"])), missing_kinds={"Report"})
    assert await live.reporter.run_once() == []
    assert [c[0] for c in live.api.calls] == ["list"]
    assert await live.reporter.run_once() == []  # not asked again yet
    assert len(live.api.calls) == 1
    live.api.missing_kinds.clear()
    live.clock[0] += serve_reports.ABSENT_RETRY_SECONDS
    done = await live.reporter.run_once()
    assert {w.outcome for w in done} == {EffectOutcome.CREATED}


async def test_a_forbidden_list_is_not_retried_every_pass() -> None:
    live = live_with(cluster(*shadow_job("s", ["a-1", "b-1"])))
    live.api.fail = lambda op, key: (
        errors.ApiError("forbidden", status=403) if op == "list" else None
    )
    assert await live.reporter.run_once() == []
    assert await live.reporter.run_once() == []
    assert len(live.api.calls) == 1


async def test_a_failed_write_is_counted_and_tried_again() -> None:
    live = live_with(cluster(*shadow_job("s", ["a-1", "b-1"]), *enforced_job("e", ["c-1"])))
    live.api.fail = lambda op, key: (
        errors.ApiError("etcd timeout", status=500) if op == "create" else None
    )
    assert await live.reporter.run_once() == []
    failures = live.meter.write_failures.labels(source="reports")._value.get()
    assert failures == 2  # both namespaces
    live.api.fail = twins.no_fault
    assert len(await live.reporter.run_once()) == 2


async def test_only_the_leader_writes_and_a_lost_lead_zeroes_the_gauge(live: Live) -> None:
    live.leading[0] = False
    assert await live.reporter.run_once() == []
    assert live.api.calls == []
    live.leading[0] = True
    await live.reporter.run_once()
    gauge = live.meter.report_results
    assert gauge.labels(mode="shadow", result="fail")._value.get() == 1
    assert gauge.labels(mode="enforce", result="pass")._value.get() == 1
    live.leading[0] = False
    await live.reporter.run_once()
    assert gauge.labels(mode="shadow", result="fail")._value.get() == 0


async def test_report_max_results_zero_writes_nothing() -> None:
    live = live_with(
        cluster(*shadow_job("s", ["a-1", "b-1"])), settings=Settings(report_max_results=0)
    )
    assert await live.reporter.run_once() == []
    assert live.api.calls == []


def test_the_memo_recognises_a_pod_again_only_when_it_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects = shadow_job("s", ["a-1", "b-1"])
    view = cluster(*objects)
    calls: list[str] = []
    original = reports.recognise

    def counting(pod: Any, namespace: str, v: Any) -> Any:
        calls.append(pod.name)
        return original(pod, namespace, v)

    monkeypatch.setattr(reports, "recognise", counting)
    memo = serve_reports.Recognised()
    first = reports.build(view, Settings(), recognised=memo)
    memo.forget()
    assert sorted(calls) == ["s-master-0", "s-worker-0"]
    again = reports.build(view, Settings(), recognised=memo)
    memo.forget()
    assert first == again and len(calls) == 2  # nothing changed: no adapter call
    moved = objects[2]
    moved["spec"]["nodeName"] = "c-1"
    view.apply("MODIFIED", moved)
    changed = reports.build(view, Settings(), recognised=memo)
    assert calls[2:] == ["s-worker-0"]
    assert changed[SHADOW]["results"][0]["properties"]["zones"] == "zone-a=1,zone-c=1"
