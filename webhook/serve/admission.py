"""One admission end to end: parse, decide, create the gang's objects, audit, answer.

This is where podium's promise to never block a pod because podium broke is kept: every failure
after parsing — a bug in the decision, an API error, a timeout — becomes an *allowed, unchanged*
answer with a warning and an audit entry that says why (fail open).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from webhook.core import audit, engine, reviews
from webhook.core.objects import Obj
from webhook.core.policies import Manifest
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import errors, protocols
from webhook.serve import effects
from webhook.serve.audit import Sink

#: The reason of an admission that failed open because the apiserver refused (or did not answer
#: in the time budget) a write of the gang's record or policy.
API_ERROR = "api-error"

log = logging.getLogger("podium.admission")

FAIL_OPEN_WARNING = "podium could not finish ({why}); the pod was admitted unchanged"
#: Why a creation is admitted unchanged before the watch cache has synced (``/readyz`` is 503
#: then, so only a caller that does not wait for readiness sees it).
NOT_SYNCED = "its watch cache has not synced yet, so it cannot see the cluster"


class ReadOwners(Protocol):
    """``owners.OwnerReader``: reads the owners of a pod the view lacks (``Kind/name`` each);
    ``lacking`` says, without I/O, whether there is any to read."""

    def lacking(self, pod: Obj, namespace: str, view: ClusterView) -> bool: ...

    def __call__(self, pod: Obj, namespace: str, view: ClusterView) -> Awaitable[list[str]]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """What the server sends: an HTTP status and a JSON body (an AdmissionReview, or an error)."""

    status: int
    body: dict[str, Any]
    entry: audit.AuditEntry | None = None
    decision: engine.Decision | None = None


def _not_created(manifests: tuple[Manifest, ...], outcome: str) -> list[audit.EffectEntry]:
    """The objects a decision asks for, as the audit lists them when none is created: a dry run,
    or shadow mode."""
    return [
        {
            "kind": m["kind"],
            "name": m["metadata"]["name"],
            "namespace": m["metadata"]["namespace"],
            "outcome": outcome,
        }
        for m in manifests
    ]


class Admitter:
    """Wires the pure decision to a view of the cluster, the API and the audit sink."""

    def __init__(
        self,
        *,
        view: Callable[[], ClusterView],
        api: protocols.Api | None,
        settings: Settings,
        sink: Sink,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        observe: Callable[[audit.AuditEntry], None] | None = None,
        scheduler: Callable[[], bool] = lambda: False,
        ready: Callable[[], bool] = lambda: True,
        read_owners: ReadOwners | None = None,
    ) -> None:
        """``scheduler``: whether the cluster serves kube-scheduler's gang and topology placement
        right now (``discovery.SchedulerSupport.available``); ``zone-chooser: auto`` follows it.
        ``ready``: whether the view has synced (``WatchCache.is_ready``); until then a creation
        is admitted unchanged with reason ``cache-not-synced``, not decided on an empty view.
        ``read_owners``: called before a pod creation is decided, with a quarter of the time
        budget, to read the owners the watch has not delivered yet (``owners.OwnerReader``)."""
        self.view = view
        self.read_owners = read_owners
        self.ready = ready
        self.scheduler = scheduler
        self.api = api
        self.settings = settings
        self.sink = sink
        self.clock = clock
        self.observe = observe
        self.shared = effects.Shared()

    async def admit(self, body: bytes) -> Answer:
        started = time.perf_counter()
        now = self.clock()
        try:
            request = reviews.parse(body)
        except reviews.ReviewError as err:
            return Answer(400, {"error": f"malformed AdmissionReview: {err}"})
        try:
            return await self._admit(request, started=started, now=now)
        except Exception as err:  # fail open on anything unforeseen, and say so
            log.exception("admission %s failed; failing open", request.uid)
            return self._fail_open(
                request,
                None,
                started=started,
                now=now,
                why=f"internal error: {type(err).__name__}: {err}",
            )

    async def _admit(self, request: reviews.Request, *, started: float, now: datetime) -> Answer:
        if request.operation == "CREATE" and not self.ready():
            # An empty view would say "namespace-not-enabled" for every pod: say what it is.
            return self._fail_open(
                request, None, started=started, now=now, why=NOT_SYNCED, reason="cache-not-synced"
            )
        view = self.view()
        read = await self._read_owners(request, view)
        decision = engine.decide(request, view, self.settings, now=now, scheduler=self.scheduler())
        results: list[audit.EffectEntry] = []
        warnings = list(decision.warnings)
        to_create = decision.to_create
        if decision.shadow_of is not None:
            results = _not_created(decision.shadow_of.to_create, "shadow")
        elif to_create and request.dry_run:
            results = _not_created(to_create, "dry-run")
        elif to_create:
            if self.api is None:
                return self._fail_open(
                    request, decision, started=started, now=now, why="no Kubernetes API configured"
                )
            try:
                decision, applied = await effects.with_budget(
                    self.settings.time_budget_seconds,
                    lambda: self._settle(request, view, decision, now),
                )
            except errors.ApiError as err:
                return self._fail_open(
                    request,
                    decision,
                    started=started,
                    now=now,
                    why=_api_failure(err, request),
                    reason=API_ERROR,
                )
            warnings = [*decision.warnings, *applied.warnings]
            results = [r.as_dict() for r in applied.results]
        entry = audit.build(
            request=request,
            decision=decision,
            time=now,
            latency_ms=(time.perf_counter() - started) * 1000,
            effects=results,
            warnings=warnings,
            read=read,
        )
        self._emit(entry)
        body = reviews.response(
            uid=request.uid,
            patch=decision.patch,
            warnings=warnings,
            audit_annotations=decision.audit_annotations(),
            allowed=decision.denial is None,
            message=decision.denial,
            code=403 if decision.denial else None,
        )
        return Answer(200, body, entry, decision)

    async def _read_owners(self, request: reviews.Request, view: ClusterView) -> list[str]:
        """Read what the view lacks of a new pod's owners; a failure or a slow apiserver leaves
        the decision to the view as it is (logged), never to a failed admission."""
        if (
            self.read_owners is None
            or request.operation != "CREATE"
            or not request.is_pod
            or request.object is None
            # Nearly always every owner is in the view: then no await, no timer, no task.
            or not self.read_owners.lacking(request.object, request.namespace, view)
        ):
            return []
        try:
            async with asyncio.timeout(self.settings.time_budget_seconds / 4):
                return await self.read_owners(request.object, request.namespace, view)
        except (TimeoutError, errors.ApiError) as err:
            log.warning(
                "admission %s: could not read the pod's owners (%s); deciding on the watch's view",
                request.uid,
                str(err) or type(err).__name__,
            )
            return []

    async def _settle(
        self, request: reviews.Request, view: ClusterView, decision: engine.Decision, now: datetime
    ) -> tuple[engine.Decision, effects.Applied]:
        """Create the gang's objects; if another admission recorded the gang first, follow it."""
        assert self.api is not None
        applied = await effects.ensure(decision, self.api, self.shared)
        if applied.followed is not None:
            decision = engine.decide(
                request,
                view,
                self.settings,
                now=now,
                recorded=applied.followed,
                scheduler=self.scheduler(),
            )
            rest = await effects.ensure(decision, self.api, self.shared)
            applied = effects.Applied(applied.results + rest.results, warnings=rest.warnings)
        return decision, applied

    def _fail_open(
        self,
        request: reviews.Request,
        decision: engine.Decision | None,
        *,
        started: float,
        now: datetime,
        why: str,
        reason: str = "fail-open",
    ) -> Answer:
        warning = FAIL_OPEN_WARNING.format(why=why)
        entry: audit.AuditEntry | None = None
        try:
            entry = audit.build(
                request=request,
                decision=decision,
                time=now,
                latency_ms=(time.perf_counter() - started) * 1000,
                outcome="fail-open",
                reason=reason,
                detail=why,
                warnings=[warning],
                error=why,
            )
        except Exception:  # the safety net itself must not throw
            log.exception("building the fail-open audit record for %s failed", request.uid)
        else:
            self._emit(entry)
        body = reviews.response(
            uid=request.uid,
            warnings=[warning],
            audit_annotations={"outcome": "fail-open", "reason": why[:200]},
        )
        return Answer(200, body, entry, decision)

    def _emit(self, entry: audit.AuditEntry) -> None:
        try:
            self.sink.write(entry)
        except Exception:  # an audit sink failure must not turn into a failed admission
            log.exception("audit sink failed for %s", entry.get("requestUID"))
        if self.observe is not None:
            self.observe(entry)


def _api_failure(err: errors.ApiError, request: reviews.Request) -> str:
    """Why writing a decision's objects failed; a 403 says what to change, since it is most
    likely a namespace that opted in but where podium may not write (rbac.scope: namespaced)."""
    why = f"Kubernetes API: {err}"
    if err.status == 403:
        why += (
            f"; podium may not write in namespace {request.namespace}: bind ClusterRole "
            "podium-writer there (the chart's rbac.namespaces)"
        )
    return why
