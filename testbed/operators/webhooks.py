"""The operators' own admission webhooks, served by the operator processes on 127.0.0.1: their
serving certificates and their webhook configurations, rendered from each project's kustomization.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from testbed.processes import HOST
from webhook import certs

__all__ = [
    "CA_LIFETIME",
    "LEAF_LIFETIME",
    "WEBHOOK_API",
    "WEBHOOK_KINDS",
    "WebhookCerts",
    "issue_webhook_certs",
    "render_webhook_configurations",
    "serving_sans",
]

# Longer than the 90-day look-ahead of open-policy-agent/cert-controller's rotator, which
# replaces any CA or serving cert that expires sooner (and its own would lack 127.0.0.1).
CA_LIFETIME = datetime.timedelta(days=3650)
LEAF_LIFETIME = datetime.timedelta(days=1825)
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
WEBHOOK_API = "/apis/admissionregistration.k8s.io/v1"


@dataclass(frozen=True)
class WebhookCerts:
    """A CA and a serving certificate it signed, PEM-encoded."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    @property
    def ca_bundle(self) -> str:
        """The CA as ``clientConfig.caBundle`` wants it (base64 PEM)."""
        return base64.b64encode(self.ca_cert).decode()

    def write(self, directory: Path, cert_name: str = "tls.crt", key_name: str = "tls.key") -> Path:
        """Write the serving pair (and ``ca.crt``) into ``directory`` as a mounted Secret would."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / cert_name).write_bytes(self.cert)
        (directory / key_name).write_bytes(self.key)
        (directory / key_name).chmod(0o600)
        (directory / "ca.crt").write_bytes(self.ca_cert)
        return directory

    def secret(self, name: str, namespace: str) -> dict[str, Any]:
        """The cert Secret in the layout of open-policy-agent/cert-controller's rotator."""
        data = {
            "ca.crt": self.ca_cert,
            "ca.key": self.ca_key,
            "tls.crt": self.cert,
            "tls.key": self.key,
        }
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }


def serving_sans(dns_names: Sequence[str]) -> list[x509.GeneralName]:
    """``dns_names``, localhost and 127.0.0.1: the names an operator's webhook is called by."""
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in [*dns_names, "localhost"]]
    sans.append(x509.IPAddress(ipaddress.ip_address(HOST)))
    return sans


def issue_webhook_certs(ca_name: str, dns_names: Sequence[str]) -> WebhookCerts:
    """A CA named ``ca_name`` and a serving cert it signed for ``dns_names``, localhost and
    127.0.0.1, from podium's own certificate code."""
    ca = certs.issue_ca(ca_name, lifetime=CA_LIFETIME)
    leaf = certs.issue_leaf(
        ca,
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]),
        sans=serving_sans(dns_names),
        lifetime=LEAF_LIFETIME,
        now=datetime.datetime.now(datetime.UTC),
    )
    return WebhookCerts(
        ca_cert=ca.cert_pem(), ca_key=ca.key_pem(), cert=leaf.cert_pem(), key=leaf.key_pem()
    )


def _matches(document: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    if "kind" in target and document.get("kind") != target["kind"]:
        return False
    return "name" not in target or document["metadata"]["name"] == target["name"]


def render_webhook_configurations(
    kustomize_dir: Path,
    *,
    url: str,
    ca_bundle: str,
    name_prefix: str = "",
) -> list[dict[str, Any]]:
    """The webhook configurations of a project's webhook kustomization, pointed at ``url``.

    Reads the ``resources`` of ``kustomize_dir/kustomization.yaml``, keeps the
    Mutating/ValidatingWebhookConfigurations, applies its JSON6902 ``patches`` (from a file or
    inline) to their targets, prefixes the names (``name_prefix`` stands for the enclosing
    overlay's ``namePrefix``), and turns every ``clientConfig.service`` into
    ``url + service.path`` with ``caBundle``.
    """
    kustomization = yaml.safe_load((kustomize_dir / "kustomization.yaml").read_text())
    documents: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        for document in yaml.safe_load_all((kustomize_dir / resource).read_text()):
            if document and document.get("kind") in WEBHOOK_KINDS:
                documents.append(document)
    for patch in kustomization.get("patches", []):
        if "path" in patch:
            operations = yaml.safe_load((kustomize_dir / patch["path"]).read_text())
        else:
            operations = yaml.safe_load(patch["patch"])
        target = patch.get("target", {})
        documents = [
            jsonpatch.apply_patch(d, operations) if _matches(d, target) else d for d in documents
        ]
    prefix = name_prefix + kustomization.get("namePrefix", "")
    for document in documents:
        document["metadata"] = {"name": prefix + document["metadata"]["name"]}
        for hook in document.get("webhooks", []):
            path = hook.get("clientConfig", {}).get("service", {}).get("path", "")
            hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
    return documents
