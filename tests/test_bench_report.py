"""The throughput study's report: the committed tables are what the report code makes of the
committed numbers, and a load target counts as met only where it holds at every concurrency."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from bench.throughput import report

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


def _results() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / "results.json").read_text())
    return data


def test_the_committed_tables_are_rendered_from_the_committed_numbers() -> None:
    assert report.markdown(_results()) == (RESULTS / "results.md").read_text()


def test_the_readme_shows_the_committed_tables() -> None:
    readme = (RESULTS / "README.md").read_text()
    assert report.MARKERS.embed(readme, (RESULTS / "results.md").read_text()) == readme


def _set_rps(results: dict[str, Any], server: str, rps: dict[int, float]) -> None:
    for conns, value in rps.items():
        results["load"][server][f"later-c{conns}"]["rps"] = value


def test_a_load_target_is_met_only_at_every_concurrency() -> None:
    results = copy.deepcopy(_results())
    _set_rps(results, "limit", {1: 1000, 4: 1000, 16: 1000})
    _set_rps(results, "kopf", {1: 100, 4: 100, 16: 100})
    _set_rps(results, "podium", {1: 400, 4: 400, 16: 300})
    met = {name: ok for name, _, ok in report.targets(results)}
    limit_target = next(n for n in met if "bare-ASGI limit" in n)
    kopf_target = next(n for n in met if "kopf" in n)
    assert (met[limit_target], met[kopf_target]) == (False, True)
    _set_rps(results, "podium", {1: 400, 4: 400, 16: 350})
    met = {name: ok for name, _, ok in report.targets(results)}
    assert met[limit_target] is True


def test_the_scale_phase_decides_the_pods_it_times_as_it_says() -> None:
    """The scale phase asserts each timed admission's reason (a later pod recorded, a first pod
    pinned best-fit): a change of podium's default mode must not break `python -m bench`."""
    from bench.throughput import scale  # noqa: PLC0415 (tracemalloc and a view: only here)

    (row,) = scale.measure_all((10,), pods_per_node=2, runs=2)
    assert row["nodes"] == 10
