"""``podium snapshot``: what a review needs of a live cluster (against the in-memory API twin),
and the two-command round trip: snapshot, then review."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.builders import PodBuilder
from tests.ops.conftest import UNREACHABLE
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import labels
from webhook.core.settings import Settings
from webhook.kube import twins
from webhook.ops import cli, cli_options, snapshot

runner = CliRunner()


def managed(kind: str, api_version: str, name: str, component: str) -> dict[str, Any]:
    """One of podium's objects, as far as a snapshot cares: kind, name, podium's labels."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {labels.MANAGED_BY: labels.MANAGER, labels.COMPONENT: component},
        },
    }


RECORD = managed("ConfigMap", "v1", "podium-pytorchjob-older-0000", "decision")
POLICY = managed("CiliumNetworkPolicy", "cilium.io/v2", "podium-pytorchjob-older-0000", "policy")


def world() -> tuple[twins.InMemoryObjects, dict[str, Any]]:
    """base_cluster (team-a opted in, sandbox not), a PyTorchJob with a bound worker, a pod in
    sandbox, and podium's objects of an older job — plus a ConfigMap that is not podium's."""
    pj = pytorchjob(workers=1)
    api = twins.InMemoryObjects(missing_kinds={"RayCluster"})
    worker = pytorch_pod(pj, "worker", 0).uid().bound("c-0").obj()
    worker["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    stranger = PodBuilder("sandbox", name="web").uid().obj()
    other_cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": NS},
        "data": {"secret-ish": "no"},
    }
    for obj in [*base_cluster(pj), worker, stranger, RECORD, POLICY, other_cm]:
        api.put(obj)
    return api, pj


def kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted(
        (o["kind"], f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}")
        for o in objects
        if o["kind"] != "Node"
    )


async def test_opted_in_namespaces_and_what_they_hold() -> None:
    api, _ = world()
    seen: list[str] = []
    objects = await snapshot.capture(api, Settings(), on_kind=seen.append)
    assert sum(o["kind"] == "Node" for o in objects) == 11
    older = RECORD["metadata"]["name"]
    # podium's record and policy, not the namespace's other ConfigMaps; nothing from sandbox
    assert kinds(objects) == [
        ("CiliumNetworkPolicy", f"{NS}/{older}"),
        ("ConfigMap", f"{NS}/{older}"),
        ("Namespace", f"/{NS}"),
        ("Pod", f"{NS}/llama-worker-0"),
        ("PyTorchJob", f"{NS}/llama"),
    ]
    pod = next(o for o in objects if o["kind"] == "Pod")
    assert "managedFields" not in pod["metadata"]  # kept as the watch cache keeps it
    assert seen[:3] == ["Namespace", "Node", "Pod"] and "RayCluster" in seen  # CRD missing: ok


async def test_named_namespaces_even_when_not_opted_in() -> None:
    api, _ = world()
    objects = await snapshot.capture(api, Settings(), namespaces=["sandbox"])
    assert kinds(objects) == [("Namespace", "/sandbox"), ("Pod", "sandbox/web")]
    with pytest.raises(snapshot.SnapshotError, match="namespace nowhere does not exist"):
        await snapshot.capture(api, Settings(), namespaces=["nowhere"])


async def test_many_namespaces_are_listed_across_the_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, _ = world()
    monkeypatch.setattr(snapshot, "PER_NAMESPACE_UP_TO", 0)
    everywhere = await snapshot.capture(api, Settings())
    monkeypatch.undo()
    assert kinds(everywhere) == kinds(await snapshot.capture(api, Settings()))


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> twins.InMemoryObjects:
    api, _ = world()

    class Client:
        def close(self) -> None:
            pass

    monkeypatch.setattr(cli_options, "connect_cluster", lambda kubeconfig, context: (Client(), api))
    return api


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_snapshot_then_review_is_two_commands(
    stub: twins.InMemoryObjects, tmp_path: Path, fmt: str
) -> None:
    taken = runner.invoke(cli.app, ["snapshot", "-o", fmt])
    assert taken.exit_code == 0, taken.output
    assert "captured 1 namespaces, 11 nodes, 1 pods" in taken.stderr
    doc = json.loads(taken.stdout) if fmt == "json" else yaml.safe_load(taken.stdout)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    cluster = tmp_path / f"cluster.{fmt}"
    cluster.write_text(taken.stdout)
    pod = tmp_path / "pod.json"
    pj = next(o for o in doc["items"] if o["kind"] == "PyTorchJob")
    pod.write_text(json.dumps(pytorch_pod(pj, "master").obj()))
    pin = tmp_path / "pin.yaml"
    pin.write_text("zone-chooser: pin\n")  # the pin at admission: the master follows the worker
    reviewed = runner.invoke(
        cli.app,
        ["review", str(pod), "--cluster", str(cluster), "--config", str(pin), "-o", "json"],
    )
    assert reviewed.exit_code == 0, reviewed.output
    result = json.loads(reviewed.stdout)
    # the snapshot holds the worker bound in zone-c: the master follows it
    assert (result["audit"]["zone"], result["audit"]["reason"]) == ("zone-c", "members-placed")
    assert reviewed.stderr == ""  # nothing the review needed was missing


def test_a_namespace_that_does_not_exist_is_one_line(stub: twins.InMemoryObjects) -> None:
    result = runner.invoke(cli.app, ["snapshot", "-n", "nowhere"])
    assert result.exit_code == 2
    assert result.stderr == "Error: namespace nowhere does not exist (-n)\n"


def test_an_unreachable_cluster_is_one_line(unreachable_kubeconfig: Path) -> None:
    result = runner.invoke(cli.app, ["snapshot", "--kubeconfig", str(unreachable_kubeconfig)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [UNREACHABLE]
