"""Where audit entries go: JSON lines to stdout, a file, or a writer thread that keeps
admissions from waiting on either.

The entry itself and its pure ``build`` are ``webhook.core.audit``. Reading entries back for
people is ``webhook.ops.auditview`` (``podium audit``), so the admission path never loads a table
renderer.
"""

from __future__ import annotations

import collections
import json
import logging
import sys
import threading
import time as clock
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Protocol

import orjson

from webhook.core.audit import AuditEntry

log = logging.getLogger("podium.audit")


def dumps(entry: AuditEntry) -> bytes:
    """orjson, or the stdlib for what orjson refuses (integers past 64 bits in a silly request)."""
    try:
        return orjson.dumps(entry)
    except TypeError:
        return json.dumps(entry, default=str).encode()


class Sink(Protocol):
    def write(self, entry: AuditEntry) -> None: ...

    def write_lines(self, data: bytes) -> None:
        """Write entries already serialized: JSON lines (``line``), each ending in a newline."""
        ...


def line(entry: AuditEntry) -> bytes:
    return dumps(entry) + b"\n"


class LineSink:
    """A sink whose one way of writing is ``write_lines``: an entry is written as its line."""

    def write(self, entry: AuditEntry) -> None:
        self.write_lines(line(entry))

    def write_lines(self, data: bytes) -> None:
        raise NotImplementedError


class StreamSink(LineSink):
    """JSON lines to a stream (stdout by default), one write per call: lines never interleave."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write_lines(self, data: bytes) -> None:
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(data.decode())
            stream.flush()


class FileSink(LineSink):
    """Appends JSON lines to a file (opened per call: survives log rotation by rename)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write_lines(self, data: bytes) -> None:
        with self._lock, self.path.open("ab") as fh:
            fh.write(data)


class MemorySink:
    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []

    def write(self, entry: AuditEntry) -> None:
        self.entries.append(entry)

    def write_lines(self, data: bytes) -> None:
        self.entries.extend(orjson.loads(text) for text in data.splitlines())


class FanOut(LineSink):
    def __init__(self, sinks: Iterable[Sink]) -> None:
        self.sinks = tuple(sinks)

    def write_lines(self, data: bytes) -> None:
        """Every sink gets the lines even when another one fails; the first failure is raised."""
        failure: Exception | None = None
        for sink in self.sinks:
            try:
                sink.write_lines(data)
            except Exception as err:
                failure = failure or err
        if failure is not None:
            raise failure


#: Entries waiting for the writer thread; beyond this, new entries are dropped and counted.
BACKLOG = 10_000
#: Seconds between the writer thread's rounds. Waking it for every entry instead costs an
#: admission more than the write itself (a thread switch per admission; docs/benchmarks).
INTERVAL = 0.05
#: At most one log line per this many seconds says how many entries were dropped.
DROP_LOG_SECONDS = 10.0


class BackgroundSink(LineSink):
    """Hands entries to a writer thread, so that no admission waits for stdout or a disk.

    ``podium serve`` writes audit lines to stdout, a pipe the container runtime drains; when it
    stops draining, a direct write blocks the event loop and every admission behind it until the
    apiserver gives up (fail open, *without* an audit line). Here ``write`` serializes the entry
    and appends the line to a bounded backlog; every ``interval`` seconds the thread writes what
    has gathered in one batch (one ``write`` and one flush for many entries under load). A full
    backlog drops the new entry, calls ``on_drop`` (``podium_audit_dropped``) and says so on
    stderr at most every ``DROP_LOG_SECONDS``, as the apiserver's own buffered audit backend
    does. ``close`` writes what is left.
    """

    def __init__(
        self,
        inner: Sink,
        *,
        backlog: int = BACKLOG,
        interval: float = INTERVAL,
        on_drop: Callable[[], None] = lambda: None,
    ) -> None:
        self._inner = inner
        self._interval = interval
        self._backlog = backlog
        self._on_drop = on_drop
        self._queue: collections.deque[bytes] = collections.deque()
        self._wake = threading.Condition()
        self._closed = False
        self._dropped = 0
        self._drop_logged = float("-inf")
        self._thread = threading.Thread(target=self._run, name="podium-audit", daemon=True)
        self._thread.start()

    def write_lines(self, data: bytes) -> None:
        # ``write`` serializes here, a little at every admission, rather than a whole batch at
        # once in the thread while it holds the GIL.
        if self._closed:  # nothing left to hand it to: write it here
            self._inner.write_lines(data)
        elif len(self._queue) >= self._backlog:
            self._drop()
        else:  # no wake-up: the thread comes by every ``interval`` seconds
            self._queue.append(data)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (waiting at most ``timeout`` seconds) and stop the thread."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error(
                "audit writer still busy after %.0f s; %d records unwritten",
                timeout,
                len(self._queue),
            )

    def _drop(self) -> None:
        self._dropped += 1
        self._on_drop()
        now = clock.monotonic()
        if now - self._drop_logged >= DROP_LOG_SECONDS:
            log.error(
                "the audit backlog of %d records is full: %d record(s) dropped since the last "
                "report; is stdout (or the audit file) being read?",
                self._backlog,
                self._dropped,
            )
            self._drop_logged = now
            self._dropped = 0

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._closed:
                    self._wake.wait(self._interval)
                if self._closed and not self._queue:
                    return
            if not self._queue:
                continue
            batch = [self._queue.popleft() for _ in range(len(self._queue))]
            try:
                self._inner.write_lines(b"".join(batch))
            except Exception:  # the thread must outlive a failed write
                log.exception("audit sink failed; %d records lost", len(batch))
