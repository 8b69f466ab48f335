"""The golden files in tests/fixtures/operators/ are whole and agree with frameworks.py.

No cluster and no Go needed: this runs in the unit suite and guards the files the adapter
table tests are to be driven from (phase 2 of issue 12).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.operators.capture import DEFAULT_OUT
from testbed.operators.frameworks import FRAMEWORKS

FILES = sorted(DEFAULT_OUT.glob("*.yaml"))
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def test_one_golden_file_per_framework() -> None:
    captured = {_load(p)["framework"] for p in FILES}
    assert captured == set(FRAMEWORKS)
    assert len(FILES) == len(FRAMEWORKS)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_file_is_whole(path: Path) -> None:
    golden = _load(path)
    framework = FRAMEWORKS[golden["framework"]]
    assert path.name == f"{framework.name}-{golden['operator']['version']}.yaml"
    assert golden["operator"]["name"] == framework.operator
    assert [o["name"] for o in golden["also_running"]] == list(framework.needs)
    assert len(golden["pods"]) == framework.pods
    job = golden["job"]
    for pod in golden["pods"]:
        chain = pod["owner_chain"]
        # The controller made it (the audit log's create request is there), and the owner chain
        # ends at the job.
        assert pod["created"] is not None, pod["name"]
        assert (chain[-1]["kind"], chain[-1]["name"]) == (job["kind"], job["metadata"]["name"])
        assert set(framework.pod_labels) <= set(pod["stored"]["labels"]), pod["name"]
    assert sorted(p["order"] for p in golden["pods"]) == list(range(framework.pods))


def test_golden_files_hold_no_run_specific_ids() -> None:
    for path in FILES:
        text = path.read_text()
        assert "capture-" not in text, path.name  # the namespace is NAMESPACE
        assert "BEGIN CERTIFICATE" not in text, path.name
        assert not UUID.search(text), (path.name, UUID.search(text))
