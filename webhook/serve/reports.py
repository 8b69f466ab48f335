"""The reporter: keeps podium's Reports (``openreports.io``, ``webhook.core.reports``) current
while this replica leads.

Every ``report-interval-seconds`` the leader builds one Report per opted-in namespace from the
view (pure: ``reports.build``) and writes, through podium's writer, only those whose body
changed since it last wrote or read them: an unchanged cluster costs no API call. At the first
pass after it starts leading it lists the Reports podium wrote before (by label), so a new leader
neither rewrites the same bodies nor forgets a namespace that opted out since (its Report is
deleted).

podium does not own the Report CRD: the Open Reports chart (or a report producer's chart that
bundles it) installs it. podium finds out whether the apiserver serves it by that first list (a
404: not served; a 403: not granted, an older chart's RBAC) and then asks again every
``ABSENT_RETRY_SECONDS``, writing nothing meanwhile (logged once per state change). Not
audited: a Report is a view of decisions already audited, not a decision.

Metrics: ``podium_report_results{mode,result}``, and a failed write counts in
``podium_write_failures_total{source="reports"}``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable

from webhook.core import reports
from webhook.core.adapters.base import Gang
from webhook.core.audit import EffectOutcome
from webhook.core.objects import Obj, namespace_of
from webhook.core.policies import Manifest
from webhook.core.settings import Mode
from webhook.core.view import PodSummary, View
from webhook.kube import errors
from webhook.serve import loops, writer

log = logging.getLogger("podium.reports")

#: Seconds between two looks for the Report CRD while the apiserver does not serve it (or
#: podium may not list it).
ABSENT_RETRY_SECONDS = 300.0


class Recognised:
    """``reports.recognise``, its gang kept per pod while the view holds the same summary of it
    (a pod event replaces the summary): a pass costs an adapter call only for the pods that
    changed since the last (and those no adapter claimed). ``forget`` drops the pods not asked
    for in the last pass."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[PodSummary, Gang]] = {}
        self._asked: set[tuple[str, str]] = set()

    def __call__(self, pod: PodSummary, namespace: str, view: View) -> Gang | None:
        key = (namespace, pod.name)
        self._asked.add(key)
        kept = self._kept.get(key)
        if kept is not None and kept[0] is pod:
            return kept[1]
        gang = reports.recognise(pod, namespace, view)
        if gang is not None:  # None may change without the pod: its job not in the view yet
            self._kept[key] = (pod, gang)
        return gang

    def forget(self) -> None:
        self._kept = {k: v for k, v in self._kept.items() if k in self._asked}
        self._asked = set()


@dataclasses.dataclass(kw_only=True, eq=False)
class Reporter(loops.LeaderPass):
    """Builds the Reports from the view and writes those that changed, while leading."""

    monotonic: Callable[[], float] = time.monotonic
    #: Per namespace, the Report body as podium last wrote or read it.
    known: dict[str, Obj] = dataclasses.field(default_factory=dict)
    #: The first pass after leading lists what is there (``known`` is then current).
    listed: bool = False
    #: ``monotonic()`` before which nothing is tried (the CRD is not served, or not granted).
    absent_until: float = 0.0
    #: Why the last list or write found the Reports unwritable, logged on change.
    absent_why: str = ""
    recognised: Recognised = dataclasses.field(default_factory=Recognised)

    @property
    def interval_seconds(self) -> float:
        return self.settings.report_interval_seconds

    async def run_once(self) -> list[writer.Written]:
        """One pass; what it wrote. Nothing when not leading, not synced, turned off
        (``report-max-results: 0``) or while the CRD is absent."""
        if not self.acting():
            if self.listed:  # leadership lost: the next leader writes, and this one forgets
                self.listed, self.known = False, {}
                self._meter({})
            return []
        if self.settings.report_max_results <= 0 or self.monotonic() < self.absent_until:
            return []
        if not self.listed and not await self._list():
            return []
        wanted = reports.build(self.view(), self.settings, recognised=self.recognised)
        self.recognised.forget()
        done = [w for ns, body in wanted.items() if (w := await self._write(ns, body))]
        for namespace in sorted(set(self.known) - set(wanted)):
            if (gone := await self._delete(namespace)) is not None:
                done.append(gone)
        self._meter(wanted)
        return done

    async def _list(self) -> bool:
        """Read the Reports podium wrote (``known``); False when they cannot be read."""
        where: list[str | None] = [*sorted(self.settings.writable_namespaces)] or [None]
        found: list[Obj] = []
        try:
            for namespace in where:
                found += await self.api.list(
                    reports.API_VERSION,
                    reports.KIND,
                    namespace=namespace,
                    label_selector=reports.selector(),
                )
        except errors.NotFound:
            return self._absent(f"the apiserver serves no {reports.API_VERSION} {reports.KIND}")
        except errors.ApiError as err:
            if err.status == 403:
                return self._absent(f"podium may not list {reports.PLURAL} ({err})")
            self._failed("listing the Reports", err)  # the next pass lists again
            return False
        self.known = {namespace_of(o): o for o in found}
        self.listed, self.absent_why = True, ""
        log.info("writing Reports (%s); %d found", reports.API_VERSION, len(found))
        return True

    def _absent(self, why: str) -> bool:
        if why != self.absent_why:
            log.info("%s: no Reports written; asking again every %.0f s", why, ABSENT_RETRY_SECONDS)
        self.absent_why = why
        self.absent_until = self.monotonic() + ABSENT_RETRY_SECONDS
        return False

    async def _write(self, namespace: str, body: Manifest) -> writer.Written | None:
        if reports.same(self.known.get(namespace), body):
            return None
        try:
            written = await writer.create_or_replace(
                self.api, body, optional=True, same=lambda there: reports.same(there, body)
            )
        except errors.ApiError as err:  # Conflict included: the next pass writes again
            self._failed(f"writing the Report of {namespace}", err)
            return None
        if written.outcome is EffectOutcome.KIND_MISSING:
            self.listed = False
            self._absent(f"the apiserver serves no {reports.API_VERSION} {reports.KIND}")
            return written
        self.known[namespace] = body
        log.info("Report %s/%s: %s", namespace, reports.NAME, written.outcome.value)
        return written

    async def _delete(self, namespace: str) -> writer.Written | None:
        """The Report of a namespace podium no longer reports on (opted out, or gone)."""
        there = self.known[namespace]
        try:
            written = await writer.delete(self.api, dict(there))
        except errors.ApiError as err:
            self._failed(f"deleting the Report of {namespace}", err)
            return None
        del self.known[namespace]
        log.info("Report %s/%s: %s", namespace, reports.NAME, written.outcome.value)
        return written

    def _failed(self, what: str, err: errors.ApiError) -> None:
        log.warning("%s failed: %s", what, err)
        if self.meter is not None:
            self.meter.write_failures.labels(source="reports").inc()

    def _meter(self, wanted: dict[str, Manifest]) -> None:
        if self.meter is None:
            return
        counted: Counter[tuple[str, str]] = Counter()
        for body in wanted.values():
            mode = body["metadata"]["labels"][reports.MODE_LABEL]
            for result, count in body["summary"].items():
                counted[(mode, result)] += count
        for mode in Mode:
            for result in reports.RESULTS:
                gauge = self.meter.report_results.labels(mode=mode.value, result=result)
                gauge.set(counted[(mode.value, result)])

    async def run(self, stop: asyncio.Event) -> None:
        """A pass every ``report-interval-seconds`` until ``stop``."""
        await loops.every(self.interval_seconds, self.run_once, stop, what="reports pass", log=log)
