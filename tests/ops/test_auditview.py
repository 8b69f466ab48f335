"""``podium audit``: reading podium's records back from log lines, filters, table and summary."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from typer.testing import CliRunner

from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from tests.serve.test_audit import record_for
from webhook.ops import auditview
from webhook.ops.cli import app

runner = CliRunner()


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
    assert list(auditview.read(lines)) == [rec, rec]


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
