"""``podium review`` offline, for a job that already runs (issue 29, "gangs that already run"):
examples/cluster.yaml plus llama-ft's master Running in us-east-1b with no decision record — a
job started before its namespace opted in, or while podium was down — reviewed with the hold
example's settings. The worker follows its master into us-east-1b, ungated; it is never held
for pods that will never be gated (the answer used to be ``held`` and ``waiting for its pods: 1
of 4 exist``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from webhook.core import labels, mutation
from webhook.ops.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def _master_running() -> dict[str, Any]:
    master: dict[str, Any] = yaml.safe_load((EXAMPLES / "pytorchjob-master-0.yaml").read_text())
    master["metadata"]["uid"] = "uid-llama-ft-master-0"
    master["metadata"]["creationTimestamp"] = "2026-12-01T11:00:00Z"
    master["spec"]["nodeName"] = "gpu-b-1"
    master["status"] = {"phase": "Running"}
    return master


def _cluster(tmp_path: Path, *extra: dict[str, Any]) -> Path:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "cluster.yaml").read_text()) if d]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*docs, _master_running(), *extra]))
    return path


def _review(tmp_path: Path, cluster: Path, *output: str) -> Any:
    args = [
        "review",
        str(EXAMPLES / "pytorchjob-worker-0.yaml"),
        "--cluster",
        str(cluster),
        "--config",
        str(EXAMPLES / "podium-hold.yaml"),
        "--at",
        "2026-12-01T12:00:00Z",
        *output,
    ]
    return runner.invoke(app, args, env={"NO_COLOR": "1", "COLUMNS": "200"})


def test_the_worker_of_a_running_job_follows_its_master_ungated(tmp_path: Path) -> None:
    result = _review(tmp_path, _cluster(tmp_path), "-o", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    audit = out["audit"]
    assert (audit["outcome"], audit["zone"], audit["reason"]) == (
        "pinned",
        "us-east-1b",
        "coordinator-placed",
    )
    assert (
        "1 pod(s) of the job already run (us-east-1b: 1) without podium's gate" in (audit["detail"])
    )
    patched = out["patchedObject"]
    assert "schedulingGates" not in patched["spec"]
    assert patched["metadata"]["labels"][labels.ZONE] == "us-east-1b"
    terms = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": labels.ZONE_LABEL, "operator": "In", "values": ["us-east-1b"]}
            ]
        }
    ]
    created = {o["kind"]: o for o in out["sideEffects"]}
    record = created["ConfigMap"]
    assert (record["data"]["zone"], record["data"]["reason"]) == (
        "us-east-1b",
        "coordinator-placed",
    )
    # Nothing is held, so the releaser has nothing to say "waiting for its pods" about.
    assert out.get("release", []) == []
    summary = _review(tmp_path, _cluster(tmp_path), "-o", "summary").stdout
    words = " ".join(summary.split())
    assert "pinned to zone us-east-1b" in words
    assert "waiting for its pods" not in words


def test_a_worker_held_before_its_master_bound_is_released_into_the_masters_zone(
    tmp_path: Path,
) -> None:
    """The same job, with worker-1 held in the snapshot (admitted before the master bound): the
    releaser would release it into us-east-1b at once."""
    worker: dict[str, Any] = yaml.safe_load((EXAMPLES / "pytorchjob-worker-0.yaml").read_text())
    worker["metadata"]["name"] = "llama-ft-worker-1"
    worker["metadata"]["labels"]["training.kubeflow.org/replica-index"] = "1"
    worker["metadata"]["uid"] = "uid-llama-ft-worker-1"
    worker["metadata"]["creationTimestamp"] = "2026-12-01T11:59:00Z"
    held = mutation.hold(worker, gang_key=worker["metadata"]["ownerReferences"][0]["uid"]).pod
    out = json.loads(_review(tmp_path, _cluster(tmp_path, held), "-o", "json").stdout)
    (released,) = out["release"]
    assert (released["verdict"], released["zone"], released["reason"]) == (
        "release",
        "us-east-1b",
        "coordinator-placed",
    )
    assert "released after 60s held" in released["detail"]
