"""The audit entry and its pure builders, one per source (``webhook.core.audit``)."""

from __future__ import annotations

import json
import pathlib
from datetime import datetime
from typing import Any

import orjson
import pytest

from tests.scenarios import audit_entry_for, base_cluster, pytorch_pod, pytorchjob
from webhook.core import audit


def test_record_has_every_field(now: datetime) -> None:
    pj = pytorchjob()
    rec = audit_entry_for(pytorch_pod(pj, "master").obj(), base_cluster(pj), now)
    assert set(rec) == {
        "audit",
        "time",
        "requestUID",
        "operation",
        "namespace",
        "pod",
        "user",
        "outcome",
        "reason",
        "detail",
        "job",
        "role",
        "coordinator",
        "zone",
        "capacity",
        "patch",
        "effects",
        "warnings",
        "dryRun",
        "latencyMs",
    }
    assert rec["job"] == {
        "framework": "pytorchjob",
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "llama",
        "uid": pj["metadata"]["uid"],
        "gang": pj["metadata"]["uid"],
        "demand": {"nvidia.com/gpu": 32, "pods": 4},
        "demandSource": "job",
    }
    assert (rec["role"], rec["coordinator"], rec["zone"], rec["latencyMs"]) == (
        "master",
        True,
        "zone-c",
        1.235,
    )
    assert rec["patch"]["ops"] >= 3 and "/spec/affinity" in rec["patch"]["paths"]
    assert [c["zone"] for c in rec["capacity"]] == ["zone-a", "zone-b", "zone-c"]
    json.dumps(rec)  # serialisable as it is


# -- one builder per source, each writing the line that source always wrote --------------------
#
# ``tests/audit_entries.golden`` holds the lines each source wrote before it had its own builder
# (``tests/serve/test_audit_entries.py`` makes them through the releaser, the reconciler and the
# guard). Each builder, handed what such a line says, writes that very line.

GOLDEN = pathlib.Path(__file__).parent.parent / "audit_entries.golden"


def golden(prefix: str) -> list[tuple[str, bytes]]:
    lines = []
    for line in GOLDEN.read_bytes().splitlines():
        case, _, entry = line.partition(b"\t")
        if case.decode().startswith(prefix):
            lines.append((case.decode(), entry))
    assert lines, prefix
    return lines


def when(line: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(line["time"])


def test_an_admission_entry_is_the_line_admissions_always_wrote(now: datetime) -> None:
    ((_, expected),) = golden("admission")
    pj = pytorchjob(uid="uid-llama")
    pod = pytorch_pod(pj, "master").uid("uid-llama-0").obj()
    entry = audit_entry_for(pod, base_cluster(pj), now)
    assert orjson.dumps({**entry, "latencyMs": 1.5}) == expected


@pytest.mark.parametrize(("case", "expected"), golden("released"))
def test_a_release_entry_is_the_line_releases_always_wrote(case: str, expected: bytes) -> None:
    line = orjson.loads(expected)
    entry = audit.released(
        time=when(line),
        namespace=line["namespace"],
        job=line["job"],
        zone=line["zone"],
        user=line["user"],
        reason=line["reason"],
        detail=line["detail"],
        effects=line["effects"],
        pods=line["pods"],
        waited_seconds=line["waitedSeconds"],
        latency_ms=line["latencyMs"],
        error=line.get("error"),
    )
    assert orjson.dumps(entry) == expected, case


@pytest.mark.parametrize(("case", "expected"), golden("held"))
def test_a_wait_entry_is_the_line_waits_always_wrote(case: str, expected: bytes) -> None:
    line = orjson.loads(expected)
    entry = audit.held(
        time=when(line),
        namespace=line["namespace"],
        job=line["job"],
        reason=line["reason"],
        detail=line["detail"],
        result=line["result"],
        pods=line["pods"],
        waited_seconds=line["waitedSeconds"],
    )
    assert orjson.dumps({**entry, "latencyMs": 1.5}) == expected, case


#: How the reconciler's ``result`` words read back as the writer's outcomes.
OUTCOMES = {o.value: o for o in audit.EffectOutcome} | {
    audit.RECONCILE_KIND_MISSING: audit.EffectOutcome.KIND_MISSING
}


@pytest.mark.parametrize(("case", "expected"), golden("reconcile"))
def test_a_reconcile_entry_is_the_line_the_reconciler_always_wrote(
    case: str, expected: bytes
) -> None:
    line = orjson.loads(expected)
    (effect,) = line["effects"]
    result = line["result"]
    failed = result.startswith("failed: ")
    entry = audit.reconciled(
        time=when(line),
        latency_ms=line["latencyMs"],
        action=line["action"],
        reason=line["reason"],
        detail=line["detail"],
        target=(effect["kind"], effect["namespace"], effect["name"]),
        job=line["job"],
        outcome=audit.EffectOutcome.FAILED if failed else OUTCOMES[result],
        error=line.get("error"),
    )
    assert orjson.dumps(entry) == expected, case


@pytest.mark.parametrize(("case", "expected"), golden("guard"))
def test_a_guard_entry_is_the_line_the_guard_always_wrote(case: str, expected: bytes) -> None:
    line = orjson.loads(expected)
    entry = audit.guarded(
        time=when(line), reason=line["reason"], detail=line["detail"], warnings=line["warnings"]
    )
    assert orjson.dumps({**entry, "latencyMs": 1.5}) == expected, case


def test_every_effect_outcome_is_one_word_and_a_failure_reads_failed() -> None:
    words = [o.value for o in audit.EffectOutcome]
    assert len(set(words)) == len(words)
    assert audit.failed("403: forbidden") == "failed: 403: forbidden"
    assert audit.RECONCILE_KIND_MISSING not in words
