"""``bench.latency.room`` runs end to end, tiny (2-pod gangs, one run per trigger), on a control
plane of its own (its zones would clash with the session cluster's nodes): the gang is held, room
is made, podium releases it and it binds in the zone that got room. The figures are the
benchmark's, not asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.latency import room

pytestmark = pytest.mark.e2e


def test_the_study_runs_tiny(tmp_path: Path) -> None:
    rows = room.study(room.Spec(sizes=(2,), runs=1, triggers=room.TRIGGERS), tmp_path / "out")
    assert [(r["trigger"], r["size"], r["runs"]) for r in rows] == [
        ("finish", 2, 1),
        ("node", 2, 1),
    ]
    runs = json.loads((tmp_path / "out" / "room.json").read_text())["runs"]
    for row in runs:
        # (room is when the write that made it was answered, or seen: podium may act first)
        assert row["first_ungated"] <= row["last_ungated"] <= row["last_bound"], row
    (finish,) = [r for r in runs if r["trigger"] == "finish"]
    assert all(n.startswith("kwok-zone-a-") for n in finish["nodes"]), finish
    (node,) = [r for r in runs if r["trigger"] == "node"]
    assert all(n.startswith("new-node-2-0-") for n in node["nodes"]), node
