"""Leader election through a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

Every replica serves admissions; only the leader reconciles. A replica holds the lease while it
renews it (every ``renew_every`` seconds) and considers itself leader only while its last renewal
is younger than ``renew_deadline``; a replica that does not hold the lease takes it over once the
holder has not renewed for ``duration`` seconds *as measured on its own clock* since it last saw
the lease change (no trust in other machines' clocks). Every write carries the resourceVersion it
was based on, so of two replicas taking over at once exactly one succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from webhook.core.objects import Obj
from webhook.kube import errors
from webhook.kube.protocols import Objects

log = logging.getLogger("podium.leader")

API_VERSION = "coordination.k8s.io/v1"
KIND = "Lease"
LEASE_NAME = "podium-reconciler"


def default_identity() -> str:
    """The pod's name when running in a pod (``POD_NAME``), else hostname and process id."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


def micro_time(at: datetime) -> str:
    """A ``MicroTime`` as the Lease API spells it."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass(frozen=True, slots=True)
class Timing:
    duration: float = 15.0
    renew_every: float = 5.0
    #: A leader that could not renew for this long stops acting (before others may take over).
    renew_deadline: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.renew_every < self.renew_deadline < self.duration:
            raise ValueError("need 0 < renew_every < renew_deadline < duration")


class LeaderElector:
    def __init__(
        self,
        api: Objects,
        *,
        namespace: str,
        identity: str,
        name: str = LEASE_NAME,
        timing: Timing = Timing(),
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.timing = timing
        self.monotonic = monotonic
        self.wall = wall
        self._renewed_at: float | None = None
        #: The lease as last seen (holder, renewTime, transitions) and when we saw it change.
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0

    @property
    def is_leader(self) -> bool:
        return (
            self._renewed_at is not None
            and self.monotonic() - self._renewed_at < self.timing.renew_deadline
        )

    def _spec(self, *, acquired: bool, transitions: int, acquire_time: str | None) -> Obj:
        now = micro_time(self.wall())
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.timing.duration),
            "acquireTime": now if acquired or acquire_time is None else acquire_time,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round: create, renew or take over the lease. True while we lead. Never raises
        for API trouble (that is a lost round, logged)."""
        try:
            won = await self._round()
        except errors.Conflict:
            won = False  # someone else wrote first; read again next round
        except errors.ApiError as err:
            log.warning("leader election round failed: %s", err)
            won = False
        if won:
            if not self.is_leader:
                log.info(
                    "%s became the leader (lease %s/%s)", self.identity, self.namespace, self.name
                )
            self._renewed_at = self.monotonic()
        return self.is_leader

    async def _round(self) -> bool:
        try:
            lease = await self.api.get(API_VERSION, KIND, self.namespace, self.name)
        except errors.NotFound:
            manifest = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(acquired=True, transitions=0, acquire_time=None),
            }
            try:
                await self.api.create(manifest)
            except errors.AlreadyExists:
                return False
            return True
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        seen = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        now = self.monotonic()
        if seen != self._observed:
            self._observed, self._observed_at = seen, now
        duration = float(spec.get("leaseDurationSeconds") or self.timing.duration)
        if holder and holder != self.identity and now - self._observed_at < duration:
            self._renewed_at = None
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        ours = holder == self.identity
        updated = {
            **lease,
            "spec": self._spec(
                acquired=not ours,
                transitions=transitions if ours else transitions + 1,
                acquire_time=spec.get("acquireTime"),
            ),
        }
        written = await self.api.replace(updated)
        written_spec = written.get("spec") or {}
        self._observed = (
            self.identity,
            written_spec.get("renewTime"),
            written_spec.get("leaseTransitions"),
        )
        self._observed_at = now
        return True

    async def release(self) -> None:
        """Give the lease up (empty holder) so another replica takes over at once, not after
        ``duration``. Only when we still hold it; failures are logged."""
        if self._renewed_at is None:
            return
        self._renewed_at = None
        try:
            lease = await self.api.get(API_VERSION, KIND, self.namespace, self.name)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update(
                holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time(self.wall())
            )
            await self.api.replace({**lease, "spec": spec})
            log.info("%s released the lease", self.identity)
        except errors.ApiError as err:
            log.warning("releasing the lease failed: %s", err)

    async def run(self, stop: asyncio.Event) -> None:
        """Acquire, then renew every ``renew_every`` seconds until ``stop``; then release."""
        try:
            while not stop.is_set():
                await self.try_acquire_or_renew()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.timing.renew_every)
        finally:
            await self.release()
