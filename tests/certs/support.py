"""Helpers the certificate tests share: a fixed clock, one rotation step on disk, the cluster's
trust as read, and a fake apiserver."""

from __future__ import annotations

import datetime
import http.server
import json
import stat
import threading
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from webhook import certs

DAY = datetime.timedelta(days=1)


T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def ext(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension[Any]:
    return cert.extensions.get_extension_for_class(kind)


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


A = certs.Action


def step(state_dir: Path, at: datetime.timedelta, **kwargs: Any) -> certs.Rotation:
    """One step at ``T0 + at``; the mechanics alone (no overlap) unless ``min_overlap`` says."""
    kwargs.setdefault("min_overlap", datetime.timedelta(0))
    rotation = certs.rotate(
        state_dir, now=T0 + at, leaf_lifetime=30 * DAY, ca_lifetime=90 * DAY, **kwargs
    )
    on_disk = certs.load_state(state_dir)
    assert on_disk.ca.cert == rotation.state.ca.cert
    assert on_disk.bundle == rotation.state.bundle
    assert on_disk.leaf.cert == rotation.state.leaf.cert
    assert (on_disk.next_ca and on_disk.next_ca.cert) == (
        rotation.state.next_ca and rotation.state.next_ca.cert
    )
    assert (state_dir / "ca-next.pem").exists() is (rotation.state.next_ca is not None)
    return rotation


def files(state_dir: Path) -> list[str]:
    return sorted(p.name for p in state_dir.iterdir())


HOOK = certs.WEBHOOK_NAMES[0]


def trust(*cas: x509.Certificate, secret: x509.Certificate | None = None) -> certs.ClusterTrust:
    return certs.ClusterTrust({HOOK: tuple(cas)}, secret)


def staged(state_dir: Path) -> certs.CertState:
    """The state right after B was staged at 61 days (A still signs)."""
    return step(state_dir, 61 * DAY).state


class FakeApiServer:
    """Records PATCH requests on 127.0.0.1 and answers like the apiserver would; GET answers
    from ``objects`` (path → object), else 404."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.objects: dict[str, dict[str, Any]] = {}
        recorder, objects = self.requests, self.objects

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.partition("?")[0]
                found = objects.get(path)
                status = 200 if found is not None else 404
                reply = json.dumps(
                    found
                    if found is not None
                    else {"kind": "Status", "code": 404, "message": f"{path} not found"}
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def do_PATCH(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                headers = {key.lower(): value for key, value in self.headers.items()}
                recorder.append({"path": self.path, "headers": headers, "body": body})
                reply = json.dumps(
                    {
                        "apiVersion": "admissionregistration.k8s.io/v1",
                        "kind": "MutatingWebhookConfiguration",
                        "metadata": body["metadata"],
                        "webhooks": [],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def assert_server_side_apply(request: dict[str, Any], bundle: bytes) -> None:
    path, _, query = request["path"].partition("?")
    assert path == "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/podium"
    assert sorted(query.split("&")) == ["fieldManager=podium-certs", "force=true"]
    assert request["headers"]["content-type"] == "application/apply-patch+yaml"
    assert request["body"] == certs.ca_bundle_patch("podium", bundle)


def kubeconfig_for(tmp_path: Path, url: str, context: str = "x") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
                "current-context": context,
            }
        )
    )
    return path


WEBHOOK_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/podium"


SECRET_PATH = "/api/v1/namespaces/podium-system/secrets/podium-tls"
