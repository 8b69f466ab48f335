"""``podium audit``'s per-job verdict for held gangs (issue 29 item 6): a gang the releaser last
said no zone could ever hold is not "waiting for one zone with room" — it waits for an admin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from webhook.core import audit
from webhook.ops import auditview

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
JOB: audit.JobRef = {"kind": "PyTorchJob", "name": "huge", "uid": "u-1", "gang": "u-1"}


def admitted(at: datetime) -> dict[str, object]:
    """The admission that held a pod (reason ``held``, no releaser action)."""
    return {
        "time": at.isoformat(),
        "namespace": "ml",
        "outcome": "held",
        "reason": "held",
        "job": dict(JOB),
        "pod": "huge-worker-0",
    }


def said(at: datetime, reason: str) -> dict[str, object]:
    entry = audit.held(
        time=at,
        namespace="ml",
        job=JOB,
        reason=reason,
        detail="…",
        result="not ready",
        pods=["huge-worker-0"],
        waited_seconds=1,
    )
    return dict(entry)


def verdict(*entries: dict[str, object], wide: bool = True) -> tuple[str, str]:
    """The gang's verdict, and its cell in the table (``-o wide``: the sentence)."""
    summary = auditview.summarize(entries)
    (gang,) = summary.gangs
    table = auditview.summary(summary, plain=True, wide=wide)
    (cell,) = table.columns[-1].cells
    return gang.verdict, str(cell)


def test_a_gang_no_zone_can_hold_waits_for_an_admin_not_for_room() -> None:
    found = verdict(admitted(T0), said(T0 + timedelta(seconds=2), "too-big"))
    assert found[0] == auditview.TOO_BIG
    assert "no zone can ever hold it" in found[1] and "one zone with room" not in found[1]
    assert verdict(admitted(T0), said(T0, "too-big"), wide=False)[1] == "too-big"


def test_a_gang_waiting_for_room_still_says_so() -> None:
    found = verdict(admitted(T0), said(T0 + timedelta(seconds=2), "held"))
    waiting = "held: waiting for one zone with room (podium doctor says why)"
    assert found == (auditview.HELD, waiting)
    assert verdict(admitted(T0), said(T0, "held"), wide=False)[1] == "held"


def test_the_latest_word_counts() -> None:
    """A node joined: the gang that could not fit now waits for room like any other."""
    later = T0 + timedelta(minutes=5)
    assert verdict(admitted(T0), said(T0, "too-big"), said(later, "held"))[0] == auditview.HELD
    assert verdict(admitted(T0), said(T0, "held"), said(later, "too-big"))[0] == auditview.TOO_BIG
    assert verdict(admitted(T0))[0] == auditview.HELD  # the admission alone: nothing said yet
