"""``podium review``: the offline contract users' tooling relies on."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from typer.testing import CliRunner

from tests.builders import PodBuilder
from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from webhook.core import labels, reviews
from webhook.ops.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def review(
    tmp_path: Path,
    pod_or_review: dict[str, Any],
    objects: list[dict[str, Any]],
    *,
    yaml_docs: bool = True,
    config: str | None = None,
) -> tuple[int, dict[str, Any] | None, str]:
    inp = tmp_path / "input.json"
    inp.write_text(json.dumps(pod_or_review))
    cluster = tmp_path / "cluster.yaml"
    if yaml_docs:
        cluster.write_text(yaml.safe_dump_all(objects))
    else:
        cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    args = ["review", str(inp), "--cluster", str(cluster)]
    if config is not None:
        (tmp_path / "podium.yaml").write_text(config)
        args += ["--config", str(tmp_path / "podium.yaml")]
    result = runner.invoke(app, args)
    out = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, out, result.stderr


@pytest.mark.parametrize("yaml_docs", [True, False], ids=["yaml-documents", "v1-List"])
@pytest.mark.parametrize("as_review", [True, False], ids=["AdmissionReview", "bare-Pod"])
def test_output_contract(tmp_path: Path, yaml_docs: bool, as_review: bool) -> None:
    pj = pytorchjob()
    pod = pytorch_pod(pj).obj()
    doc = reviews.review_for_pod(pod, uid="abc") if as_review else pod
    code, out, _ = review(tmp_path, doc, base_cluster(pj), yaml_docs=yaml_docs)
    assert code == 0 and out is not None
    assert set(out) == {"response", "patchedObject", "sideEffects", "audit"}
    resp = out["response"]
    assert (resp["apiVersion"], resp["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert resp["response"]["uid"] == ("abc" if as_review else "offline-review")
    # patchedObject is exactly the input pod with the response's patch applied
    patch = json.loads(base64.b64decode(resp["response"]["patch"]))
    assert jsonpatch.apply_patch(pod, patch) == out["patchedObject"]
    assert [o["kind"] for o in out["sideEffects"]] == ["ConfigMap", "CiliumNetworkPolicy"]
    assert out["audit"]["zone"] == "zone-c" and out["audit"]["reason"] == "best-fit"


def test_side_effects_fed_back_keep_the_zone(tmp_path: Path) -> None:
    pj = pytorchjob(workers=1)
    code, first, _ = review(tmp_path, pytorch_pod(pj, "master").obj(), base_cluster(pj))
    assert code == 0 and first is not None and first["audit"]["zone"] == "zone-b"
    # zone-b fills up meanwhile; the recorded decision still wins.
    hogs = [PodBuilder("other", name=f"h{i}").gpus(8).bound(f"b-{i}").obj() for i in (1, 2)]
    objects = [*base_cluster(pj), *hogs, *first["sideEffects"]]
    code, second, _ = review(tmp_path, pytorch_pod(pj, "worker", 0).obj(), objects)
    assert code == 0 and second is not None
    assert (second["audit"]["zone"], second["audit"]["reason"]) == ("zone-b", "recorded")
    assert second["sideEffects"] == []
    # without the fed-back record the decision would differ
    code, third, _ = review(
        tmp_path, pytorch_pod(pj, "worker", 0).obj(), [*base_cluster(pj), *hogs]
    )
    assert third is not None and third["audit"]["zone"] == "zone-c"


def test_dry_run_review_has_no_side_effects(tmp_path: Path) -> None:
    pj = pytorchjob()
    code, out, _ = review(
        tmp_path, reviews.review_for_pod(pytorch_pod(pj).obj(), dry_run=True), base_cluster(pj)
    )
    assert code == 0 and out is not None
    assert out["sideEffects"] == [] and "patch" in out["response"]["response"]


def test_skipped_pod_is_returned_unchanged(tmp_path: Path) -> None:
    pod = PodBuilder("sandbox", name="web").obj()
    code, out, _ = review(tmp_path, pod, base_cluster())
    assert code == 0 and out is not None
    assert out["patchedObject"] == pod and out["sideEffects"] == []
    assert out["audit"]["reason"] == "namespace-not-enabled"


def test_config_file_changes_policy_mode(tmp_path: Path) -> None:
    pj = pytorchjob()
    code, out, _ = review(
        tmp_path, pytorch_pod(pj).obj(), base_cluster(pj), config="policy-mode: kubernetes\n"
    )
    assert code == 0 and out is not None
    assert [o["kind"] for o in out["sideEffects"]] == ["ConfigMap", "NetworkPolicy"]


@pytest.mark.parametrize(
    ("input_text", "cluster_text", "config", "message"),
    [
        ("{not json", "[]", None, "is neither JSON nor YAML"),
        (
            '{"apiVersion": "v1", "kind": "Service"}',
            "[]",
            None,
            "not an admission.k8s.io/v1 AdmissionReview or a v1 Pod",
        ),
        (
            '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
            "[]",
            None,
            "the review has no request object",
        ),
        (
            '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
            "- 1\n- 2\n",
            None,
            "every document must be a Kubernetes object",
        ),
        (
            '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
            '{"apiVersion": "v1", "kind": "Node"}',
            None,
            "has no metadata.name",
        ),
        (
            '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
            "[]",
            "policy-mode: calico\n",
            "policy-mode='calico' is invalid",
        ),
        (
            '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
            "[]",
            "colour: blue\n",
            "unknown setting 'colour'",
        ),
    ],
)
def test_unusable_input_exits_2_with_one_line(
    tmp_path: Path, input_text: str, cluster_text: str, config: str | None, message: str
) -> None:
    (tmp_path / "in").write_text(input_text)
    (tmp_path / "cluster").write_text(cluster_text)
    args = ["review", str(tmp_path / "in"), "--cluster", str(tmp_path / "cluster")]
    if config:
        (tmp_path / "c.yaml").write_text(config)
        args += ["--config", str(tmp_path / "c.yaml")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["review", str(tmp_path / "nope.json"), "--cluster", str(tmp_path / "nope")]
    )
    assert result.exit_code == 2 and "cannot read" in result.stderr


def test_shipped_examples_through_the_installed_command() -> None:
    """The README's example, as a user runs it: the real console script, real files."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "review",
            str(EXAMPLES / "pytorchjob-worker-0.yaml"),
            "--cluster",
            str(EXAMPLES / "cluster.yaml"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    out = json.loads(proc.stdout)
    assert out["audit"]["zone"] == "us-east-1c"
    assert (
        out["patchedObject"]["metadata"]["labels"][labels.JOB]
        == "6f1c2a8e-7d3b-4b8e-9a51-2c0e4f7d9b10"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "review",
            str(EXAMPLES / "review-master-0.json"),
            "--cluster",
            str(EXAMPLES / "cluster.yaml"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert (
        json.loads(proc.stdout)["response"]["response"]["uid"]
        == "0c4d3f0e-5a7b-4c1e-8f2a-9b6d1e3c7a55"
    )
