"""podium's identity as the chart installs it: its ServiceAccount and RBAC rendered by ``helm
template`` from charts/podium (the very objects ``helm install`` would create), applied to the
local control plane, and a kubeconfig holding a token the apiserver mints for that ServiceAccount
(TokenRequest). A podium given that kubeconfig can do exactly what the chart lets it do, and a
write the chart does not allow is refused by the apiserver (403), as in a real cluster."""

from __future__ import annotations

import contextlib
import functools
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from testbed.build import helm_binary
from testbed.controlplane import ApiError, LocalCluster
from testbed.paths import REPO

CHART = REPO / "charts" / "podium"
#: The Kubernetes version ``helm template`` renders for (the chart requires ≥ 1.30).
KUBE_VERSION = "1.33.0"
#: The chart's ClusterRoleBindings, in one scope or the other.
BINDINGS = frozenset({"podium", "podium-writer"})
TEMPLATES = (
    "templates/serviceaccount.yaml",
    "templates/rbac.yaml",
    # certificates.mode self (the default): the empty Secret and the rights on it and on the
    # webhook configuration.
    "templates/certificates.yaml",
)
#: How long a minted token lives: longer than any test module runs.
TOKEN_SECONDS = 3600


def render(*, namespace: str, values: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The chart's ServiceAccount and RBAC for a release in ``namespace``; ``values``: ``--set``
    arguments (``rbac.scope=namespaced``)."""
    return [doc for doc in yaml.safe_load_all(_rendered(namespace, tuple(values))) if doc]


@functools.cache
def _rendered(namespace: str, values: tuple[str, ...]) -> str:
    """``helm template``'s output, once per test run for each namespace and values: every test
    that starts podium renders the same few (each caller parses its own copy)."""
    command = [str(helm_binary()), "template", "podium", str(CHART), "--namespace", namespace]
    command += ["--kube-version", KUBE_VERSION]
    for template in TEMPLATES:
        command += ["--show-only", template]
    for value in values:
        command += ["--set", value]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    return result.stdout


def install(cluster: LocalCluster, objects: Sequence[dict[str, Any]]) -> None:
    """Apply the rendered objects (server-side apply: a second install replaces the first's
    rules and bindings of the same names), and delete a cluster-wide binding of podium's that
    this rendering lacks, as ``helm upgrade`` would (a namespaced install after a cluster-wide
    one in the same cluster)."""
    for obj in objects:
        cluster.apply(obj)
    rendered = {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"}
    for name in BINDINGS - rendered:
        with contextlib.suppress(ApiError):  # not there
            cluster.request(
                "DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}"
            )


def mint_token(
    cluster: LocalCluster, *, namespace: str, name: str, seconds: int = TOKEN_SECONDS
) -> str:
    """A token for ServiceAccount ``namespace/name``, from the TokenRequest API, valid for
    ``seconds``."""
    core = k8s.CoreV1Api(cluster.api_client())
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
    )
    status = core.create_namespaced_service_account_token(name, namespace, request).status
    if status is None or not status.token:
        raise RuntimeError(f"the TokenRequest for {namespace}/{name} returned no token")
    return str(status.token)


def kubeconfig(cluster: LocalCluster, path: Path, *, token: str, server: str | None = None) -> Path:
    """A kubeconfig for the local apiserver that authenticates with ``token`` only; ``server``:
    another URL that reaches it (a fault proxy's)."""
    cluster_entry = {
        "server": server or cluster.server,
        "certificate-authority": str(cluster.ca_file),
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": cluster_entry,
            }
        ],
        "users": [{"name": "podium", "user": {"token": token}}],
        "contexts": [{"name": "podium", "context": {"cluster": "local", "user": "podium"}}],
        "current-context": "podium",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def as_installed(
    cluster: LocalCluster,
    work_dir: Path,
    *,
    namespace: str,
    values: Sequence[str] = (),
    server: str | None = None,
    token_seconds: int = TOKEN_SECONDS,
) -> Path:
    """Install the chart's ServiceAccount and RBAC; a kubeconfig that is that ServiceAccount
    (reaching the apiserver at ``server``, by default the cluster's own URL) with a token valid
    for ``token_seconds``."""
    objects = render(namespace=namespace, values=values)
    install(cluster, objects)
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    token = mint_token(
        cluster, namespace=namespace, name=account["metadata"]["name"], seconds=token_seconds
    )
    return kubeconfig(cluster, work_dir / "podium-sa.kubeconfig", token=token, server=server)
