"""Run by `compare` inside a checked-out tree of any commit (its own ``webhook`` and ``bench``):
builds the throughput study's podium admitter in process, admits the later-pod reviews, then
answers each line ``N`` on stdin with the CPU µs per admission of N more. Written against the
old layout too (``bench.servers``/``bench.run`` before ``bench/throughput``)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ["PODIUM_BENCH_NO_FREEZE"] = "1"

try:
    from bench.throughput import servers
    from bench.throughput import study as bodies_of
except ImportError:  # the layout before bench/throughput (b1da935)
    from bench import run as bodies_of  # type: ignore[no-redef, attr-defined]
    from bench import servers  # type: ignore[no-redef, attr-defined]


def main(nodes: int, chooser: str, scratch: Path) -> None:
    admitter: Any = servers.podium_app(nodes).admitter
    if chooser:
        from webhook.core.settings import ZoneChooser  # noqa: PLC0415 - a newer tree's only

        admitter.settings = dataclasses.replace(
            admitter.settings, zone_chooser=ZoneChooser(chooser)
        )
    later = Path(bodies_of.write_bodies(scratch)["later"]).read_bytes().splitlines()
    loop = asyncio.new_event_loop()

    async def admit(n: int) -> Any:
        answer = None
        for i in range(n):
            answer = await admitter.admit(later[i % len(later)])
        return answer

    last = loop.run_until_complete(admit(len(later) * 8))  # records and policies exist now
    entry = getattr(last, "entry", None) or {}
    print("ready", entry.get("outcome"), entry.get("reason"), flush=True)
    for line in sys.stdin:
        n = int(line)
        started = time.process_time()
        loop.run_until_complete(admit(n))
        print((time.process_time() - started) / n * 1e6, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
