"""The releaser (``zone-chooser: hold``): carries ``release.plan`` out while this replica leads.

Every ``release-interval-seconds`` the leader plans from the view (``webhook.core.release``, pure)
— and in between, soon after a watch event that may let a held gang go (a pod ends or goes, a
held pod or a node comes or turns Ready: ``release.may_release``) — and, for each gang to release:

1. creates the gang's decision record (or replaces it, on a re-decision) and then its policy —
   **before** any pod is ungated, so a released pod is never without its allow policy, and a
   leader that dies after this step leaves a record the next pass follows;
2. reads each held pod and ungates it with one JSON Patch (``release.release_patch``: zone
   requirement in every term, ``podium.dev/zone`` label, annotations, gate removed behind a
   ``test`` of the gate's index and of the pod's UID), ``UNGATE_PARALLELISM`` pods at a time
   after a slow start (`_ungate`). A pod gone, recreated or already released is skipped; a failed
   patch stops the gang for this pass (no new patch starts; those in flight finish): the next
   pass sees a record and a released pod and completes the gang into that zone
   (``release.COMPLETED``), so no gang stays half released.

Each release is audited (``outcome: released``: zone, reason, pods, seconds held) and reported on
the job (``GangReleased``, with ``ZonePinned``/``PolicyCreated`` for the objects written); each
waiting gang is audited and reported (``GangHeld``; a Warning for one no zone could ever hold)
when its why changes. Metrics: ``podium_gangs_held``, ``podium_gangs_too_big``,
``podium_capacity_buffers``,
``podium_hold_seconds``, ``podium_releases_total{reason}``,
``podium_write_failures_total{source="releaser"}``.

What the releaser remembers between passes (what it ungated and awaits the watch to show, what it
said, the held pod counts) is one value, ``core.expectations.Expectations``, read and returned by
each step of a pass.

When podium is down, held pods simply wait: only podium's ServiceAccount may remove podium's gate
(the ValidatingAdmissionPolicy ``podium-gate`` the install ships). The next leader's first pass
finds them in the view and releases them once a zone has room.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Sequence
from datetime import datetime

from webhook.core import audit, labels, release
from webhook.core.audit import EffectEntry
from webhook.core.expectations import Expectations, HeldPod, PodKey
from webhook.core.objects import Obj, metadata_of, name_of
from webhook.core.policies import Manifest
from webhook.core.view import TERMINAL_PHASES, ClusterView, has_gate
from webhook.kube import errors
from webhook.serve import buffers, loops, writer

log = logging.getLogger("podium.releaser")

#: How long a woken pass waits for the rest of a burst of events (a gang's pods deleted one by
#: one): the least time between two passes.
WAKE_SETTLE_SECONDS = 0.2
#: How long passes wait for the view to show a pod this replica released (`_caught_up`) before
#: they plan without it. The apiserver's own check (`_refuse_if_released`) still keeps a released
#: gang where it is; a watch that lags this long is a fault of its own, and the releaser must
#: not stop with it.
CATCH_UP_SECONDS = 30.0
#: How many pods of a gang are being ungated (a GET and a PATCH each) at once, once the slow
#: start is past. Kueue's TAS ungater bounds its parallel ungating the same way
#: (``topology_ungater`` through ``pkg/util/parallelize``: 8 workers, 32 behind a feature gate).
#: Not a setting: the API client runs each call in asyncio's default thread pool
#: (``min(32, CPUs + 4)`` threads, 6 on 2 CPUs), which admissions share — a larger bound would
#: only queue there, in front of admissions' calls.
UNGATE_PARALLELISM = 8


@dataclasses.dataclass(kw_only=True, eq=False)
class Releaser(loops.LeaderPass):
    """Runs ``release.plan`` and carries it out while this replica leads and the cache synced."""

    #: Who released (``podium release``: the admin); podium's own user when empty.
    user: str = ""
    #: What this replica remembers between passes: pods it ungated that the view still shows
    #: gated, the why last reported per waiting gang and written on each held pod, the held pod
    #: counts of the previous pass. Each step of a pass reads it and replaces it.
    memory: Expectations = dataclasses.field(default_factory=Expectations, init=False)
    #: ``capacity-buffers: on`` where the apiserver serves no CapacityBuffers: when to ask again.
    buffer_kind_missing: buffers.KindMissing = dataclasses.field(
        default_factory=buffers.KindMissing, init=False
    )
    #: Set by `notice` when a watch event may let a held gang go: `run` passes at once.
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event, init=False)

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
        planned = release.plan(view, self.settings, now=now, stable=self.memory.counts)
        entries = await self._buffers(buffers.remove(self.api, planned, now=now, user=self.user))
        entries += [await self.execute(r, now=now) for r in planned.releases]
        entries += await self._buffers(
            buffers.write(
                self.api,
                planned,
                now=now,
                user=self.user,
                settings=self.settings,
                missing=self.buffer_kind_missing,
            )
        )
        if woken:
            return entries
        self.memory, changed = self.memory.counted(planned.counts).report(
            [(w.held.key, w.why) for w in planned.waits]
        )
        entries += [self.write(_held_entry(w, now)) for w in planned.waits if w.held.key in changed]
        await self._annotate(planned.waits)
        if self.meter is not None:
            self.meter.gangs_held.set(len(planned.waits))
            self.meter.gangs_too_big.set(sum(1 for w in planned.waits if w.too_big))
            self.meter.capacity_buffers.set(sum(1 for want in planned.grow if want.live))
        return entries

    async def _buffers(self, step: Awaitable[list[audit.AuditEntry]]) -> list[audit.AuditEntry]:
        """Audit (and so report) what a buffer step did (``serve.buffers``): deleting the buffers
        no gang wants before any release, writing those that changed after."""
        return [self.write(entry) for entry in await step]

    def _caught_up(self, view: ClusterView) -> bool:
        """The view shows every pod this replica ungated as released (or gone). Until it does,
        the room those pods take is not counted and their gang may look undecided, so a pass
        waits for the next event or period rather than plan that room twice — for at most
        ``CATCH_UP_SECONDS`` a pod (``Expectations.catch_up``)."""
        caught = self.memory.catch_up(view, now=time.monotonic(), patience=CATCH_UP_SECONDS)
        for pod, late in caught.overdue:
            log.warning(
                "the view still shows %s/%s gated %.0f s after its release; planning anyway",
                pod.namespace,
                pod.name,
                late,
            )
        self.memory = caught.store
        return caught.caught_up

    async def _annotate(self, waits: Sequence[release.Wait]) -> None:
        """Say on each held pod why its gang waits (``podium.dev/held``): one merge patch per pod
        whose annotation differs from the why, none when nothing changed. The memory keeps
        what was written until the watch shows it, so a lagging view causes no second write
        (``Expectations.to_say``, ``said_to``). ``UNGATE_PARALLELISM`` patches at once: each
        pod's write stands alone, and one failing does not stop the others."""
        held = [
            HeldPod(p.namespace, p.name, p.uid, p.annotations.get(labels.HELD_WHY), wait.why)
            for wait in waits
            for p in wait.held.held
        ]
        failed: set[str] = set()
        bound = asyncio.Semaphore(UNGATE_PARALLELISM)

        async def say(pod: HeldPod) -> None:
            patch = {"metadata": {"annotations": {labels.HELD_WHY: pod.why}}}
            async with bound:
                try:
                    await self.api.merge_patch("v1", "Pod", pod.namespace, pod.name, patch)
                except errors.NotFound:
                    return
                except errors.ApiError as err:
                    log.warning("cannot say why %s waits: %s", pod.name, err)
                    failed.add(pod.uid)

        async with asyncio.TaskGroup() as group:
            for pod in self.memory.to_say(held):
                group.create_task(say(pod))
        self.memory = self.memory.said_to(held, failed=failed)

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
            await self._ungate(planned, released)
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
            name_of(p)
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

    async def _ungate(self, planned: release.Release, released: list[str]) -> None:
        """Release the gang's pods (`_ungate_pod`), adding the names released to ``released`` in
        the plan's order. A slow start, as Kubernetes' ReplicaSet controller creates pods
        (``slowStartBatch``), but as a window: one pod first, and each pod released lets one more
        start, up to ``UNGATE_PARALLELISM`` at once — so a fault (an apiserver, a webhook
        refusing the release) fails one or a few PATCHes rather than a gang's worth, and a
        healthy apiserver sees the window double every round trip. The first failure stops new
        pods from starting; those in flight finish (a request cut off would leave it unknown
        whether its pod was ungated); then it is raised, as the one-by-one loop did."""
        window = asyncio.Semaphore(1)
        width = 1
        done: dict[int, bool] = {}
        failures: list[errors.ApiError] = []

        async def one(i: int, ref: release.PodRef) -> None:
            nonlocal width
            try:
                done[i] = await self._ungate_pod(ref, planned)
                if width < UNGATE_PARALLELISM:
                    width += 1
                    window.release()
            except errors.ApiError as err:
                failures.append(err)
            finally:
                window.release()

        try:
            async with asyncio.TaskGroup() as group:
                for i, ref in enumerate(planned.pods):
                    await window.acquire()
                    if failures:
                        break
                    group.create_task(one(i, ref))
        finally:
            released.extend(ref.name for i, ref in enumerate(planned.pods) if done.get(i))
        if failures:
            raise failures[0]

    async def _ungate_pod(self, ref: release.PodRef, planned: release.Release) -> bool:
        """Release one pod; False when there is nothing to release (gone, recreated with
        another UID, or no longer carrying podium's gate). The GET stays: the patch is computed
        from the pod's whole ``spec.affinity`` (its pod affinities too) and the gate's index in
        ``schedulingGates``, neither of which the view keeps (a ``PodSummary``: the required
        node terms and tolerations only); a patch built from the view could write an affinity
        without the pod's own parts. Its ``test`` ops (the gate's index, the UID) guard the rest."""
        try:
            pod = await self.api.get("v1", "Pod", ref.namespace, ref.name)
        except errors.NotFound:
            return False
        if metadata_of(pod).get("uid") != ref.uid or not has_gate(pod.get("spec") or {}):
            return False
        patch = release.release_patch(pod, planned, self.settings)
        await self.api.json_patch("v1", "Pod", ref.namespace, ref.name, patch)
        key = PodKey(ref.namespace, ref.name, ref.uid)
        self.memory = self.memory.ungate([key], at=time.monotonic())
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
        domain=planned.domain,
        topology=planned.topology,
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
        topology=wait.topology,
    )
