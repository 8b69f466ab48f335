"""The server's one periodic loop (webhook/serve/loops.py)."""

from __future__ import annotations

import asyncio
import logging

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
