"""Handing certificates to the cluster: the Secret and the webhook's ``caBundle``; reading both."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography import x509

from webhook.ops.certs.errors import ClusterReadError
from webhook.ops.certs.keys import certs_from_pem
from webhook.ops.certs.rotation import ClusterTrust

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


def apply_ca_bundle(
    api_client: Any,
    name: str,
    bundle_pem: bytes,
    *,
    webhook_names: Sequence[str] = WEBHOOK_NAMES,
) -> Any:
    """Server-side-apply ``caBundle`` onto a MutatingWebhookConfiguration (no get-then-replace).

    ``force=True`` takes the field over from another manager (an earlier injector); the result is
    the updated configuration as the client's model object.
    """
    # Imported here: the client costs most of a second to import and only this function needs it.
    from kubernetes import client  # noqa: PLC0415

    api = client.AdmissionregistrationV1Api(api_client)
    return api.patch_mutating_webhook_configuration(
        name,
        ca_bundle_patch(name, bundle_pem, webhook_names=webhook_names),
        field_manager=FIELD_MANAGER,
        force=True,
        _content_type="application/apply-patch+yaml",
        _request_timeout=(5.0, 30.0),
    )


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


def _pem_certs(data: bytes) -> tuple[x509.Certificate, ...]:
    return tuple(certs_from_pem(data)) if data.strip() else ()


def read_cluster(
    api_client: Any,
    *,
    name: str = WEBHOOK_CONFIG,
    webhook_names: Sequence[str] = WEBHOOK_NAMES,
    secret: tuple[str, str] | None = (SECRET_NAMESPACE, SECRET_NAME),
    timeout: tuple[float, float] = (5.0, 30.0),
) -> ClusterCerts:
    """Read the webhook configuration's caBundles and the serving Secret from the cluster.

    Raises `ClusterReadError` when the webhook configuration (or a named webhook in it) is not
    there or the API cannot be reached; a missing Secret is not an error (``secret_found``)."""
    bundles = _read_bundles(api_client, name=name, webhook_names=webhook_names, timeout=timeout)
    if secret is None:
        return ClusterCerts(name, bundles, "", None, (), False)
    namespace, secret_name = secret
    data = _read_secret(api_client, namespace, secret_name, timeout=timeout)
    if data is None:
        return ClusterCerts(name, bundles, f"{namespace}/{secret_name}", None, (), False)
    crt = _pem_certs(base64.b64decode(data.get("tls.crt") or ""))
    ca_crt = _pem_certs(base64.b64decode(data.get("ca.crt") or ""))
    leaf = crt[0] if crt else None
    return ClusterCerts(name, bundles, f"{namespace}/{secret_name}", leaf, ca_crt, True)


def _read_bundles(
    api_client: Any, *, name: str, webhook_names: Sequence[str], timeout: tuple[float, float]
) -> dict[str, tuple[x509.Certificate, ...]]:
    """The CAs each named webhook's caBundle holds; `ClusterReadError` when the configuration or
    a named webhook is missing, or the API cannot be reached."""
    from kubernetes import client  # noqa: PLC0415

    from webhook.ops import connect  # noqa: PLC0415

    try:
        config = client.AdmissionregistrationV1Api(api_client).read_mutating_webhook_configuration(
            name, _request_timeout=timeout
        )
    except client.ApiException as err:
        if err.status == 404:
            raise ClusterReadError(
                f"MutatingWebhookConfiguration {name} does not exist (pass --name)"
            ) from err
        raise ClusterReadError(connect.describe(err, api_client)) from err
    except Exception as err:  # urllib3's connection errors, timeouts
        raise ClusterReadError(connect.describe(err, api_client)) from err
    hooks = {w.name: w for w in config.webhooks or []}
    bundles: dict[str, tuple[x509.Certificate, ...]] = {}
    for hook in webhook_names:
        if hook not in hooks:
            known = ", ".join(sorted(hooks)) or "none"
            raise ClusterReadError(
                f"MutatingWebhookConfiguration {name} has no webhook {hook} (it has: {known}; "
                "pass --webhook)"
            )
        encoded = (hooks[hook].client_config and hooks[hook].client_config.ca_bundle) or ""
        bundles[hook] = _pem_certs(base64.b64decode(encoded))
    return bundles


def _read_secret(
    api_client: Any, namespace: str, name: str, *, timeout: tuple[float, float]
) -> Mapping[str, Any] | None:
    """The serving Secret's data; None when it does not exist."""
    from kubernetes import client  # noqa: PLC0415

    from webhook.ops import connect  # noqa: PLC0415

    try:
        obj = client.CoreV1Api(api_client).read_namespaced_secret(
            name, namespace, _request_timeout=timeout
        )
    except client.ApiException as err:
        if err.status != 404:
            raise ClusterReadError(connect.describe(err, api_client)) from err
        return None
    except Exception as err:
        raise ClusterReadError(connect.describe(err, api_client)) from err
    data: Mapping[str, Any] = obj.data or {}
    return data
