"""``podium review`` on any JSON at any path of a review: exit 0 or 2, never a traceback.

The apiserver decodes a pod into its Go type before any webhook sees it, so a review whose pod
is not shaped like one (``spec.containers: 7``) can only come from a hand-written file. The
command then says so in one line and exits 2; every other value is decided (exit 0). Through
typer's CliRunner, as a user runs the command, in the pin and the hold mode (hold also runs the
releaser over the snapshot with the reviewed pod in it) and in every output format.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests import anyjson
from webhook.ops import shapes
from webhook.ops.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def base_review() -> dict[str, Any]:
    """The shipped example review, with every pod field podium reads filled in."""
    doc: dict[str, Any] = json.loads((EXAMPLES / "review-master-0.json").read_text())
    pod = doc["request"]["object"]
    pod["metadata"]["annotations"] = {"podium.dev/skip": "false"}
    pod["metadata"]["generateName"] = "llama-ft-master-"
    spec = pod["spec"]
    spec["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "1"}}},
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"memory": "1Gi"}}},
    ]
    spec["overhead"] = {"cpu": "100m"}
    spec["nodeSelector"] = {"topology.kubernetes.io/region": "us-east-1"}
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    spec["schedulerName"] = "default-scheduler"
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "node.kubernetes.io/instance-type",
                                "operator": "In",
                                "values": ["p4d.24xlarge"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    return doc


BASE = base_review()


REVIEW_PATHS = sorted(anyjson.paths(BASE), key=repr)
POD_PATHS = sorted(anyjson.paths(BASE["request"]["object"]), key=repr)


@st.composite
def changed_inputs(draw: st.DrawFn) -> tuple[Any, bool]:
    """The example review, or its pod alone, with any JSON at one or two paths; and whether
    the changes stayed inside the pod's metadata and spec."""
    if draw(st.booleans()):
        doc, where = draw(anyjson.changed(BASE, REVIEW_PATHS))
        in_pod = all(p[:2] == ("request", "object") and p[2:3] in IN_POD for p in where)
        return doc, in_pod
    doc, where = draw(anyjson.changed(BASE["request"]["object"], POD_PATHS))
    return doc, all(p[:1] in IN_POD for p in where)


IN_POD = {("metadata",), ("spec",)}


CONFIGS = {"pin": "zone-chooser: pin\n", "hold": "zone-chooser: hold\n"}
CASES: dict[str, int] = {"exit 0": 0, "exit 2": 0}


def run(doc: Any, mode: str, output: str) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        inp, config = Path(tmp) / "input.json", Path(tmp) / "podium.yaml"
        inp.write_text(json.dumps(doc))
        config.write_text(CONFIGS[mode])
        args = ["review", str(inp), "--cluster", str(EXAMPLES / "cluster.yaml")]
        args += ["--config", str(config), "-o", output, "--at", "2026-12-01T12:00:00Z"]
        return runner.invoke(app, args, env={"COLUMNS": "100", "NO_COLOR": "1"})


def check(result: Any) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    CASES[f"exit {result.exit_code}"] += 1
    if result.exit_code == 2:
        assert result.stdout == ""
        assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
        assert "object has no attribute" not in result.stderr


@hsettings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    changed=changed_inputs(),
    mode=st.sampled_from(sorted(CONFIGS)),
    output=st.sampled_from(["json", "yaml", "summary"]),
)
def test_any_json_at_any_path_exits_0_or_2(
    changed: tuple[Any, bool], mode: str, output: str
) -> None:
    doc, in_pod = changed
    result = run(doc, mode, output)
    check(result)
    pod = doc["request"]["object"] if in_pod and "request" in doc else doc
    if in_pod and shapes.problem(shapes.without_nulls(pod), "V1Pod", "") is None:
        # A pod the apiserver could send is decided, whatever its values.
        assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("containers", [[None], 7, "x", {"": ""}, [7], [{"resources": 3}]])
@pytest.mark.parametrize("mode", sorted(CONFIGS))
def test_containers_that_are_not_containers_exit_2(containers: Any, mode: str) -> None:
    """The shapes of the issue: each was a traceback from core/resources.py (exit 1)."""
    doc = copy.deepcopy(BASE)
    doc["request"]["object"]["spec"]["containers"] = containers
    result = run(doc, mode, "json")
    check(result)
    assert result.exit_code == 2
    assert "spec.containers" in result.stderr


def test_the_unchanged_base_is_decided() -> None:
    result = run(BASE, "pin", "json")
    check(result)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["audit"]["outcome"] == "pinned"


def test_report_cases() -> None:
    """After the property test (file order): how many inputs were decided and refused."""
    print(f"\nreview cases: {CASES}")  # shown with -s


def test_a_pod_as_kubectl_prints_it_is_decided() -> None:
    """YAML as ``kubectl get pod -o yaml`` prints it: unquoted timestamps (YAML loads them as
    datetimes), nulls, status and managedFields are no reason to refuse the pod."""
    pod = copy.deepcopy(BASE["request"]["object"])
    pod["metadata"]["uid"] = "0a1b"
    pod["metadata"]["managedFields"] = [{"manager": "kube-controller-manager", "time": "T"}]
    pod["spec"]["affinity"] = None
    text = yaml.safe_dump(pod) + (
        "status:\n"
        "  phase: Pending\n"
        "  conditions:\n"
        "  - {type: PodScheduled, status: 'False', lastProbeTime: null,"
        " lastTransitionTime: 2026-12-01T11:59:00Z}\n"
    )
    text = text.replace("metadata:\n", "metadata:\n  creationTimestamp: 2026-12-01T11:59:00Z\n", 1)
    with tempfile.TemporaryDirectory() as tmp:
        inp, config = Path(tmp) / "pod.yaml", Path(tmp) / "pin.yaml"
        inp.write_text(text)
        config.write_text(CONFIGS["pin"])
        args = ["review", str(inp), "--cluster", str(EXAMPLES / "cluster.yaml")]
        result = runner.invoke(app, [*args, "--config", str(config), "-o", "json"])
    check(result)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["audit"]["outcome"] == "pinned"


@pytest.mark.parametrize("where", ["labels", "annotations"])
@pytest.mark.parametrize("key", ["\n", "podium.dev/skip", 'a"b'])
def test_a_map_key_is_quoted_in_the_one_line_error(where: str, key: str) -> None:
    """Found by the property test: a key holding a newline split the error over two lines.
    Keys that are not plain names are JSON-quoted in brackets (``labels["podium.dev/skip"]``)."""
    doc = copy.deepcopy(BASE)
    doc["request"]["object"]["metadata"][where] = {key: 7}
    result = run(doc, "pin", "json")
    check(result)
    assert result.exit_code == 2
    assert f"metadata.{where}[{json.dumps(key)}] must be a string, not a number" in result.stderr
