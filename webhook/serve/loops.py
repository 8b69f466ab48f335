"""The one loop behind the server's periodic work (the reconciler's and the releaser's passes,
the PodGroup probe and the Cilium CRD guard), and what the leader's passes share."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from webhook.core import audit
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import protocols
from webhook.serve.audit import Sink
from webhook.serve.metrics import Metrics


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclasses.dataclass(kw_only=True, eq=False)
class LeaderPass:
    """What the reconciler and the releaser are built from: they act only while this replica
    leads (``is_leader``) and its watch cache has synced (``ready``), plan from the ``view``, write
    through ``api``, and audit to ``sink``; ``observe`` sees every audit entry as it is written
    (the Event recorder); ``meter`` counts what a pass did."""

    view: Callable[[], ClusterView]
    ready: Callable[[], bool]
    api: protocols.Objects
    settings: Settings
    sink: Sink
    is_leader: Callable[[], bool] = lambda: True
    clock: Callable[[], datetime] = _utcnow
    observe: Callable[[audit.AuditEntry], None] | None = None
    #: Counts passes, releases, failed writes and what the pass found (``/metrics``).
    meter: Metrics | None = None

    def acting(self) -> bool:
        """This replica leads and its cache has synced: a pass may act."""
        return self.is_leader() and self.ready()

    def write(self, entry: audit.AuditEntry) -> audit.AuditEntry:
        """Audit ``entry`` and show it to ``observe``; neither may break a pass."""
        with contextlib.suppress(Exception):
            self.sink.write(entry)
        if self.observe is not None:
            with contextlib.suppress(Exception):
                self.observe(entry)
        return entry


async def every(
    seconds: float,
    step: Callable[[], Awaitable[object] | object],
    stop: asyncio.Event,
    *,
    what: str,
    log: logging.Logger,
    wake: asyncio.Event | None = None,
    woken: Callable[[], Awaitable[object] | object] | None = None,
    settle: float = 0.2,
) -> None:
    """Run ``step`` (sync or async) every ``seconds`` until ``stop``. A step that fails is logged
    as ``"<what> failed"`` and the loop goes on: a broken pass must not end the loop, nor the
    server. Between two steps, each time ``wake`` is set, ``woken`` runs (after ``settle``
    seconds, so that a burst of events makes one run, and never closer than that to the previous
    one); the steps keep their period."""
    while not stop.is_set():
        await _run(step, what=what, log=log)
        deadline = time.monotonic() + seconds
        while wake is not None and woken is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not await _first(wake, stop, left) or stop.is_set():
                break
            if await _first(stop, None, settle):
                return
            wake.clear()
            await _run(woken, what=what, log=log)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, deadline - time.monotonic()))


async def _run(
    step: Callable[[], Awaitable[object] | object], *, what: str, log: logging.Logger
) -> None:
    try:
        result = step()
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("%s failed", what)


async def _first(event: asyncio.Event, other: asyncio.Event | None, timeout: float) -> bool:
    """Wait until ``event`` or ``other`` is set, at most ``timeout`` seconds; whether one is."""
    waits = [asyncio.ensure_future(e.wait()) for e in (event, other) if e is not None]
    done, pending = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return bool(done)
