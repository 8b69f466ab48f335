"""podium's alerts and dashboard (charts/podium/files/): every metric they query is one podium
exports (read from the registry of webhook/serve/metrics.py, not from a list), every alert says
what it is about and links its runbook in docs/operations.md. promtool's own checks and a unit
test per alert are in test_promtool.py (they need the built promtool)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.monitoring import promql

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "charts" / "podium" / "files"
RULES = FILES / "prometheus-rules.yaml"
DASHBOARD = FILES / "grafana-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"
RUNBOOKS = "https://github.com/podium-dev/podium/blob/main/docs/operations.md#"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):  # Grafana's label_values(metric, label), not PromQL
            exprs += re.findall(r"label_values\((\w+)\s*,", query["query"])
    return exprs


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_metric_the_alerts_query_is_exported() -> None:
    exported = promql.exported_names()
    assert promql.unknown_metrics([a["expr"] for a in alerts()], exported) == {}


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    queries = dashboard_queries()
    assert len(queries) > len(json.loads(DASHBOARD.read_text())["panels"])  # the variable too
    assert promql.unknown_metrics(queries, promql.exported_names()) == {}


@pytest.mark.parametrize(
    ("expr", "unknown"),
    [
        ("rate(podium_fail_opens_total[5m]) > 0", {"podium_fail_opens_total"}),  # a typo
        ("podium_fail_open > 0", {"podium_fail_open"}),  # the counter without _total
        ("sum by (namespace) (up{job='podium'})", {"up"}),  # not podium's
        ("max by (namespace) (podium_gangs_split) > 0", set()),
    ],
)
def test_the_check_names_a_metric_podium_does_not_export(expr: str, unknown: set[str]) -> None:
    found = promql.unknown_metrics([expr], promql.exported_names())
    assert found == ({expr: unknown} if unknown else {})


def test_a_metric_that_is_not_registered_is_not_exported() -> None:
    """The exported names come from the registry: a metric removed from metrics.py goes."""
    exported = promql.exported_names()
    assert "podium_gangs_split" in exported and "podium_write_failures_total" in exported
    assert "podium_gangs_split_total" not in exported


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_every_alert_says_what_and_how_bad_and_links_its_runbook(alert: dict[str, Any]) -> None:
    assert alert["labels"]["severity"] in {"warning", "critical"}
    annotations = alert["annotations"]
    assert annotations["summary"] and annotations["description"]
    assert annotations["runbook_url"] == RUNBOOKS + alert["alert"].lower()


def test_every_runbook_url_lands_on_a_section_of_the_operations_guide() -> None:
    headings = {
        github_anchor(line.lstrip("#"))
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }
    anchors = {a["alert"]: a["annotations"]["runbook_url"].split("#", 1)[1] for a in alerts()}
    assert sorted(name for name, anchor in anchors.items() if anchor not in headings) == []


def test_alert_names_are_unique() -> None:
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names))


def test_every_alert_has_a_promtool_test_that_fires_it_and_one_that_does_not() -> None:
    """rules-test.yaml (run by promtool in test_promtool.py) covers every alert both ways."""
    spec = yaml.safe_load((Path(__file__).parent / "rules-test.yaml").read_text())
    cases = [case for test in spec["tests"] for case in test["alert_rule_test"]]
    fired = {c["alertname"] for c in cases if c["exp_alerts"]}
    silent = {c["alertname"] for c in cases if not c["exp_alerts"]}
    names = {a["alert"] for a in alerts()}
    assert (names - fired, names - silent) == (set(), set())
