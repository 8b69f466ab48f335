"""The audit trail: records, sinks, and ``podium audit``."""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from webhook import audit, engine, reviews
from webhook.cli import app
from webhook.settings import Settings
from webhook.snapshot import Snapshot

runner = CliRunner()


def record_for(
    pod: dict[str, Any], objects: list[dict[str, Any]], now: datetime
) -> audit.AuditRecord:
    request = reviews.from_document(reviews.review_for_pod(pod, uid="r-1"))
    view = Snapshot.from_objects(objects, zone_label="topology.kubernetes.io/zone")
    decision = engine.decide(request, view, Settings(), now=now)
    return audit.build(
        request=request,
        decision=decision,
        time=now,
        latency_ms=1.23456,
        effects=[{"kind": "ConfigMap", "name": "x", "outcome": "created"}],
    )


def test_record_has_every_field(now: datetime) -> None:
    pj = pytorchjob()
    rec = record_for(pytorch_pod(pj, "master").obj(), base_cluster(pj), now)
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


def test_sinks_write_one_line_per_record(tmp_path: Path, now: datetime) -> None:
    pj = pytorchjob()
    rec = record_for(pytorch_pod(pj).obj(), base_cluster(pj), now)
    stream = io.StringIO()
    path = tmp_path / "audit.jsonl"
    audit.FanOut([audit.StreamSink(stream), audit.FileSink(path)]).write(rec)
    audit.FileSink(path).write(rec)
    assert stream.getvalue().count("\n") == 1
    assert [json.loads(line) for line in path.read_text().splitlines()] == [rec, rec]


def test_read_skips_foreign_lines_and_prefixes(now: datetime) -> None:
    pj = pytorchjob()
    rec = record_for(pytorch_pod(pj).obj(), base_cluster(pj), now)
    lines = [
        "INFO starting",
        "{broken json",
        '{"audit": "other"}',
        "[pod/podium-abc/podium] " + json.dumps(rec),
        json.dumps(rec),
    ]
    assert list(audit.read(lines)) == [rec, rec]


def _trail(tmp_path: Path, now: datetime) -> Path:
    pj, other = pytorchjob(), pytorchjob("other", workers=0)
    recs = [
        record_for(pytorch_pod(pj, "master").obj(), base_cluster(pj), now),
        record_for(pytorch_pod(pj, "worker", 0).obj(), base_cluster(pj), now),
        record_for(pytorch_pod(other).obj(), base_cluster(other), now),
    ]
    recs[1] = {**recs[1], "zone": "zone-b"}  # a split job, for the summary to flag
    path = tmp_path / "audit.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_audit_command_table_and_summary(tmp_path: Path, now: datetime) -> None:
    result = runner.invoke(app, ["audit", str(_trail(tmp_path, now))])
    assert result.exit_code == 0, result.output
    assert "podium admissions (3)" in result.stdout and "per job (2)" in result.stdout
    assert "SPLIT across zones" in result.stdout


def test_audit_command_filters_and_json(tmp_path: Path, now: datetime) -> None:
    path = _trail(tmp_path, now)
    result = runner.invoke(
        app, ["audit", str(path), "--job", "llama", "--zone", "zone-c", "-o", "json"]
    )
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["job"]["name"], r["zone"]) for r in rows] == [("llama", "zone-c")]
    result = runner.invoke(
        app, ["audit", "-o", "json", "--job", "PyTorchJob/other"], input=path.read_text()
    )
    assert [json.loads(line)["job"]["name"] for line in result.stdout.splitlines()] == ["other"]


def test_audit_command_bad_arguments(tmp_path: Path) -> None:
    assert runner.invoke(app, ["audit", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["audit", "-o", "xml"], input="").exit_code == 2


def test_fan_out_reaches_every_sink_when_one_fails(tmp_path: Path, now: datetime) -> None:
    class Broken:
        def write(self, record: audit.AuditRecord) -> None:
            raise OSError("stdout closed")

    pj = pytorchjob()
    rec = record_for(pytorch_pod(pj).obj(), base_cluster(pj), now)
    path = tmp_path / "audit.jsonl"
    fan = audit.FanOut([Broken(), audit.FileSink(path)])
    try:
        fan.write(rec)
    except OSError as err:
        assert str(err) == "stdout closed"
    else:
        raise AssertionError("the failure was swallowed")
    assert [json.loads(line) for line in path.read_text().splitlines()] == [rec]
