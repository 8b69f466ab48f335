"""The time-to-release study's figures (``bench/latency/room.py``): its percentiles are the usual
ones, and the table in docs/benchmarks/latency.md is what the code makes of the committed raw runs
(docs/benchmarks/room.json). The study itself runs, tiny, in tests/e2e/test_bench_room.py."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.latency import room

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"
BEGIN = "<!-- table written by python -m bench.latency.room (room.json) -->"
END = "<!-- end of the room table -->"

seconds = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)


@given(st.lists(seconds, min_size=1, max_size=60))
def test_the_median_is_the_median(values: list[float]) -> None:
    assert room.percentile(values, 0.5) == pytest.approx(statistics.median(values))


@given(st.lists(seconds, min_size=2, max_size=60))
def test_p95_is_statistics_inclusive_quantile(values: list[float]) -> None:
    expected = statistics.quantiles(values, n=20, method="inclusive")[18]
    assert room.percentile(values, 0.95) == pytest.approx(expected)
    assert min(values) <= room.percentile(values, 0.95) <= max(values)


def test_no_values_no_percentile() -> None:
    with pytest.raises(ValueError, match="no values"):
        room.percentile([], 0.5)


def run(trigger: str, size: int, bound: float) -> dict[str, object]:
    return {
        "trigger": trigger,
        "size": size,
        "room_after": 0.1,
        "first_ungated": bound / 4,
        "last_ungated": bound / 2,
        "last_bound": bound,
    }


def test_the_summary_is_per_trigger_and_size() -> None:
    runs = [run("node", 8, b) for b in (1.0, 2.0, 3.0)] + [run("finish", 64, 5.0)]
    rows = room.summary(runs)
    assert [(r["trigger"], r["size"], r["runs"]) for r in rows] == [
        ("finish", 64, 1),
        ("node", 8, 3),
    ]
    node = rows[1]
    assert (node["p50"], node["most"], node["first_ungated_p50"]) == (2.0, 3.0, 0.5)
    assert node["p95"] == pytest.approx(2.9)
    assert "| nodes turn Ready | 8 | 3 | 2.00 | 2.90 | 3.00 | 0.50 | 1.00 |" in room.table(rows)


def test_the_committed_table_is_the_committed_runs() -> None:
    raw = json.loads((DOCS / "room.json").read_text())
    text = (DOCS / "latency.md").read_text()
    block = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert block == room.table(room.summary(raw["runs"]))
    assert raw["summary"] == room.summary(raw["runs"])
