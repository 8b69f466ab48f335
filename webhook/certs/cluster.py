"""Certificates as the cluster holds them: the Secret, the patch that sets the webhook's
``caBundle``, and what was read back (`ClusterCerts`). The reads and the apply themselves are
``webhook.ops.certs_cluster``'s (they need the Kubernetes client)."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography import x509

from webhook.certs.rotation import ClusterTrust

FIELD_MANAGER = "podium-certs"
WEBHOOK_CONFIG = "podium"
WEBHOOK_NAMES: tuple[str, ...] = ("pods.podium.dev",)
SECRET_NAME = "podium-tls"
SECRET_NAMESPACE = "podium-system"


def secret_manifest(
    *,
    name: str,
    namespace: str,
    tls_crt: bytes,
    tls_key: bytes,
    ca_crt: bytes,
) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret; ``ca.crt`` carries the CA bundle, as cert-manager does."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "podium",
                "app.kubernetes.io/managed-by": FIELD_MANAGER,
            },
        },
        "data": {"tls.crt": b64(tls_crt), "tls.key": b64(tls_key), "ca.crt": b64(ca_crt)},
    }


def ca_bundle_patch(
    webhook_config_name: str,
    bundle_pem: bytes,
    *,
    webhook_names: Sequence[str] = WEBHOOK_NAMES,
) -> dict[str, Any]:
    """A server-side-apply body that sets ``caBundle`` of the named webhooks and nothing else.

    ``webhooks`` is a map-list keyed by ``name`` (``+listType=map``), so under server-side apply
    each entry here merges into the existing webhook of that name; fields this body does not
    mention stay owned by whoever set them.
    """
    if not webhook_names:
        raise ValueError("name at least one webhook")
    bundle = base64.b64encode(bundle_pem).decode("ascii")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": webhook_config_name},
        "webhooks": [
            {"name": name, "clientConfig": {"caBundle": bundle}} for name in webhook_names
        ],
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterCerts:
    """What ``certs show --cluster`` and ``rotate`` read: each webhook's caBundle and the Secret
    (``None`` when it does not exist)."""

    webhook_config: str
    bundles: Mapping[str, tuple[x509.Certificate, ...]]
    secret: str
    secret_leaf: x509.Certificate | None
    secret_bundle: tuple[x509.Certificate, ...]
    secret_found: bool

    @property
    def trust(self) -> ClusterTrust:
        return ClusterTrust(self.bundles, self.secret_leaf)
