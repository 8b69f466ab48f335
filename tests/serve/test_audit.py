"""The audit trail: records and sinks (reading them back: tests/ops/test_auditview.py)."""

from __future__ import annotations

import io
import json
import logging
import threading
from datetime import datetime
from pathlib import Path

import pytest

from tests.scenarios import audit_entry_for, base_cluster, pytorch_pod, pytorchjob
from webhook.core.audit import MARKER, AuditEntry
from webhook.serve import audit
from webhook.serve.metrics import Metrics


def test_sinks_write_one_line_per_record(tmp_path: Path, now: datetime) -> None:
    pj = pytorchjob()
    rec = audit_entry_for(pytorch_pod(pj).obj(), base_cluster(pj), now)
    stream = io.StringIO()
    path = tmp_path / "audit.jsonl"
    audit.FanOut([audit.StreamSink(stream), audit.FileSink(path)]).write(rec)
    audit.FileSink(path).write(rec)
    assert stream.getvalue().count("\n") == 1
    assert [json.loads(line) for line in path.read_text().splitlines()] == [rec, rec]


def test_fan_out_reaches_every_sink_when_one_fails(tmp_path: Path, now: datetime) -> None:
    class Broken:
        def write(self, record: AuditEntry) -> None:
            raise OSError("stdout closed")

        def write_lines(self, data: bytes) -> None:
            raise OSError("stdout closed")

    pj = pytorchjob()
    rec = audit_entry_for(pytorch_pod(pj).obj(), base_cluster(pj), now)
    path = tmp_path / "audit.jsonl"
    fan = audit.FanOut([Broken(), audit.FileSink(path)])
    try:
        fan.write(rec)
    except OSError as err:
        assert str(err) == "stdout closed"
    else:
        raise AssertionError("the failure was swallowed")
    assert [json.loads(line) for line in path.read_text().splitlines()] == [rec]


# -- the writer thread ---------------------------------------------------------------------------


class Stalled:
    """A sink whose writes wait for ``release``, like stdout nobody drains; ``entered`` is set
    when a write has begun (the writer thread has taken that batch off its queue)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.batches: list[list[AuditEntry]] = []

    def write(self, record: AuditEntry) -> None:
        self.write_lines(audit.line(record))

    def write_lines(self, data: bytes) -> None:
        self.entered.set()
        assert self.release.wait(30), "the test never released the sink"
        self.batches.append([json.loads(text) for text in data.splitlines()])

    @property
    def records(self) -> list[AuditEntry]:
        return [r for batch in self.batches for r in batch]


def numbered(n: int) -> list[AuditEntry]:
    return [{"audit": MARKER, "requestUID": f"r-{i}"} for i in range(n)]


def writes_from_another_thread(sink: audit.Sink, records: list[AuditEntry]) -> bool:
    """Whether ``sink.write`` of every record returned (a blocked one would hang the test)."""
    writer = threading.Thread(target=lambda: [sink.write(r) for r in records], daemon=True)
    writer.start()
    writer.join(10)
    return not writer.is_alive()


def test_background_sink_does_not_wait_for_a_stalled_stream() -> None:
    stalled = Stalled()
    sink = audit.BackgroundSink(stalled)
    records = numbered(50)
    assert writes_from_another_thread(sink, records)
    assert stalled.records == []  # nothing got through, yet nobody waited
    stalled.release.set()
    sink.close()
    assert stalled.records == records  # all of them, in order
    assert len(stalled.batches) < len(records)  # what gathered went out together


def test_background_sink_drops_new_records_past_its_backlog(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stalled = Stalled()
    dropped: list[None] = []
    sink = audit.BackgroundSink(stalled, backlog=3, on_drop=lambda: dropped.append(None))
    records = numbered(10)
    sink.write(records[0])
    assert stalled.entered.wait(10)  # the thread holds record 0 and is stuck writing it
    with caplog.at_level(logging.ERROR, logger="podium.audit"):
        assert writes_from_another_thread(sink, records[1:])
    assert len(dropped) == 6  # records 1-3 fill the backlog; 4-9 are dropped
    assert [r.message for r in caplog.records] == [
        "the audit backlog of 3 records is full: 1 record(s) dropped since the last report; "
        "is stdout (or the audit file) being read?"
    ]  # one line, not one per record
    stalled.release.set()
    sink.close()
    assert stalled.records == records[:4]


def test_background_sink_survives_a_failing_sink(caplog: pytest.LogCaptureFixture) -> None:
    class FailsOnce:
        def __init__(self) -> None:
            self.records: list[AuditEntry] = []
            self.failed = False

        def write(self, record: AuditEntry) -> None:
            self.write_lines(audit.line(record))

        def write_lines(self, data: bytes) -> None:
            if not self.failed:
                self.failed = True
                raise OSError("disk full")
            self.records.extend(json.loads(text) for text in data.splitlines())

    inner = FailsOnce()
    sink = audit.BackgroundSink(inner)
    first, second = numbered(2)
    with caplog.at_level(logging.ERROR, logger="podium.audit"):
        sink.write(first)
        sink.close()  # waits for the thread: the failed batch has been attempted
    assert "audit sink failed; 1 records lost" in caplog.text
    sink.write(second)  # after close: written directly
    assert inner.records == [second]


def test_background_sink_close_writes_what_is_queued(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = audit.BackgroundSink(audit.FileSink(path))
    records = numbered(200)
    for r in records:
        sink.write(r)
    sink.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == records


def test_background_sink_drops_are_counted_in_the_metrics() -> None:
    stalled, meter = Stalled(), Metrics()
    sink = audit.BackgroundSink(stalled, backlog=1, on_drop=meter.audit_dropped.inc)
    first, second, third = numbered(3)
    sink.write(first)
    assert stalled.entered.wait(10)
    sink.write(second)  # queued
    sink.write(third)  # dropped
    stalled.release.set()
    sink.close()
    assert b"podium_audit_dropped_total 1.0" in meter.render()
    assert stalled.records == [first, second]
