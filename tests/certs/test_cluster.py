"""``webhook.certs.cluster``: the Secret and the caBundle patch; ``webhook.ops.certs_cluster``: its
server-side apply."""

from __future__ import annotations

import base64

import pytest

from tests.certs.support import FakeApiServer, assert_server_side_apply
from webhook import certs
from webhook.ops import certs_cluster


class TestClusterObjects:
    def test_secret_manifest(self) -> None:
        secret = certs.secret_manifest(
            name="podium-tls", namespace="podium-system", tls_crt=b"C", tls_key=b"K", ca_crt=b"A"
        )
        assert secret["apiVersion"] == "v1"
        assert secret["kind"] == "Secret"
        assert secret["type"] == "kubernetes.io/tls"
        assert secret["metadata"]["name"] == "podium-tls"
        assert secret["metadata"]["namespace"] == "podium-system"
        decoded = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        assert decoded == {"tls.crt": b"C", "tls.key": b"K", "ca.crt": b"A"}

    def test_ca_bundle_patch_names_only_the_bundle_of_each_webhook(self) -> None:
        assert certs.ca_bundle_patch("podium", b"PEM") == {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "podium"},
            "webhooks": [
                {"name": "pods.podium.dev", "clientConfig": {"caBundle": "UEVN"}},
            ],
        }
        two = certs.ca_bundle_patch("podium", b"PEM", webhook_names=["a.dev", "b.dev"])
        assert [w["name"] for w in two["webhooks"]] == ["a.dev", "b.dev"]
        with pytest.raises(ValueError, match="at least one"):
            certs.ca_bundle_patch("podium", b"PEM", webhook_names=[])


def test_apply_ca_bundle_sends_a_forced_server_side_apply(apiserver: FakeApiServer) -> None:
    from kubernetes import client  # noqa: PLC0415

    configuration = client.Configuration()
    configuration.host = apiserver.url
    with client.ApiClient(configuration) as api_client:
        result = certs_cluster.apply_ca_bundle(api_client, "podium", b"BUNDLE")
    assert result.metadata.name == "podium"
    assert len(apiserver.requests) == 1
    assert_server_side_apply(apiserver.requests[0], b"BUNDLE")
