"""The chart's `helm test` hook, run for real where this test bed can run it.

The local control plane's nodes are kwok nodes: they run no container, so a real ``helm test``
(a pod that runs podium's image) cannot run here — kwok would report the pod's phase without
running anything. What the hook's pod does is one command, though: ``podium probe`` with the
arguments the chart renders. Here that command runs against a podium serving for the local
apiserver (as the chart's ServiceAccount, with the chart's RBAC), with the same CA the apiserver
trusts it by; only the URL's host is 127.0.0.1 instead of the Service's DNS name (the test bed's
serving certificate names 127.0.0.1 and localhost).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testbed import build
from testbed.controlplane import LocalCluster
from testbed.podium import Podium, opted_in_namespace
from tests.test_chart import CHART, KUBE_VERSION

pytestmark = pytest.mark.e2e


def hook_args() -> list[str]:
    """The arguments of the chart's test pod, as `helm template` renders them."""
    result = subprocess.run(
        [
            str(build.helm_binary()),
            "template",
            "podium",
            str(CHART),
            "-n",
            "podium-system",
            "--kube-version",
            KUBE_VERSION,
            "--show-only",
            "templates/tests/test-admission.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (pod,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["podium"]
    return list(container["args"])


def run_probe(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.ops.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    server = Podium(local_cluster, tmp_path_factory.mktemp("probe"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def as_here(args: list[str], podium: Podium, ca_file: Path, namespace: str) -> list[str]:
    """The hook's command line, aimed at this podium: the URL's host and the CA file differ,
    every other argument is the chart's."""
    url = args[1]
    assert url.startswith("https://podium.podium-system.svc:443/"), url
    out = list(args)
    out[1] = url.replace("podium.podium-system.svc:443", f"127.0.0.1:{podium.port}")
    out[out.index("--ca-file") + 1] = str(ca_file)
    out[out.index("--pod-namespace") + 1] = namespace
    return out


def test_the_hook_command_passes_against_a_serving_podium(
    local_cluster: LocalCluster, podium: Podium
) -> None:
    args = hook_args()
    assert args[0] == "probe"
    with opted_in_namespace(local_cluster, "probe") as namespace:
        result = run_probe(as_here(args, podium, local_cluster.ca_file, namespace))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"podium at https://127.0.0.1:{podium.port}/mutate allowed the dry-run review" in (
            result.stdout
        )
        # A dry run: podium created nothing in the namespace.
        found = local_cluster.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/configmaps",
            query={"labelSelector": "app.kubernetes.io/managed-by=podium"},
        )
        assert found["items"] == []
    uid = result.stdout.split("dry-run review ", 1)[1].split()[0]
    uuid.UUID(uid)  # the uid the probe sent, echoed back by podium
    # Its own namespace too (what the hook sends: the pod's namespace is podium's).
    own = run_probe(as_here(args, podium, local_cluster.ca_file, "podium-system"))
    assert own.returncode == 0, own.stdout + own.stderr


def test_the_hook_command_fails_on_a_certificate_the_ca_did_not_sign(
    podium: Podium, tmp_path: Path
) -> None:
    """The check has teeth: with another CA (one `podium certs issue` makes) the probe fails and
    says why, as the apiserver would refuse to call podium."""
    issued = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "certs",
            "issue",
            "--dir",
            str(tmp_path),
            "--service",
            "podium",
            "--namespace",
            "podium-system",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert issued.returncode == 0, issued.stderr
    result = run_probe(as_here(hook_args(), podium, tmp_path / "ca.pem", "default"))
    assert result.returncode == 1
    assert "serving certificate does not verify" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_hook_command_fails_when_nothing_serves(
    local_cluster: LocalCluster, podium: Podium
) -> None:
    args = as_here(hook_args(), podium, local_cluster.ca_file, "default")
    args[1] = args[1].replace(f":{podium.port}/", ":1/")
    result = run_probe(args)
    assert result.returncode == 1
    assert "cannot reach podium" in result.stderr and "Traceback" not in result.stderr
