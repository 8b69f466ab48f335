"""The one loop behind the server's periodic work (the reconciler's and the releaser's passes,
the PodGroup probe and the Cilium CRD guard), and what the leader's passes share."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
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
) -> None:
    """Run ``step`` (sync or async) every ``seconds`` until ``stop``. A step that fails is logged
    as ``"<what> failed"`` and the loop goes on: a broken pass must not end the loop, nor the
    server."""
    while not stop.is_set():
        try:
            result = step()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("%s failed", what)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)
