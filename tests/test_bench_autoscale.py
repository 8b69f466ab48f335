"""``bench.autoscale``'s table (the arms themselves need the control plane and Karpenter: run
``python -m bench.autoscale``, not a test)."""

from __future__ import annotations

import pytest

from bench import autoscale


def result(arm: str, until: float | None, bound: int, zones: list[str]) -> dict[str, object]:
    return {
        "arm": arm,
        "pods": 4,
        "secondsUntilAllBound": until,
        "bound": bound,
        "nodeClaimsPerZone": {"zone-a": 3, "zone-b": 0},
        "zonesUsed": zones,
        "idleGpuHours": 0.0125,
    }


def test_the_table_has_a_row_per_arm_and_says_when_a_gang_never_ran() -> None:
    rows = autoscale.table(
        [result("buffers", 41.2, 4, ["zone-a"]), result("hold-timeout", None, 0, [])]
    ).splitlines()
    assert rows[0].startswith("| arm | time until all pods run")
    assert rows[2] == "| buffers | 41.2 | zone-a: 3, zone-b: 0 | zone-a | 0.0125 |"
    assert (
        rows[3] == "| hold-timeout | not all: 0 of 4 bound | zone-a: 3, zone-b: 0 | none | 0.0125 |"
    )


def test_unknown_arms_are_refused() -> None:
    with pytest.raises(SystemExit):
        autoscale.main(["--arms", "buffers,kueue"])
