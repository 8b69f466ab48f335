"""Shadow mode at the edges: an admission that calls no API and answers with no patch, its audit
entry, its metrics, no Events, and a reconciler that leaves shadow namespaces alone."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.builders import PodBuilder, namespace
from tests.scenarios import NS, pytorch_pod, pytorchjob, zones_8_16_64
from webhook.core import adapters, labels, reconcile
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import twins
from webhook.serve import events
from webhook.serve.metrics import Metrics

from .test_admission import body_for, make, response


def shadow_cluster(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [namespace(NS, enabled=False, **{labels.ENABLED: "shadow"}), *zones_8_16_64(), *extra]


async def test_a_shadow_admission_changes_and_creates_nothing_and_says_so(now: datetime) -> None:
    pj = pytorchjob()
    api = twins.InMemoryApi()
    admitter, sink, _ = make(shadow_cluster(pj), api, now)
    answer = await admitter.admit(body_for(pytorch_pod(pj, "master").obj()))
    resp = response(answer)
    assert resp["allowed"] is True
    assert "patch" not in resp and "patchType" not in resp and "warnings" not in resp
    assert resp["auditAnnotations"]["shadow"] == "true"
    assert api.calls == []
    (entry,) = sink.entries
    assert entry["shadow"] is True
    assert (entry["outcome"], entry["zone"]) == ("pinned", "zone-c")
    assert entry["patch"]["ops"] > 0  # what enforce mode would have patched
    assert [(e["kind"], e["outcome"]) for e in entry["effects"]] == [
        ("ConfigMap", "shadow"),
        ("CiliumNetworkPolicy", "shadow"),
    ]
    assert events.build(entry, instance="podium-0", now=now) == []


async def test_shadow_decisions_have_a_counter_of_their_own(now: datetime) -> None:
    pj = pytorchjob()
    admitter, sink, _ = make(shadow_cluster(pj), twins.InMemoryApi(), now)
    await admitter.admit(body_for(pytorch_pod(pj, "master").obj()))
    metrics = Metrics()
    metrics.observe(sink.entries[0])
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }
    key = (("outcome", "pinned"), ("zone", "zone-c"))
    assert got[("podium_shadow_decisions_total", key)] == 1
    assert not any(
        name in ("podium_admissions_total", "podium_zone_decisions_total") for name, _ in got
    )
    assert got[("podium_admission_duration_seconds_count", ())] == 1


def test_the_reconciler_removes_no_label_in_a_shadow_namespace(now: datetime) -> None:
    """A pod carrying a copied podium.dev/job label: removed where podium enforces, left where it
    only observes (its admissions left every pod unlabelled there)."""
    copied = PodBuilder(NS, name="p").label(labels.JOB, "someone-elses").obj()
    copied["spec"]["nodeName"] = "a-1"
    for value, actions in (("true", 1), ("shadow", 0)):
        ns = namespace(NS, enabled=False, **{labels.ENABLED: value})
        view = ClusterView.from_objects(
            [ns, *zones_8_16_64(), copied], zone_label=labels.ZONE_LABEL, kept=adapters.KEPT
        )
        assert len(reconcile.plan_labels(view, Settings())) == actions
