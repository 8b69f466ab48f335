"""podium's alerts under Prometheus' own tools: ``promtool check rules`` on the rules file and on
the PrometheusRule the chart renders, and ``promtool test rules`` on rules-test.yaml (each alert
firing where it should and silent where it should not) — which fails when a rule is broken."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.monitoring.test_rules import RULES
from tests.test_chart import MONITORING, chart, helm_binary

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
RULE_TESTS = HERE / "rules-test.yaml"


def run(promtool: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )


def test_promtool_accepts_the_rules(promtool: Path) -> None:
    result = run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    rules = sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    assert f"SUCCESS: {rules} rules found" in result.stdout


def test_promtool_accepts_the_rules_the_chart_renders(promtool: Path, tmp_path: Path) -> None:
    objects = chart(helm_binary(), *MONITORING)
    rule = objects[("PrometheusRule", "podium-system", "podium")]
    rendered = tmp_path / "rendered-rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    result = run(promtool, "check", "rules", str(rendered))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_passes_its_unit_tests(promtool: Path) -> None:
    result = run(promtool, "test", "rules", str(RULE_TESTS))
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("broken", "fix"),
    [
        ("> 0.05", "> 0.5"),  # a fail-open threshold ten times too high
        ("for: 1h", "for: 2h"),  # gangs held twice as long before anyone hears
        ("podium_gangs_split) > 0", "podium_gangs_split) > 2"),
        ("podium_gangs_too_big) > 0", "podium_gangs_too_big) > 1"),  # one such gang unheard
        ("for: 30m", "for: 60m"),  # the autoscaler's silence heard an hour late
    ],
    ids=["fail-open-threshold", "held-for", "split-threshold", "too-big-threshold", "buffers-for"],
)
def test_a_broken_rule_fails_its_unit_tests(
    promtool: Path, tmp_path: Path, broken: str, fix: str
) -> None:
    rules = RULES.read_text()
    assert broken in rules
    (tmp_path / "rules.yaml").write_text(rules.replace(broken, fix, 1))
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tests["rule_files"] = ["rules.yaml"]
    (tmp_path / "rules-test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = run(promtool, "test", "rules", "rules-test.yaml", cwd=tmp_path)
    assert result.returncode != 0, result.stdout
    output = result.stdout + result.stderr
    # An alert that did not fire (or fired) where its test says otherwise — not a file promtool
    # could not read.
    assert "FAILED" in output and "alertname:" in output and "unmarshal" not in output, output
