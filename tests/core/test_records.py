"""podium's decision records read back: what ``policies.build_record`` writes, ``records``
reads, and nothing podium did not write."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core import labels, records

GANG = "3f1c2b5e-0000-4000-8000-000000000001"


def record_object(**data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "podium-pytorchjob-llama-1a2b3c4d",
            "namespace": "team-a",
            "labels": {labels.MANAGED_BY: labels.MANAGER, labels.COMPONENT: "decision"},
        },
        "data": {
            "zone": "zone-a",
            "reason": "best-fit",
            "gang": GANG,
            "decidedAt": "2026-03-01T12:00:00+00:00",
            "demand": '{"nvidia.com/gpu":32,"pods":4}',
            **data,
        },
    }


def test_a_record_parses_into_its_decision() -> None:
    assert records.parse_record(record_object()) == records.Record(
        zone="zone-a",
        reason="best-fit",
        gang=GANG,
        decided_at="2026-03-01T12:00:00+00:00",
        demand={"nvidia.com/gpu": 32, "pods": 4},
    )


def test_an_unpinned_record_has_no_zone_and_a_bad_demand_reads_as_none() -> None:
    parsed = records.parse_record(record_object(zone="", demand="[1, 2]"))
    assert parsed is not None
    assert (parsed.zone, parsed.demand) == (None, {})


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r["metadata"]["labels"].pop(labels.MANAGED_BY),  # not podium's
        lambda r: r["data"].pop("gang"),
        lambda r: r["data"].update(gang=7),
    ],
)
def test_what_podium_did_not_write_is_no_record(change: Any) -> None:
    obj = record_object()
    change(obj)
    assert records.parse_record(obj) is None


def test_read_record_answers_only_for_its_own_gang() -> None:
    obj = record_object()
    assert records.read_record(obj, GANG) == records.parse_record(obj)
    assert records.read_record(obj, "another-gang") is None
    assert records.read_record(None, GANG) is None


def test_read_record_takes_the_callers_parse() -> None:
    """The engine passes the view's memo (``ClusterView.derived``) in."""
    seen: list[Any] = []

    def parse(obj: Any) -> records.Record | None:
        seen.append(obj)
        return records.parse_record(obj)

    obj = record_object()
    assert records.read_record(obj, GANG, parse=parse) is not None
    assert seen == [obj]
