"""The server's one periodic loop (webhook/serve/loops.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from webhook.serve import loops

log = logging.getLogger("podium.test.loops")


@pytest.mark.parametrize("is_async", [False, True])
async def test_a_failing_step_is_logged_and_the_loop_goes_on_until_stop(
    is_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    stop = asyncio.Event()
    calls: list[int] = []

    def work() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("the first pass breaks")
        if len(calls) == 3:
            stop.set()

    async def async_work() -> None:
        work()

    step = async_work if is_async else work
    with caplog.at_level(logging.ERROR, logger=log.name):
        await asyncio.wait_for(loops.every(0.001, step, stop, what="a pass", log=log), 5)
    assert calls == [0, 1, 2]
    assert [r.getMessage() for r in caplog.records] == ["a pass failed"]


async def test_a_stopped_loop_runs_no_step() -> None:
    stop = asyncio.Event()
    stop.set()
    calls: list[int] = []
    await loops.every(60, lambda: calls.append(1), stop, what="a pass", log=log)
    assert calls == []


async def woken_loop(
    drive: Coroutine[Any, Any, None],
    calls: list[str],
    stop: asyncio.Event,
    wake: asyncio.Event,
    woken: Callable[[], object],
    *,
    settle: float,
) -> None:
    """Run a loop with a long period (one step, "step" in ``calls``) beside ``drive``, which sets
    ``wake`` and, in the end, ``stop``."""
    task = asyncio.ensure_future(drive)
    await asyncio.wait_for(
        loops.every(
            60,
            lambda: calls.append("step"),
            stop,
            what="a pass",
            log=log,
            wake=wake,
            woken=woken,
            settle=settle,
        ),
        5,
    )
    await task


async def test_a_wake_runs_the_woken_step_between_periodic_steps_after_it_settles() -> None:
    """The period goes on as before; each wake makes one woken run, ``settle`` after it, and a
    burst of wakes within that time makes one."""
    stop, wake = asyncio.Event(), asyncio.Event()
    calls: list[str] = []
    woke_at: list[float] = []
    loop = asyncio.get_running_loop()

    async def woken() -> None:
        calls.append("woken")
        woke_at.append(loop.time())

    async def drive() -> None:
        await asyncio.sleep(0.05)
        started = loop.time()
        for _ in range(5):  # a burst
            wake.set()
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.3)
        stop.set()
        assert woke_at and woke_at[0] - started >= 0.1

    await woken_loop(drive(), calls, stop, wake, woken, settle=0.1)
    assert calls == ["step", "woken"]


async def test_a_stop_while_settling_runs_nothing_more() -> None:
    stop, wake = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def drive() -> None:
        await asyncio.sleep(0.02)
        wake.set()
        await asyncio.sleep(0.02)
        stop.set()

    await woken_loop(drive(), calls, stop, wake, lambda: calls.append("woken"), settle=1.0)
    assert calls == ["step"]
