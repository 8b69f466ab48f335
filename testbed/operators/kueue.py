"""Kueue (kubernetes-sigs/kueue) as a local process beside a `LocalCluster`, with Topology Aware
Scheduling (TAS) for plain-pod groups: what the placement study's ``kueue-tas`` arm and
``tests/e2e/test_kueue.py`` run (docs/operators.md).

Built like the operators (``python -m testbed.build kueue``, `testbed.gobuild.operators.QUEUEING`),
run like JobSet: a controller-runtime manager configured by a ``Configuration`` file, its internal
cert management off, its admission webhooks served by the process on 127.0.0.1 with a serving
cert the runner issues, registered with the apiserver by URL. Only the webhooks for pods and for
Kueue's own kinds are registered: the ones for the job kinds of integrations not enabled here
would answer nothing. Kueue's visibility server (an aggregated API that listens on every
interface) is off (feature gate ``VisibilityOnDemand``).

The queueing objects (`tas_objects`): a `Topology` with the levels zone and hostname, one
ResourceFlavor naming it (selecting the KWOK nodes), a ClusterQueue whose GPU quota is the
cluster's, a LocalQueue. A gang becomes a plain-pod group (`pod_group`): every pod labelled with
the group's name and the queue, annotated with the group's size and a required zone topology.
Kueue gates each pod (``kueue.x-k8s.io/admission``, ``kueue.x-k8s.io/topology``), builds a
Workload once all the group's pods exist, admits it when quota and a zone with room on its nodes
allow, and its TopologyUngater removes the gates and pins each pod to the node TAS assigned.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from testbed import build as builder
from testbed.operators.runner import Build, ConfigFileOperator, OperatorError
from testbed.operators.webhooks import WEBHOOK_KINDS

__all__ = [
    "API",
    "GROUP_LABEL",
    "QUEUE_LABEL",
    "REQUIRED_TOPOLOGY",
    "TOTAL_COUNT",
    "Kueue",
    "build_kueue",
    "pod_group",
    "tas_objects",
]

API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
#: Where Kueue reads its metrics serving cert when its internal cert management is off.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
#: Namespaces whose pods Kueue never manages (its shipped kustomization's pod webhook selector).
UNMANAGED_NAMESPACES = ("kube-system", "kueue-system")


def build_kueue() -> Build:
    """Build (or find cached) Kueue; `OperatorError` when the build fails."""
    try:
        return Build.load(builder.build_operator("kueue"))
    except builder.BuildError as error:
        raise OperatorError(f"building kueue failed: {error}") from error


def _unmanaged() -> dict[str, Any]:
    return {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": list(UNMANAGED_NAMESPACES),
            }
        ]
    }


def _serves(hook: Mapping[str, Any]) -> bool:
    """A webhook for pods or for Kueue's own kinds."""
    return any(
        "pods" in rule.get("resources", []) or "kueue.x-k8s.io" in rule.get("apiGroups", [])
        for rule in hook.get("rules", [])
    )


class Kueue(ConfigFileOperator):
    """Kueue's manager with the plain-pod integration only (``integrations.frameworks: [pod]``)."""

    name = "kueue"
    namespace = "kueue-system"
    config_api = "config.kueue.x-k8s.io/v1beta2"
    webhook_dir = "config/components/webhook"
    webhook_name_prefix = "kueue-"
    service_dns = "kueue-webhook-service.kueue-system.svc"

    def configuration(self) -> dict[str, Any]:
        config = super().configuration()
        config.update(
            namespace=self.namespace,
            # The shipped manager config's client limits.
            clientConnection={"qps": 50, "burst": 100},
            managedJobsNamespaceSelector=_unmanaged(),
            integrations={"frameworks": ["pod"]},
            featureGates={"VisibilityOnDemand": False},
        )
        return config

    def prepare(self) -> None:
        """The serving cert, also where Kueue reads its metrics cert: with internal cert
        management off it opens ``/etc/kueue/metrics/certs/tls.{crt,key}``, a path fixed in
        ``cmd/kueue/main.go`` (no flag or setting), and exits without them."""
        super().prepare()
        assert self.certs is not None
        try:
            self.certs.write(METRICS_CERT_DIR)
        except PermissionError as error:
            raise OperatorError(
                f"Kueue reads its metrics cert from {METRICS_CERT_DIR} (fixed in its "
                f"cmd/kueue/main.go when internal cert management is off, as here: that would "
                f"issue certs for a Service name, not 127.0.0.1), and this user may not write "
                f"there: {error}; run as root, or create the directory writable first"
            ) from error

    def webhook_configurations(self) -> list[dict[str, Any]]:
        """The project's webhook manifests (``config/components/webhook/manifests.yaml``), cut to
        the pod and Kueue webhooks, the pod webhooks with the kustomization's namespace selector,
        pointed at this process."""
        assert self.certs is not None
        path = self.build.webhooks_dir / self.webhook_dir / "manifests.yaml"
        configurations = []
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document.get("kind") not in WEBHOOK_KINDS:
                continue
            hooks = [h for h in document.get("webhooks", []) if _serves(h)]
            for hook in hooks:
                service = hook.get("clientConfig", {}).get("service", {})
                hook["clientConfig"] = {
                    "url": f"{self.webhook_url}{service.get('path', '')}",
                    "caBundle": self.certs.ca_bundle,
                }
                if any("pods" in r.get("resources", []) for r in hook.get("rules", [])):
                    hook["namespaceSelector"] = _unmanaged()
            name = self.webhook_name_prefix + document["metadata"]["name"]
            configurations.append({**document, "metadata": {"name": name}, "webhooks": hooks})
        return configurations


def tas_objects(
    *,
    gpus: int,
    node_labels: Mapping[str, str],
    zone_label: str = "topology.kubernetes.io/zone",
    host_label: str = "kubernetes.io/hostname",
    resource: str = "nvidia.com/gpu",
    queue: str = "gpus",
    namespace: str,
) -> list[dict[str, Any]]:
    """Topology (zone, then host), a ResourceFlavor on it, a ClusterQueue with ``gpus`` of
    ``resource`` and a LocalQueue ``queue`` in ``namespace``: create them in this order."""
    name = "zones"
    levels = [{"nodeLabel": zone_label}, {"nodeLabel": host_label}]
    return [
        {
            "apiVersion": API,
            "kind": "Topology",
            "metadata": {"name": name},
            "spec": {"levels": levels},
        },
        {
            "apiVersion": API,
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": dict(node_labels), "topologyName": name},
        },
        {
            "apiVersion": API,
            "kind": "ClusterQueue",
            "metadata": {"name": queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [resource],
                        "flavors": [
                            {"name": name, "resources": [{"name": resource, "nominalQuota": gpus}]}
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": {"name": queue, "namespace": namespace},
            "spec": {"clusterQueue": queue},
        },
    ]


def pod_group(
    pod: dict[str, Any],
    *,
    group: str,
    size: int,
    queue: str,
    topology: str = "topology.kubernetes.io/zone",
) -> dict[str, Any]:
    """``pod`` as a member of the plain-pod group ``group`` of ``size`` pods in ``queue``, all
    of which must land in one domain of ``topology``; returns it."""
    meta = pod["metadata"]
    meta.setdefault("labels", {}).update({GROUP_LABEL: group, QUEUE_LABEL: queue})
    meta.setdefault("annotations", {}).update({TOTAL_COUNT: str(size), REQUIRED_TOPOLOGY: topology})
    return pod
