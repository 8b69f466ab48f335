"""The one loop behind the server's periodic work: the reconciler's and the releaser's passes,
the PodGroup probe and the Cilium CRD guard."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable


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
