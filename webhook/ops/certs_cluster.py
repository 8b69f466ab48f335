"""Certificates to and from the cluster: server-side-apply the webhook's ``caBundle``, read the
caBundles and the serving Secret back (``podium certs inject``, ``show --cluster``, ``rotate``).

What those objects look like is ``webhook.certs`` (a floor of its own, no Kubernetes client); the
calls are here, on the commands' floor, beside ``connect`` which words their failures.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography import x509

from webhook.certs import (
    FIELD_MANAGER,
    SECRET_NAME,
    SECRET_NAMESPACE,
    WEBHOOK_CONFIG,
    WEBHOOK_NAMES,
    ClusterCerts,
    ClusterReadError,
    ca_bundle_patch,
    certs_from_pem,
)


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
