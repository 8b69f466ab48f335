"""The audit record and its pure ``build`` (``webhook.core.audit``)."""

from __future__ import annotations

import json
from datetime import datetime

from tests.scenarios import audit_entry_for, base_cluster, pytorch_pod, pytorchjob


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
