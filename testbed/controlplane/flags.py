"""The command lines of the control plane's components, and the settings behind them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from testbed.build import KWOK_STAGES_FILE
from testbed.controlplane.layout import Layout
from testbed.processes import HOST

__all__ = [
    "AUDIT_POLICY",
    "DEFAULT_CONTROLLERS",
    "FAKE_NODE_ANNOTATION",
    "PODGROUP_PROTECTION_CONTROLLER",
    "POD_CIDR",
    "SCHEDULER_GANG_GATES",
    "SCHEDULER_GANG_RUNTIME_CONFIG",
    "SERVICE_ACCOUNT_ISSUER",
    "SERVICE_CLUSTER_IP_RANGE",
    "ZONES",
    "apiserver_args",
    "controller_manager_args",
    "controllers_for",
    "etcd_args",
    "kwok_args",
    "scheduler_args",
]

FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# Controllers of kube-controller-manager (by their short aliases). The garbage collector and the
# namespace controller are what the tests rely on; the service-account ones make pod creation
# work (the ServiceAccount admission plugin needs the "default" ServiceAccount); the workload
# controllers are cheap and let tests use Jobs, Deployments and StatefulSets. The node lifecycle
# controller lifts the node.kubernetes.io/not-ready taint (added to every new Node by the
# TaintNodesByCondition admission plugin) once kwok reports the node Ready.
DEFAULT_CONTROLLERS: tuple[str, ...] = (
    "garbagecollector",
    "namespace",
    "nodelifecycle",
    "serviceaccount",
    "serviceaccount-token",
    "root-ca-cert-publisher",
    "clusterrole-aggregation",
    "job",
    "replicaset",
    "deployment",
    "statefulset",
)

# kube-scheduler's own gang and topology placement for PodGroups (k8s v1.37: GenericWorkload is
# beta, TopologyAwareWorkloadScheduling alpha, both off by default; the PodGroup API is
# scheduling.k8s.io/v1beta1, not served by default). `LocalCluster(feature_gates=...,
# runtime_config=...)` takes these. With the gates on, the scheduler's default plugin set gains
# GangScheduling, TopologyPlacementGenerator and PodGroupPodsCount by itself
# (pkg/scheduler/apis/config/v1/default_plugins.go applyFeatureGates): no scheduler config needed.
SCHEDULER_GANG_GATES: Mapping[str, bool] = {
    "GenericWorkload": True,
    "TopologyAwareWorkloadScheduling": True,
}
SCHEDULER_GANG_RUNTIME_CONFIG: Mapping[str, str] = {"scheduling.k8s.io/v1beta1": "true"}
# The apiserver's PodGroupProtection admission plugin (on by default) stamps the finalizer
# scheduling.k8s.io/podgroup-protection on every new PodGroup; only this controller of
# kube-controller-manager (which needs the GenericWorkload gate too) removes it, so without it a
# deleted PodGroup, and the namespace holding it, would never go away.
PODGROUP_PROTECTION_CONTROLLER = "podgroup-protection-controller"

# Metadata for everything, Request for pods (so a mutating webhook's JSON patch shows up as the
# "patch.webhook.serve.admission.k8s.io/..." audit annotation), nothing for the chatter of leases,
# events and health probes.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "None", "resources": [{"group": "", "resources": ["events"]}]},
        {"level": "None", "resources": [{"group": "events.k8s.io", "resources": ["events"]}]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/livez*", "/readyz*", "/version"]},
        {"level": "Request", "resources": [{"group": "", "resources": ["pods"]}]},
        {"level": "Metadata"},
    ],
}

# The cluster podium's e2e tests (and scripts/controlplane.py) use.
# zone -> GPUs per node: 8, 16 and 64 GPUs in all.
ZONES: dict[str, list[int]] = {"zone-a": [8], "zone-b": [8, 8], "zone-c": [8] * 8}


def controllers_for(
    controllers: Sequence[str], feature_gates: Mapping[str, bool]
) -> tuple[str, ...]:
    """``controllers``, plus the PodGroup protection controller when GenericWorkload is on."""
    chosen = tuple(controllers)
    if feature_gates.get("GenericWorkload") and PODGROUP_PROTECTION_CONTROLLER not in chosen:
        chosen += (PODGROUP_PROTECTION_CONTROLLER,)
    return chosen


def _gate_args(feature_gates: Mapping[str, bool]) -> list[str]:
    if not feature_gates:
        return []
    gates = ",".join(f"{k}={str(v).lower()}" for k, v in feature_gates.items())
    return [f"--feature-gates={gates}"]


def etcd_args(layout: Layout, *, client_url: str, peer_port: int) -> list[str]:
    peer = f"http://{HOST}:{peer_port}"
    return [
        "--name=podium-e2e",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=podium-e2e={peer}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_args(
    layout: Layout,
    *,
    etcd_url: str,
    port: int,
    feature_gates: Mapping[str, bool],
    runtime_config: Mapping[str, str],
    extra: Sequence[str] = (),
) -> list[str]:
    pki = layout.pki_dir
    runtime = ",".join(f"{k}={v}" for k, v in runtime_config.items())
    return [
        f"--etcd-servers={etcd_url}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--secure-port={port}",
        f"--cert-dir={layout.work_dir / 'kube-apiserver'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={layout.ca_file}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        # Endpoints may not hold a loopback address, so don't publish one for "kubernetes".
        "--endpoint-reconciler-type=none",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
        f"--audit-policy-file={layout.audit_policy_file}",
        f"--audit-log-path={layout.audit_log}",
        "--audit-log-format=json",
        "--allow-privileged=true",
        "--profiling=false",
        *_gate_args(feature_gates),
        *([f"--runtime-config={runtime}"] if runtime else []),
        *extra,
    ]


def controller_manager_args(
    layout: Layout, *, port: int, controllers: Sequence[str], feature_gates: Mapping[str, bool]
) -> list[str]:
    return [
        f"--kubeconfig={layout.kubeconfig}",
        f"--authentication-kubeconfig={layout.kubeconfig}",
        f"--authorization-kubeconfig={layout.kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={port}",
        f"--cert-dir={layout.work_dir / 'kube-controller-manager'}",
        "--leader-elect=false",
        f"--controllers={','.join(controllers)}",
        f"--service-account-private-key-file={layout.pki_dir / 'sa.key'}",
        f"--root-ca-file={layout.ca_file}",
        "--use-service-account-credentials=false",
        "--profiling=false",
        *_gate_args(feature_gates),
    ]


def scheduler_args(layout: Layout, *, port: int, feature_gates: Mapping[str, bool]) -> list[str]:
    """kube-scheduler's flags; writes its configuration file (no leader election)."""
    config = layout.work_dir / "kube-scheduler.yaml"
    configuration = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig)},
        "leaderElection": {"leaderElect": False},
    }
    config.write_text(yaml.safe_dump(configuration))
    return [
        f"--config={config}",
        f"--authentication-kubeconfig={layout.kubeconfig}",
        f"--authorization-kubeconfig={layout.kubeconfig}",
        f"--bind-address={HOST}",
        f"--secure-port={port}",
        f"--cert-dir={layout.work_dir / 'kube-scheduler'}",
        *_gate_args(feature_gates),
    ]


def kwok_args(layout: Layout) -> list[str]:
    key, value = FAKE_NODE_ANNOTATION
    return [
        f"--kubeconfig={layout.kubeconfig}",
        f"--config={layout.bin_dir / KWOK_STAGES_FILE}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--node-ip={HOST}",
        f"--cidr={POD_CIDR}",
        "--node-lease-duration-seconds=40",
    ]
