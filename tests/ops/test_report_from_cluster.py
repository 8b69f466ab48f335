"""``podium report --from-cluster``: podium's Reports read back from the cluster (the API twin
holding what the builder wrote), with no logs: a row per job in 80 columns, ``-o wide`` with the
rule and message, json and yaml; exit 1 when a job runs in several zones, 2 without Reports or
without the CRD; the log-reading report is unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.core.test_reports import SHADOW, cluster, enforced_job, shadow_job
from tests.ops.test_cli_conventions import widest
from tests.scenarios import NS
from webhook.core import reports
from webhook.core.settings import Settings
from webhook.kube import twins
from webhook.ops import cli, cli_options, output

runner = CliRunner()


class _Closable:
    def close(self) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> twins.InMemoryObjects:
    objects = twins.InMemoryObjects()
    bodies = reports.build(
        cluster(*shadow_job("split-job", ["a-1", "b-1"]), *enforced_job("kept", ["c-1", "c-2"])),
        Settings(),
    )
    for body in bodies.values():
        objects.put(body)
    monkeypatch.setattr(cli_options, "connect_cluster", lambda *_: (_Closable(), objects))
    return objects


def invoke(*args: str) -> Any:
    return runner.invoke(cli.app, ["report", "--from-cluster", *args])


def test_a_row_per_job_in_80_columns(api: twins.InMemoryObjects) -> None:
    result = invoke()
    assert result.exit_code == output.FINDINGS, result.output  # the split shadow job
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "MODE", "JOB", "RESULT", "ZONES", "AGE"]
    rows = {line.split()[2]: line.split() for line in lines[1:] if "PyTorchJob/" in line}
    assert rows["PyTorchJob/split-job"][:6] == [
        SHADOW,
        "shadow",
        "PyTorchJob/split-job",
        "fail",
        "zone-a:1,",
        "zone-b:1",
    ]
    assert rows["PyTorchJob/kept"][:5] == [NS, "enforce", "PyTorchJob/kept", "pass", "zone-c:2"]
    assert "1 job(s) run in more than one zone" in result.stdout
    assert widest(result.stdout) <= output.TABLE_WIDTH


def test_wide_adds_the_rule_and_the_message(api: twins.InMemoryObjects) -> None:
    result = invoke("-o", "wide")
    assert "would-keep-together" in result.stdout
    assert "podium would have kept the gang in one zone" in result.stdout


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml(api: twins.InMemoryObjects, fmt: str) -> None:
    result = invoke("-o", fmt, "-n", SHADOW)
    doc = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert doc["summary"]["fail"] == 1 and len(doc["results"]) == 1
    assert doc["results"][0]["job"] == "PyTorchJob/split-job"
    assert doc["results"][0]["zones"] == "zone-a=1,zone-b=1"


def test_a_namespace_without_split_jobs_exits_0(api: twins.InMemoryObjects) -> None:
    result = invoke("-n", NS)
    assert result.exit_code == 0, result.output
    assert "PyTorchJob/kept" in result.stdout and SHADOW not in result.stdout


def test_no_report_and_no_crd_are_said_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    empty = twins.InMemoryObjects()
    monkeypatch.setattr(cli_options, "connect_cluster", lambda *_: (_Closable(), empty))
    result = invoke("-n", "ml")
    assert result.exit_code == 2
    assert "no Report of podium's in namespace ml" in result.stderr
    empty.missing_kinds.add("Report")
    result = invoke()
    assert result.exit_code == 2
    assert "the cluster serves no openreports.io/v1alpha1 Report" in result.stderr
    assert "Traceback" not in result.output


def test_files_and_from_cluster_together_are_refused(tmp_path: Any) -> None:
    trail = tmp_path / "audit.jsonl"
    trail.write_text("")
    result = invoke(str(trail))
    assert result.exit_code == 2
    assert "give one or the other" in result.stderr
