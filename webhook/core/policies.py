"""The objects podium creates for a gang: its decision record and its allow policy. Pure.

Both are named after the gang (``labels.object_name``), owned by the job so the garbage collector
removes them with it, and labelled as managed by podium so people and the reconciler find them.
"""

from __future__ import annotations

import json
from typing import Any

from webhook.core import labels
from webhook.core.adapters.base import Gang
from webhook.core.settings import PolicyMode

Manifest = dict[str, Any]

RECORD_API_VERSION = "v1"
RECORD_KIND = "ConfigMap"
CILIUM_API_VERSION = "cilium.io/v2"
CILIUM_KIND = "CiliumNetworkPolicy"
K8S_POLICY_API_VERSION = "networking.k8s.io/v1"
K8S_POLICY_KIND = "NetworkPolicy"


def _metadata(gang: Gang, namespace: str, component: str) -> dict[str, Any]:
    return {
        "name": labels.object_name(gang.owner.kind, gang.owner.name, gang.key),
        "namespace": namespace,
        "labels": {
            labels.MANAGED_BY: labels.MANAGER,
            labels.COMPONENT: component,
            labels.JOB: gang.key,
        },
        "ownerReferences": [gang.owner.as_owner_reference()],
    }


def build_record(
    *,
    gang: Gang,
    namespace: str,
    zone: str | None,
    reason: str,
    detail: str,
    decided_at: str,
    chooser: str = "podium",
) -> Manifest:
    """The decision record: created atomically once per gang, so every replica follows one zone.
    A gang whose zone kube-scheduler chooses is recorded with ``zoneChooser: scheduler`` and no
    zone."""
    record: Manifest = {
        "apiVersion": RECORD_API_VERSION,
        "kind": RECORD_KIND,
        "metadata": _metadata(gang, namespace, "decision"),
        "data": {
            "zone": zone or "",
            "reason": reason,
            "detail": detail,
            "job": f"{gang.owner.api_version}/{gang.owner.kind}/{gang.owner.name}",
            "jobUID": gang.owner.uid,
            "gang": gang.key,
            "decidedAt": decided_at,
            # stdlib json: a (nonsensical but valid) request past 2**63 must not break the record
            "demand": json.dumps(gang.total, sort_keys=True, separators=(",", ":")),
        },
    }
    if chooser != "podium":
        record["data"]["zoneChooser"] = chooser
    return record


def build_policy(*, gang: Gang, namespace: str, mode: PolicyMode) -> Manifest | None:
    """Allow all traffic between the gang's own pods, and open nothing else.

    All ports: NCCL's bootstrap and peer sockets use ephemeral ports, so a port list breaks it.
    Cilium: ``enableDefaultDeny`` off both ways, so the policy only adds an allow and never puts
    the pods into default-deny. A namespaced policy selects only pods of its own namespace.
    Selecting on the per-gang label (not a per-pod one) keeps it to one identity per gang.
    """
    peers = {"matchLabels": {labels.JOB: gang.key}}
    if mode is PolicyMode.CILIUM:
        return {
            "apiVersion": CILIUM_API_VERSION,
            "kind": CILIUM_KIND,
            "metadata": _metadata(gang, namespace, "policy"),
            "spec": {
                "description": f"podium: traffic between the pods of {gang.display}",
                "endpointSelector": peers,
                "enableDefaultDeny": {"ingress": False, "egress": False},
                "ingress": [{"fromEndpoints": [peers]}],
                "egress": [{"toEndpoints": [peers]}],
            },
        }
    if mode is PolicyMode.KUBERNETES:
        return {
            "apiVersion": K8S_POLICY_API_VERSION,
            "kind": K8S_POLICY_KIND,
            "metadata": _metadata(gang, namespace, "policy"),
            "spec": {
                "podSelector": peers,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": peers}]}],
                "egress": [{"to": [{"podSelector": peers}]}],
            },
        }
    return None


def policy_kind(mode: PolicyMode) -> tuple[str, str] | None:
    if mode is PolicyMode.CILIUM:
        return CILIUM_API_VERSION, CILIUM_KIND
    if mode is PolicyMode.KUBERNETES:
        return K8S_POLICY_API_VERSION, K8S_POLICY_KIND
    return None
