"""podium under exactly the chart's RBAC (issue 22, item 5): its ServiceAccount, ClusterRoles and
bindings rendered by ``helm template``, applied, and a token minted for that ServiceAccount. Every
e2e module runs podium so (`testbed.podium.Podium`'s default); this one checks what RBAC decides:
who podium is, and that the writes it needs are granted and nothing more. Whatever podium needs
and the chart forgot shows up as a 403.

The default scope (cluster) runs podium's whole flow with ``zone-chooser: hold``: a gang held
behind podium's gate (pods are patched), released whole into one zone with its record and policy
written first (test_hold's own test, collected here with this module's podium), its Lease taken
in podium's namespace, and the reconciler re-creating a deleted policy. The namespaced scope
(`rbac.scope: namespaced`) is in test_least_privilege_namespaced.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.controlplane import ApiError, LocalCluster, kubectl
from testbed.controlplane.api import Api
from testbed.podium import Podium, serving

from .test_hold import (  # noqa: F401  (ns: test_hold's fixture, on this module's podium)
    gated,
    ns,
    pods_of,
    test_a_gang_waits_gated_then_is_released_whole_with_its_policy_first,
)
from .test_podium import (
    collection,
    create_concurrently,
    listed,
    pytorch_pods,
    pytorchjob,
)

pytestmark = pytest.mark.e2e

# Collected here too: the same test, on this module's podium (the chart's RBAC).
__all__ = ["test_a_gang_waits_gated_then_is_released_whole_with_its_policy_first"]

CNP = "cilium.io/v2"
ACCOUNT = "system:serviceaccount:podium-system:podium"


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    """podium as the chart installs it (rbac.scope: cluster, the default)."""
    config = "zone-chooser: hold\nrelease-interval-seconds: 1\nreconcile-interval-seconds: 0.5\n"
    server = Podium(local_cluster, tmp_path_factory.mktemp("least-privilege"), config=config)
    with serving(server, unregister=True) as started:
        yield started


def released_job(local_cluster: LocalCluster, namespace: str, name: str) -> list[str]:
    """A one-pod CPU PyTorchJob, created and released by podium (held first: the default);
    its pods' names."""
    job = pytorchjob(local_cluster, namespace, name, workers=1, gpus=0)
    names = [
        p["metadata"]["name"]
        for p in create_concurrently(local_cluster, pytorch_pods(job, workers=1, gpus=0))
    ]
    local_cluster.wait_for(
        "the gang to be released",
        lambda: not any(gated(p) for p in pods_of(local_cluster, namespace, names)),
        timeout=60,
    )
    return names


def test_podium_runs_as_the_charts_service_account(podium: Podium) -> None:
    """Not as the admin: the apiserver names the chart's ServiceAccount, and the Lease podium
    took is in its own namespace (the chart's Role for leader election)."""
    config = podium.kubeconfig.read_text()
    assert "client-certificate" not in config and "token:" in config
    lease = podium.cluster.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/podium-system/leases"
    )["items"]
    assert lease, "podium took no Lease"
    assert not [line for line in podium.log_tail(400).splitlines() if "403" in line], (
        podium.log_tail(400)
    )


def test_the_reconciler_recreates_a_deleted_policy(
    local_cluster: LocalCluster,
    ns: str,  # noqa: F811
) -> None:
    released_job(local_cluster, ns, "kept")
    local_cluster.wait_for(
        "its policy",
        lambda: bool(listed(local_cluster, CNP, "CiliumNetworkPolicy", ns)),
        timeout=30,
    )
    (policy,) = listed(local_cluster, CNP, "CiliumNetworkPolicy", ns)
    path = f"{collection(CNP, 'CiliumNetworkPolicy', ns)}/{policy['metadata']['name']}"
    local_cluster.request("DELETE", path)

    def back() -> bool:
        try:
            got = local_cluster.request("GET", path)
        except ApiError:
            return False
        return bool(got["metadata"]["uid"] != policy["metadata"]["uid"])

    local_cluster.wait_for("the reconciler to re-create the policy", back, timeout=30)
    assert local_cluster.request("GET", path)["spec"] == policy["spec"]


def test_the_chart_lets_podium_write_in_kube_system(podium: Podium) -> None:
    """What rbac.scope: cluster means, said plainly: podium's writes are bound cluster-wide, so
    the apiserver would let it write a ConfigMap even in kube-system (a dry run here). The
    namespaced scope is the answer to that."""
    as_podium = Api.from_kubeconfig(podium.kubeconfig)
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "podium-probe", "namespace": "kube-system"},
    }
    created = as_podium.request(
        "POST", "/api/v1/namespaces/kube-system/configmaps", configmap, query={"dryRun": "All"}
    )
    assert created["metadata"]["name"] == "podium-probe"
    review = as_podium.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert review["status"]["userInfo"]["username"] == ACCOUNT


def test_kubectl_podium_doctor_and_audit_against_the_cluster(
    local_cluster: LocalCluster,
    podium: Podium,
    ns: str,  # noqa: F811
) -> None:
    """The plugin as a kubectl user runs it (issue 22, item 4): the real kubectl finds
    ``kubectl-podium`` on PATH and hands it $KUBECONFIG and the flags before the command; at
    80 columns (a terminal) neither doctor nor audit folds a name."""
    names = released_job(local_cluster, ns, "plugin")
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(local_cluster.kubeconfig),
        "COLUMNS": "80",
        "TTY_COMPATIBLE": "1",
        "NO_COLOR": "1",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)

    def kubectl_podium(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(kubectl.find()), "podium", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        print(f"$ kubectl podium {' '.join(args)}  (exit {done.returncode})\n{done.stdout}")
        # What the terminal shows: without rich's escape sequences (bold, italic).
        done.stdout = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
        return done

    doctor = kubectl_podium("-n", ns, "doctor")
    assert doctor.returncode in (0, 1), doctor.stderr
    assert max(len(line.rstrip()) for line in doctor.stdout.splitlines()) <= 80
    assert "PyTorchJob/plugin" in doctor.stdout or "no problems found" in doctor.stdout
    audit = kubectl_podium("-n", ns, "audit", str(podium.audit_file), "--utc")
    assert audit.returncode == 0, audit.stderr
    lines = [line.rstrip() for line in audit.stdout.splitlines()]
    assert max(len(line) for line in lines) <= 80
    for name in names:
        assert any(line.endswith(name) or f" {name} " in line for line in lines), name
