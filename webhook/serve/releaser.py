"""The releaser (``zone-chooser: hold``): carries ``release.plan`` out while this replica leads.

Every ``release-interval-seconds`` the leader plans from the view (``webhook.core.release``, pure)
— and in between, soon after a watch event that may let a held gang go (a pod ends or goes, a
held pod or a node comes: ``release.may_release``) — and, for each gang to release:

1. creates the gang's decision record (or replaces it, on a re-decision) and then its policy —
   **before** any pod is ungated, so a released pod is never without its allow policy, and a
   leader that dies after this step leaves a record the next pass follows;
2. reads each held pod and ungates it with one JSON Patch (``release.release_patch``: zone
   requirement in every term, ``podium.dev/zone`` label, annotations, gate removed behind a
   ``test`` of the gate's index and of the pod's UID). A pod gone, recreated or already released
   is skipped; a failed patch stops the gang for this pass: the next pass sees a record and a
   released pod and completes the gang into that zone (``release.COMPLETED``), so no gang stays
   half released.

Each release is audited (``outcome: released``: zone, reason, pods, seconds held) and reported on
the job (``GangReleased``, with ``ZonePinned``/``PolicyCreated`` for the objects written); each
waiting gang is audited and reported (``GangHeld``) when its why changes. Metrics:
``podium_gangs_held``, ``podium_hold_seconds``, ``podium_releases_total{reason}``,
``podium_write_failures_total{source="releaser"}``.

When podium is down, held pods simply wait: nothing else removes podium's gate. The next leader's
first pass finds them in the view and releases them once a zone has room.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from datetime import datetime

from webhook.core import audit, labels, release
from webhook.core.audit import EffectEntry
from webhook.core.objects import Obj
from webhook.core.policies import Manifest
from webhook.core.view import TERMINAL_PHASES, ClusterView, has_gate
from webhook.kube import errors
from webhook.serve import loops, writer

log = logging.getLogger("podium.releaser")

#: How long a woken pass waits for the rest of a burst of events (a gang's pods deleted one by
#: one): the least time between two passes.
WAKE_SETTLE_SECONDS = 0.2
#: How long passes wait for the view to show a pod this replica released (`_caught_up`) before
#: they plan without it. The apiserver's own check (`_refuse_if_released`) still keeps a released
#: gang where it is; a watch that lags this long is a fault of its own, and the releaser must
#: not stop with it.
CATCH_UP_SECONDS = 30.0


@dataclasses.dataclass(kw_only=True, eq=False)
class Releaser(loops.LeaderPass):
    """Runs ``release.plan`` and carries it out while this replica leads and the cache synced."""

    #: Who released (``podium release``: the admin); podium's own user when empty.
    user: str = ""
    #: Held pods per gang at the previous pass (``release.plan``'s ``stable``).
    _counts: dict[str, int] = dataclasses.field(default_factory=dict, init=False)
    #: The why last reported per waiting gang: a gang is reported again when it changes.
    _whys: dict[str, str] = dataclasses.field(default_factory=dict, init=False)
    #: The why last written on each held pod (by UID), until the view shows it.
    _said: dict[str, str] = dataclasses.field(default_factory=dict, init=False)
    #: Set by `notice` when a watch event may let a held gang go: `run` passes at once.
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event, init=False)
    #: Pods this replica ungated that the view still shows gated, as (namespace, name, UID),
    #: with the monotonic time of the release.
    _unseen: dict[tuple[str, str, str], float] = dataclasses.field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.user = self.user or self.settings.own_user

    def notice(self, event: str, obj: Obj) -> None:
        """A watch cache listener: wake `run` when the event may let a held gang go."""
        if self.view().holds_any() and release.may_release(event, obj):
            self.wake.set()

    async def release_now(self) -> list[audit.AuditEntry]:
        """A pass woken by an event: the releases only (`_pass`)."""
        return await self._pass(woken=True)

    async def run_once(self) -> list[audit.AuditEntry]:
        """One pass; the audit entries of what it did. Nothing when not leading or not synced."""
        return await self._pass(woken=False)

    async def _pass(self, *, woken: bool) -> list[audit.AuditEntry]:
        """Plan and release. A periodic pass also says why the other gangs wait and keeps their
        held pod counts (``stable``); a woken one does neither, so that events do not multiply
        the writes on held pods, and a gang whose size the job cannot tell still needs its count
        unchanged over a whole period. No pass plans until the view shows what this replica
        released (`_caught_up`)."""
        if not self.acting():
            return []
        view = self.view()
        if not self._caught_up(view):
            return []
        now = self.clock()
        planned = release.plan(view, self.settings, now=now, stable=self._counts)
        entries = [await self.execute(r, now=now) for r in planned.releases]
        if woken:
            return entries
        self._counts = dict(planned.counts)
        for wait in planned.waits:
            if self._whys.get(wait.held.key) != wait.why:
                self._whys[wait.held.key] = wait.why
                entries.append(self.write(_held_entry(wait, now)))
        waiting = {w.held.key for w in planned.waits}
        self._whys = {k: v for k, v in self._whys.items() if k in waiting}
        await self._annotate(planned.waits)
        if self.meter is not None:
            self.meter.gangs_held.set(len(planned.waits))
        return entries

    def _caught_up(self, view: ClusterView) -> bool:
        """The view shows every pod this replica ungated as released (or gone). Until it does,
        the room those pods take is not counted and their gang may look undecided, so a pass
        waits for the next event or period rather than plan that room twice — for at most
        ``CATCH_UP_SECONDS`` a pod."""
        now = time.monotonic()
        unseen = {}
        for (namespace, name, uid), at in self._unseen.items():
            pod = view.pod(namespace, name)
            if pod is None or pod.uid != uid or not pod.gated:
                continue
            if now - at > CATCH_UP_SECONDS:
                log.warning(
                    "the view still shows %s/%s gated %.0f s after its release; planning anyway",
                    namespace,
                    name,
                    now - at,
                )
                continue
            unseen[namespace, name, uid] = at
        self._unseen = unseen
        return not unseen

    async def _annotate(self, waits: Sequence[release.Wait]) -> None:
        """Say on each held pod why its gang waits (``podium.dev/held``): one merge patch per pod
        whose annotation differs from the why, none when nothing changed. ``_said`` remembers
        what was written until the watch shows it, so a lagging view causes no second write."""
        said: dict[str, str] = {}
        for wait in waits:
            for pod in wait.held.held:
                said[pod.uid] = wait.why
                shown = pod.annotations.get(labels.HELD_WHY)
                if wait.why in (shown, self._said.get(pod.uid)):
                    continue
                patch = {"metadata": {"annotations": {labels.HELD_WHY: wait.why}}}
                try:
                    await self.api.merge_patch("v1", "Pod", pod.namespace, pod.name, patch)
                except errors.NotFound:
                    continue
                except errors.ApiError as err:
                    log.warning("cannot say why %s waits: %s", pod.name, err)
                    said[pod.uid] = self._said.get(pod.uid, "")
        self._said = said

    async def execute(self, planned: release.Release, *, now: datetime) -> audit.AuditEntry:
        """Write the record and policy, then ungate the pods; the audit entry of how it went."""
        started = time.perf_counter()
        effects: list[EffectEntry] = []
        released: list[str] = []
        error = None
        try:
            if planned.record is not None:
                await self._record(planned, effects)
            for policy in planned.policies:
                await self._create(policy, effects, replace=planned.replace)
            for ref in planned.pods:
                if await self._ungate(ref, planned):
                    released.append(ref.name)
        except errors.ApiError as err:
            error = str(err)
            log.warning("releasing %s stopped: %s", planned.held.gang.display, err)
        entry = _released_entry(
            planned,
            now=now,
            user=planned.by or self.user,
            effects=effects,
            released=released,
            error=error,
            started=started,
        )
        if self.meter is not None and error is not None:
            self.meter.write_failures.labels(source="releaser").inc()
        elif self.meter is not None:
            self.meter.releases.labels(reason=planned.reason).inc()
            self.meter.hold_seconds.observe(planned.waited_seconds)
        return self.write(entry)

    async def _record(self, planned: release.Release, effects: list[EffectEntry]) -> None:
        """Create the record; on a re-decision replace the one there. A record someone else
        wrote with another zone meanwhile stops the gang for this pass."""
        record = planned.record
        assert record is not None
        zone = (record.get("data") or {}).get("zone")

        def same(existing: Obj) -> bool:
            return bool((existing.get("data") or {}).get("zone") == zone)

        async def guard(_existing: Obj) -> None:
            if not planned.replace:
                name = record["metadata"]["name"]
                raise errors.Conflict(f"record {name} names another zone than this pass chose")
            await self._refuse_if_released(planned)

        written = await writer.create_or_replace(self.api, record, same=same, guard=guard)
        effects.append(written.effect())

    async def _refuse_if_released(self, planned: release.Release) -> None:
        """A re-decision is planned from the view, and the watch may deliver a record before the
        pods an earlier pass ungated. Ask the apiserver: a gang with a pod already out is
        committed to its recorded zone (the next pass completes it), never moved."""
        held = planned.held
        pods = await self.api.list(
            "v1", "Pod", namespace=held.namespace, label_selector=f"{labels.JOB}={held.key}"
        )
        out = sorted(
            str((p.get("metadata") or {}).get("name"))
            for p in pods
            if not has_gate(p.get("spec") or {})
            and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES
        )
        if out:
            raise errors.Conflict(
                f"{held.gang.display} is not decided again: {out[0]} is released already"
            )

    async def _create(
        self, manifest: Manifest, effects: list[EffectEntry], *, replace: bool = False
    ) -> None:
        """Create the policy; one there already is fine, or, on a re-decision (``replace``),
        overwritten: it may be scoped to the zone decided before."""
        if replace:
            written = await writer.create_or_replace(self.api, manifest, optional=True)
        else:
            written = await writer.create(self.api, manifest, optional=True)
        effects.append(written.effect())

    async def _ungate(self, ref: release.PodRef, planned: release.Release) -> bool:
        """Release one pod; False when there is nothing to release (gone, recreated with
        another UID, or no longer carrying podium's gate)."""
        try:
            pod = await self.api.get("v1", "Pod", ref.namespace, ref.name)
        except errors.NotFound:
            return False
        if (pod.get("metadata") or {}).get("uid") != ref.uid or not has_gate(pod.get("spec") or {}):
            return False
        patch = release.release_patch(pod, planned, self.settings)
        await self.api.json_patch("v1", "Pod", ref.namespace, ref.name, patch)
        self._unseen[ref.namespace, ref.name, ref.uid] = time.monotonic()
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """A pass every ``release-interval-seconds`` until ``stop``, and one soon after each
        `notice` in between; a failed pass is logged."""
        await loops.every(
            self.settings.release_interval_seconds,
            self.run_once,
            stop,
            what="release pass",
            log=log,
            wake=self.wake,
            woken=self.release_now,
            settle=min(WAKE_SETTLE_SECONDS, self.settings.release_interval_seconds),
        )


def _released_entry(
    planned: release.Release,
    *,
    now: datetime,
    user: str,
    effects: list[EffectEntry],
    released: list[str],
    error: str | None,
    started: float,
) -> audit.AuditEntry:
    detail = planned.detail
    if error is None:
        detail += f"; released {len(released)} pod(s)"
    else:
        detail += f"; stopped after {len(released)} pod(s), the next pass completes it"
    return audit.released(
        time=now,
        namespace=planned.held.namespace,
        job=audit.job_ref(planned.held.gang),
        zone=planned.zone,
        user=user,
        reason=planned.reason,
        detail=detail,
        effects=effects,
        pods=released,
        waited_seconds=planned.waited_seconds,
        latency_ms=(time.perf_counter() - started) * 1000,
        error=error,
    )


def _held_entry(wait: release.Wait, now: datetime) -> audit.AuditEntry:
    return audit.held(
        time=now,
        namespace=wait.held.namespace,
        job=audit.job_ref(wait.held.gang),
        reason="too-big" if wait.too_big else labels.HELD,
        detail=wait.why,
        result=f"position {wait.position}" if wait.position else "not ready",
        pods=[p.name for p in wait.held.held],
        waited_seconds=wait.held.waited(now),
    )
