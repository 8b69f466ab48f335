"""Prometheus metrics, fed from the audit entry of every admission (``Admitter(observe=...)``).

Every ``Metrics`` has its own ``CollectorRegistry``, so two apps (or two tests) never share counts.
Label values come from small closed sets: outcomes and reasons are podium's slugs, zones are the
cluster's zones, kinds are the policy kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from webhook.core import policies
from webhook.core.audit import AuditEntry
from webhook.serve.admission import API_ERROR

#: An admission takes well under a millisecond from memory and up to the API budget (2 s by
#: default) when it creates a gang's objects; the buckets cover both ends.
DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

#: A gang waits seconds (room already free) to hours (until a zone has room, or
#: ``hold-timeout-seconds``).
HOLD_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0)

POLICY_KINDS = frozenset({policies.CILIUM_KIND, policies.K8S_POLICY_KIND})

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._children: dict[tuple[Any, ...], Counter] = {}
        self._declare_admissions(self.registry)
        self._declare_health(self.registry)
        self._declare_hold(self.registry)
        self._declare_upkeep(self.registry)

    def _declare_admissions(self, r: CollectorRegistry) -> None:
        """What admissions did: outcomes, time, zones, policies, owners read."""
        self.admissions = Counter(
            "podium_admissions",
            "Admissions answered, by outcome (pinned, unpinned, skipped, fail-open) and reason.",
            ["outcome", "reason"],
            registry=r,
        )
        self.duration = Histogram(
            "podium_admission_duration_seconds",
            "Time from parsed request to answer, API calls included.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.fail_open = Counter(
            "podium_fail_open",
            "Admissions answered allowed and unchanged because podium could not finish.",
            registry=r,
        )
        self.zone_decisions = Counter(
            "podium_zone_decisions",
            "Pods pinned to a zone, by zone.",
            ["zone"],
            registry=r,
        )
        self.policies_created = Counter(
            "podium_policies_created",
            "Allow policies created for gangs, by kind.",
            ["kind"],
            registry=r,
        )
        self.shadow_decisions = Counter(
            "podium_shadow_decisions",
            "Pods decided in shadow mode (recorded, admitted unchanged, nothing created), by the "
            "outcome enforce mode would have had (pinned, unpinned, grouped, held) and zone "
            "('' for none). Not counted in podium_admissions or podium_zone_decisions.",
            ["outcome", "zone"],
            registry=r,
        )
        self.owners_read = Counter(
            "podium_owners_read",
            "Pod owners (jobs and the objects between) read from the apiserver before a decision "
            "because the watch had not delivered them yet.",
            registry=r,
        )

    def _declare_health(self, r: CollectorRegistry) -> None:
        """What the server refused, dropped or withheld, and whether its cache is synced."""
        self.rejected = Counter(
            "podium_rejected_requests",
            "Requests answered with an HTTP error instead of an AdmissionReview, by reason.",
            ["reason"],
            registry=r,
        )
        self.events_dropped = Counter(
            "podium_events_dropped",
            "Kubernetes Events not posted, by reason (queue-full, post-failed).",
            ["reason"],
            registry=r,
        )
        self.audit_dropped = Counter(
            "podium_audit_dropped",
            "Audit records dropped because the audit backlog was full (stdout not drained).",
            registry=r,
        )
        self.cilium_policy_withheld = Gauge(
            "podium_cilium_policy_withheld",
            "1 while podium writes no CiliumNetworkPolicy because the installed CRD has no "
            "enableDefaultDeny (Cilium < 1.16, old-cilium: skip-policy), else 0.",
            registry=r,
        )
        self.cache_synced = Gauge(
            "podium_cache_synced",
            "1 once the watch cache has listed every installed resource, else 0.",
            registry=r,
        )

    def _declare_hold(self, r: CollectorRegistry) -> None:
        """``zone-chooser: hold``: gangs waiting behind podium's gate, and their releases."""
        self.gangs_held = Gauge(
            "podium_gangs_held",
            "Gangs whose pods wait behind podium's scheduling gate (at the last releaser pass).",
            registry=r,
        )
        self.gangs_too_big = Gauge(
            "podium_gangs_too_big",
            "Held gangs no zone could hold even with every node free (too-big: hold), at the "
            "last releaser pass: they wait until an admin acts.",
            registry=r,
        )
        self.capacity_buffers = Gauge(
            "podium_capacity_buffers",
            "podium's CapacityBuffers asking the autoscaler for room in a zone for a held gang "
            "(capacity-buffers: on), at the last releaser pass.",
            registry=r,
        )
        self.hold_seconds = Histogram(
            "podium_hold_seconds",
            "Seconds a gang was held, observed when it is released.",
            buckets=HOLD_BUCKETS,
            registry=r,
        )
        self.releases = Counter(
            "podium_releases",
            "Gangs released by the releaser, by reason (best-fit, most-free, completed, "
            "hold-timeout, too-big-spread, admin).",
            ["reason"],
            registry=r,
        )

    def _declare_upkeep(self, r: CollectorRegistry) -> None:
        """What the alerts watch beyond admissions: failed writes, the reconciler's passes and
        the split gangs it finds, the serving certificate's expiry."""
        self.write_failures = Counter(
            "podium_write_failures",
            "Writes of podium's records, policies or pod changes the apiserver refused or did "
            "not answer, by source (admission, reconciler, releaser, reports).",
            ["source"],
            registry=r,
        )
        self.reconcile_passes = Counter(
            "podium_reconcile_passes",
            "Reconciler passes completed (by the leader, once the cache has synced).",
            registry=r,
        )
        self.reconcile_last_pass = Gauge(
            "podium_reconcile_last_pass_timestamp_seconds",
            "When this replica last completed a reconciler pass (Unix time; 0: never, such as "
            "on a replica that does not lead).",
            registry=r,
        )
        self.gangs_split = Gauge(
            "podium_gangs_split",
            "Gangs podium admitted whose running pods are bound in more than one zone (at the "
            "last reconciler pass).",
            registry=r,
        )
        self.report_results = Gauge(
            "podium_report_results",
            "Results in podium's Reports (openreports.io, one per opted-in namespace) at the last "
            "pass of the leader, by the namespace's mode (enforce, shadow) and result (pass, "
            "fail, warn, error, skip); 0 on a replica that does not lead.",
            ["mode", "result"],
            registry=r,
        )
        self.certificate_expiry = Gauge(
            "podium_certificate_expiry_timestamp_seconds",
            "When the serving certificate being served expires (Unix time; 0: serving without "
            "TLS or no certificate loaded).",
            registry=r,
        )

    def observe(self, entry: AuditEntry) -> None:
        """Count one admission from its audit entry; never raises (metrics must not fail it)."""
        try:
            outcome = entry["outcome"] or "unknown"
            self.duration.observe(entry["latencyMs"] / 1000)
            if entry.get("shadow"):
                self._child(self.shadow_decisions, outcome, entry["zone"] or "").inc()
                return
            self._child(self.admissions, outcome, entry["reason"]).inc()
            if outcome == "fail-open":
                self.fail_open.inc()
                if entry["reason"] == API_ERROR:
                    self.write_failures.labels(source="admission").inc()
            if zone := entry["zone"]:
                self._child(self.zone_decisions, zone).inc()
            for effect in entry["effects"]:
                kind = effect.get("kind", "")
                if effect.get("outcome") == "created" and kind in POLICY_KINDS:
                    self._child(self.policies_created, kind).inc()
            if read := entry.get("read"):
                self.owners_read.inc(len(read))
        except Exception:  # a malformed entry is a bug elsewhere; the admission still stands
            self.rejected.labels(reason="metrics-error").inc()

    def _child(self, metric: Counter, *values: str) -> Counter:
        """``metric.labels(*values)``, looked up once: it validates and locks on every call, and
        this runs for every admission. The label values are few (outcomes, reasons, zones)."""
        key = (id(metric), *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def track_withheld(self, withholding: Callable[[], bool]) -> None:
        """``podium_cilium_policy_withheld`` reads ``withholding()`` at every scrape."""
        self.cilium_policy_withheld.set_function(lambda: 1.0 if withholding() else 0.0)

    def track_ready(self, ready: Callable[[], bool]) -> None:
        """``podium_cache_synced`` reads ``ready()`` at every scrape."""
        self.cache_synced.set_function(lambda: 1.0 if ready() else 0.0)

    def track_certificate(self, not_after: Callable[[], float | None]) -> None:
        """``podium_certificate_expiry_timestamp_seconds`` reads ``not_after()`` at every
        scrape (None: no certificate)."""
        self.certificate_expiry.set_function(lambda: not_after() or 0.0)

    def render(self) -> bytes:
        return generate_latest(self.registry)
