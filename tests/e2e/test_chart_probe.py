"""The chart's `helm test` hook, run for real where this test bed can run it.

The local control plane's nodes are kwok nodes: they run no container, so a real ``helm test``
(a pod that runs podium's image) cannot run here — kwok would report a pod's phase without
running anything. What the hook's pod does is one command, though: ``podium probe`` with the
arguments the chart renders. Here that command runs against a podium serving for the local
apiserver (as the chart's ServiceAccount, with the chart's RBAC) the certificate `podium certs
issue` makes for the chart's Service, checked with that CA against the Service's name in the
hook's URL (``--server-name``); only the address connected to is 127.0.0.1.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import urllib.request
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


def podium_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.ops.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class ServicePodium(Podium):
    """podium serving the certificate `podium certs issue` makes for the chart's Service
    (podium.podium-system.svc, and 127.0.0.1 so that it can be reached here), not the test
    bed's own."""

    ca: Path

    def ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServicePodium]:
    certs = tmp_path_factory.mktemp("probe-certs")
    issued = podium_cli(
        "certs",
        "issue",
        "--dir",
        str(certs),
        "--service",
        "podium",
        "--namespace",
        "podium-system",
        "--san",
        "127.0.0.1",
    )
    assert issued.returncode == 0, issued.stdout + issued.stderr
    server = ServicePodium(local_cluster, tmp_path_factory.mktemp("probe"))
    server.cert, server.key, server.ca = certs / "tls.crt", certs / "tls.key", certs / "ca.pem"
    server.start()
    try:
        yield server
    finally:
        server.stop()


#: The Service's name in the hook's URL, which the certificate must carry.
SERVICE_HOST = "podium.podium-system.svc"


def as_here(
    args: list[str], podium: Podium, ca_file: Path, namespace: str, *, port: int | None = None
) -> list[str]:
    """The hook's command line, aimed at this podium: the URL's host is 127.0.0.1 (and the
    certificate is checked against the Service's name the hook's URL carries, --server-name),
    and the CA file is a path here; every other argument is the chart's."""
    url = args[1]
    assert url.startswith(f"https://{SERVICE_HOST}:443/"), url
    out = list(args)
    out[1] = url.replace(f"{SERVICE_HOST}:443", f"127.0.0.1:{port or podium.port}")
    out[out.index("--ca-file") + 1] = str(ca_file)
    out[out.index("--pod-namespace") + 1] = namespace
    return [*out, "--server-name", SERVICE_HOST]


def test_the_hook_command_passes_against_a_serving_podium(
    local_cluster: LocalCluster, podium: ServicePodium
) -> None:
    args = hook_args()
    assert args[0] == "probe"
    with opted_in_namespace(local_cluster, "probe") as namespace:
        result = podium_cli(*as_here(args, podium, podium.ca, namespace))
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
    # What the hook sends as it is: the reviewed pod in podium's own namespace.
    own = podium_cli(*as_here(args, podium, podium.ca, "podium-system"))
    assert own.returncode == 0, own.stdout + own.stderr


def test_the_hook_command_fails_on_a_certificate_the_ca_did_not_sign(
    local_cluster: LocalCluster, podium: ServicePodium
) -> None:
    """The check has teeth: with another CA (the test bed's cluster CA, which did not sign
    podium's certificate) the probe fails and says why, as the apiserver would refuse to call
    podium."""
    result = podium_cli(*as_here(hook_args(), podium, local_cluster.ca_file, "default"))
    assert result.returncode == 1
    assert "serving certificate does not verify" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_hook_command_fails_on_a_certificate_for_another_service(
    podium: ServicePodium,
) -> None:
    """The right CA, but the certificate does not name the Service the hook calls."""
    args = as_here(hook_args(), podium, podium.ca, "default")
    args[-1] = "other.podium-system.svc"
    result = podium_cli(*args)
    assert result.returncode == 1
    assert "does not verify" in result.stderr and "other.podium-system.svc" in result.stderr, (
        result.stderr
    )


def test_the_hook_command_fails_when_nothing_serves(podium: ServicePodium) -> None:
    result = podium_cli(*as_here(hook_args(), podium, podium.ca, "default", port=1))
    assert result.returncode == 1
    assert "cannot reach podium" in result.stderr and "Traceback" not in result.stderr
