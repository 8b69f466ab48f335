"""Prometheus metrics (webhook/serve/metrics.py): counts read from typed audit records, one
registry per ``Metrics``, and a malformed record never failing an admission. The HTTP side
(``/metrics`` through the app) is in tests/serve/test_server.py."""

from __future__ import annotations

from datetime import datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.scenarios import audit_entry_for, base_cluster, pytorch_pod, pytorchjob
from webhook.core.audit import AuditEntry
from webhook.serve.metrics import Metrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(metrics: Metrics) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }


@pytest.fixture
def pinned(now: datetime) -> AuditEntry:
    pj = pytorchjob()
    record = audit_entry_for(pytorch_pod(pj, "master").obj(), base_cluster(pj), now)
    record["effects"] = [
        {"kind": "ConfigMap", "name": "r", "outcome": "created"},
        {"kind": "CiliumNetworkPolicy", "name": "p", "outcome": "created"},
    ]
    return record


def test_an_admission_counts_its_outcome_zone_latency_and_policy(
    pinned: AuditEntry,
) -> None:
    metrics = Metrics()
    metrics.observe(pinned)
    got = samples(metrics)
    outcome = (("outcome", pinned["outcome"]), ("reason", pinned["reason"]))
    assert got[("podium_admissions_total", outcome)] == 1
    assert got[("podium_zone_decisions_total", (("zone", str(pinned["zone"])),))] == 1
    assert got[("podium_policies_created_total", (("kind", "CiliumNetworkPolicy"),))] == 1
    assert ("podium_policies_created_total", (("kind", "ConfigMap"),)) not in got
    assert got[("podium_admission_duration_seconds_sum", ())] == pytest.approx(
        pinned["latencyMs"] / 1000
    )
    assert got[("podium_fail_open_total", ())] == 0


def test_a_fail_open_counts_as_such_and_pins_no_zone(pinned: AuditEntry) -> None:
    metrics = Metrics()
    metrics.observe({**pinned, "outcome": "fail-open", "reason": "api-error", "zone": None})
    got = samples(metrics)
    assert got[("podium_fail_open_total", ())] == 1
    assert not any(name == "podium_zone_decisions_total" for name, _ in got)


@pytest.mark.parametrize(
    ("reason", "failed_writes"), [("api-error", 1), ("fail-open", 0), ("cache-not-synced", 0)]
)
def test_only_a_write_the_apiserver_refused_counts_as_a_failed_write(
    pinned: AuditEntry, reason: str, failed_writes: int
) -> None:
    metrics = Metrics()
    metrics.observe({**pinned, "outcome": "fail-open", "reason": reason, "zone": None})
    got = samples(metrics)
    assert got.get(("podium_write_failures_total", (("source", "admission"),)), 0) == failed_writes


def test_a_policy_that_already_existed_is_not_counted_as_created(
    pinned: AuditEntry,
) -> None:
    metrics = Metrics()
    metrics.observe({**pinned, "effects": [{"kind": "CiliumNetworkPolicy", "outcome": "exists"}]})
    assert not any(name == "podium_policies_created_total" for name, _ in samples(metrics))


def test_two_metrics_do_not_share_a_registry(pinned: AuditEntry) -> None:
    first, second = Metrics(), Metrics()
    first.observe(pinned)
    assert samples(first)[("podium_admission_duration_seconds_count", ())] == 1
    assert samples(second)[("podium_admission_duration_seconds_count", ())] == 0


def test_a_malformed_record_is_counted_not_raised() -> None:
    metrics = Metrics()
    metrics.observe({"outcome": "pinned", "effects": [None]})  # type: ignore[typeddict-item]
    assert samples(metrics)[("podium_rejected_requests_total", (("reason", "metrics-error"),))] == 1


def test_the_cache_gauge_reads_readiness_at_every_scrape() -> None:
    metrics = Metrics()
    ready = [False]
    metrics.track_ready(lambda: ready[0])
    assert samples(metrics)[("podium_cache_synced", ())] == 0
    ready[0] = True
    assert samples(metrics)[("podium_cache_synced", ())] == 1


def test_the_certificate_gauge_reads_its_expiry_at_every_scrape() -> None:
    metrics = Metrics()
    not_after: list[float | None] = [None]
    metrics.track_certificate(lambda: not_after[0])
    assert samples(metrics)[("podium_certificate_expiry_timestamp_seconds", ())] == 0
    not_after[0] = 1_900_000_000.0
    assert samples(metrics)[("podium_certificate_expiry_timestamp_seconds", ())] == 1_900_000_000
