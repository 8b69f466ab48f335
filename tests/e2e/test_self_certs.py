"""``podium serve --certs self`` (the chart's default) on the local control plane: podium makes,
injects and rotates its own serving certificate.

podium runs as the chart's ServiceAccount with the chart's RBAC (the Secret created empty, get and
update on it and on the webhook configuration, by name), registered with the shipped webhook
configuration without any caBundle and with ``failurePolicy: Fail``, so that an admission the
apiserver cannot make (podium unreachable, or its certificate not trusted) refuses the pod instead
of letting it through unpinned: a failed admission is an error we count, never a silent one.

* Nothing pre-issued: the first admission succeeds within seconds of podium's start (the time is
  printed: ``pytest -s``).
* Three CA rotations asked for (``podium.dev/rotate``) under a pod-creation load: no admission
  fails (sent and failed are printed).
* A replica started mid-rotation (the new CA signing, the old one still in the bundle) serves the
  Secret's certificate, which the webhook configuration's bundle verifies; admissions through it
  succeed while it takes over the leadership and finishes the rotation.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from testbed.controlplane import ApiError, LocalCluster
from testbed.podium import NAMESPACE, Podium, opted_in_namespace
from webhook.certs import selfmanaged

pytestmark = pytest.mark.e2e

SECRET = "podium-tls"
SECRET_PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


class SelfCertPodium(Podium):
    """``podium serve --certs self`` as the chart runs it, plus the URL's IP as a name."""

    name = "podium serve --certs self"

    def __init__(
        self, cluster: LocalCluster, work_dir: Path, *, overlap: float, interval: float = 0.5
    ) -> None:
        super().__init__(cluster, work_dir)
        self.overlap = overlap
        self.interval = interval

    def command(self) -> list[str]:
        args = super().command()
        for flag in ("--cert-file", "--key-file"):  # the test bed's own pair: not used here
            at = args.index(flag)
            del args[at : at + 2]
        return [
            *args,
            "--certs",
            "self",
            "--san",
            "127.0.0.1",
            "--certs-dir",
            str(self.work_dir / "certs"),
            "--certs-interval",
            str(self.interval),
            "--certs-overlap",
            str(self.overlap),
        ]

    def ready(self) -> bool:
        """``/readyz``, whoever signed the certificate (checked on its own: `served`)."""
        return self._answers("/readyz")

    def alive(self) -> bool:
        """``/healthz``: the process serves (with whatever certificate)."""
        return self._answers("/healthz")

    def _answers(self, path: str) -> bool:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            with (
                socket.create_connection(("127.0.0.1", self.port), timeout=2) as raw,
                context.wrap_socket(raw) as tls,
            ):
                request = f"GET {path} HTTP/1.1\r\nHost: podium\r\nConnection: close\r\n\r\n"
                tls.sendall(request.encode())
                return tls.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def served(self) -> x509.Certificate:
        """The certificate this replica serves now."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with (
            socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw,
            context.wrap_socket(raw) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der)

    def verified_by(self, bundle_pem: bytes) -> bool:
        """A TLS handshake trusting only ``bundle_pem`` (and checking the name 127.0.0.1)
        succeeds, as the apiserver's does with the caBundle."""
        context = ssl.create_default_context(cadata=bundle_pem.decode())
        try:
            with (
                socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw,
                context.wrap_socket(raw, server_hostname="127.0.0.1"),
            ):
                return True
        except ssl.SSLError:
            return False

    def webhook_configuration(self) -> dict[str, Any]:
        """The shipped configuration, pointed at this process, with no caBundle (podium's to
        inject) and failing closed, so that every failed admission is seen."""
        config = super().webhook_configuration()
        for hook in config["webhooks"]:
            hook["clientConfig"] = {"url": f"{self.url}/mutate"}
            hook["failurePolicy"] = "Fail"
        return config


# -- the cluster's side ---------------------------------------------------------------------------


def secret(cluster: LocalCluster) -> dict[str, Any]:
    found: dict[str, Any] = cluster.request("GET", SECRET_PATH)
    return found


def secret_data(cluster: LocalCluster) -> dict[str, str]:
    return dict(secret(cluster).get("data") or {})


def pem(data: dict[str, str], key: str) -> bytes:
    return base64.b64decode(data.get(key) or "")


def certificates(blob: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(blob) if blob.strip() else []


def webhook_bundle(cluster: LocalCluster) -> bytes:
    config = cluster.request("GET", f"{WEBHOOKS}/podium")
    (hook,) = config["webhooks"]
    return base64.b64decode(hook["clientConfig"].get("caBundle") or "")


def point_webhook_at(cluster: LocalCluster, server: Podium) -> None:
    """The webhook's URL to ``server``, its caBundle (podium's) kept: an update under the
    resourceVersion read, again if podium updated it in between."""
    for _ in range(20):
        config = cluster.request("GET", f"{WEBHOOKS}/podium")
        for hook in config["webhooks"]:
            hook["clientConfig"]["url"] = f"{server.url}/mutate"
        try:
            cluster.request("PUT", f"{WEBHOOKS}/podium", config)
            return
        except ApiError as error:
            if error.status != 409:
                raise
    raise AssertionError("the webhook configuration kept changing")


def reset(cluster: LocalCluster) -> None:
    """No certificate anywhere: the Secret and the webhook configuration gone (the chart's empty
    Secret is applied again when podium's account is installed)."""
    for where in (SECRET_PATH, f"{WEBHOOKS}/podium"):
        with contextlib.suppress(ApiError):
            cluster.request("DELETE", where)


# -- admissions -----------------------------------------------------------------------------------


def pod(namespace: str) -> dict[str, Any]:
    """A pod the webhook is called for (a controller owns it), created as a dry run."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "load-",
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": "load.podium.dev/v1",
                    "kind": "Load",
                    "name": "load",
                    "uid": "00000000-0000-4000-8000-000000000001",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "load:1"}]},
    }


def admit(cluster: LocalCluster, namespace: str) -> str | None:
    """One admission; None when it succeeded, else the apiserver's words."""
    try:
        cluster.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", pod(namespace), query={"dryRun": "All"}
        )
    except ApiError as error:
        return str(error)
    return None


class Load:
    """Pods created (dry run) by a few threads until stopped: how many, and which failed."""

    def __init__(self, cluster: LocalCluster, namespace: str, threads: int = 3) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.sent = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self._stop.is_set():
            failure = admit(self.cluster, self.namespace)
            with self._lock:
                self.sent += 1
                if failure is not None:
                    self.failures.append(failure)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


# -- the tests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def opted_in(local_cluster: LocalCluster) -> Iterator[str]:
    with opted_in_namespace(local_cluster, "self-certs") as name:
        yield name


@pytest.fixture(scope="module")
def first(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory, opted_in: str
) -> Iterator[tuple[SelfCertPodium, float]]:
    """podium installed with nothing pre-issued, and how long after its start the first
    admission succeeded (printed beside how long the process took to serve at all)."""
    reset(local_cluster)
    server = SelfCertPodium(local_cluster, tmp_path_factory.mktemp("self-certs"), overlap=3.0)
    assert not secret(local_cluster).get("data"), "the chart's Secret starts empty"
    server.register()
    assert webhook_bundle(local_cluster) == b""
    started = time.monotonic()
    server.launch()
    try:
        local_cluster.wait_for("podium to serve", server.alive, timeout=90)
        alive = time.monotonic() - started
        local_cluster.wait_for(
            "the first admission", lambda: admit(local_cluster, opted_in) is None, timeout=90
        )
        took = time.monotonic() - started
        print(f"\n`podium serve --certs self` serving (/healthz) {alive:.2f} s after its start")
        yield server, took
    finally:
        server.stop()
        reset(local_cluster)  # no webhook failing closed left behind for the next module


def test_admissions_work_within_seconds_with_nothing_pre_issued(
    local_cluster: LocalCluster, first: tuple[SelfCertPodium, float]
) -> None:
    server, took = first
    print(f"\nfirst admission {took:.2f} s after `podium serve --certs self` started")
    server.wait_ready()
    data = secret_data(local_cluster)
    leaf = certificates(pem(data, "tls.crt"))[0]
    (ca,) = certificates(pem(data, "ca.crt"))
    # The Secret holds the CA and what it signed; the webhook trusts exactly that CA; the
    # replica serves the Secret's certificate, for the name it is called by.
    assert certificates(pem(data, "signer.crt")) == [ca]
    assert certificates(webhook_bundle(local_cluster)) == [ca]
    assert server.served() == leaf
    assert server.verified_by(pem(data, "ca.crt"))
    assert "127.0.0.1" in [
        str(ip)
        for ip in leaf.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value.get_values_for_type(x509.IPAddress)
    ]
    assert secret(local_cluster)["metadata"]["labels"]["app.kubernetes.io/name"] == "podium"
    # What a person checks it with (docs/certificates.md): the caBundle trusts the Secret's.
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "certs",
            "show",
            "--cluster",
            "--dir",
            str(server.work_dir / "no-state-dir"),
            "--kubeconfig",
            str(local_cluster.kubeconfig),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    checks = json.loads(shown.stdout)["checks"]
    assert checks and all(check["ok"] for check in checks), checks


def rotation_done(cluster: LocalCluster, token: str, before: x509.Certificate) -> bool:
    """podium acted on ``token`` and finished: one CA in the bundle, a new one, none staged."""
    found = secret(cluster)
    data = found.get("data") or {}
    annotations = found["metadata"].get("annotations") or {}
    bundle = certificates(pem(data, "ca.crt"))
    return (
        annotations.get(selfmanaged.ROTATED_ANNOTATION) == token
        and "signer-next.crt" not in data
        and len(bundle) == 1
        and bundle[0] != before
        and certificates(webhook_bundle(cluster)) == bundle
    )


def ask_rotation(cluster: LocalCluster) -> tuple[str, x509.Certificate]:
    token = f"e2e-{uuid.uuid4().hex[:8]}"
    (before,) = certificates(pem(secret_data(cluster), "ca.crt"))
    cluster.request(
        "PATCH",
        SECRET_PATH,
        {"metadata": {"annotations": {selfmanaged.ROTATE_ANNOTATION: token}}},
        content_type="application/merge-patch+json",
    )
    return token, before


def test_forced_rotations_under_load_fail_no_admission(
    local_cluster: LocalCluster, first: tuple[SelfCertPodium, float], opted_in: str
) -> None:
    server, _ = first
    leaves = {server.served().serial_number}
    with Load(local_cluster, opted_in) as load:
        for _ in range(3):
            token, before = ask_rotation(local_cluster)
            local_cluster.wait_for(
                f"rotation {token}",
                lambda: rotation_done(local_cluster, token, before),  # noqa: B023
                timeout=120,
            )
            data = secret_data(local_cluster)
            local_cluster.wait_for(
                "the replica to serve the new certificate",
                lambda: server.served() == certificates(pem(data, "tls.crt"))[0],  # noqa: B023
                timeout=30,
            )
            leaves.add(server.served().serial_number)
            assert server.verified_by(webhook_bundle(local_cluster))
    print(f"\nforced CA rotations: 3; admissions sent {load.sent}, failed {len(load.failures)}")
    assert len(leaves) == 4
    assert load.sent > 0
    assert load.failures == [], load.failures[:3]


def test_a_replica_started_mid_rotation_serves_a_valid_chain(
    local_cluster: LocalCluster,
    tmp_path_factory: pytest.TempPathFactory,
    first: tuple[SelfCertPodium, float],
    opted_in: str,
) -> None:
    first[0].stop()  # its lease released: the next replica leads at once
    # A leader whose overlap outlasts the test: its rotation stops with the new CA signing and
    # the old still trusted, until another replica leads.
    holding = SelfCertPodium(local_cluster, tmp_path_factory.mktemp("holding"), overlap=3600)
    holding.start()
    point_webhook_at(local_cluster, holding)
    late: SelfCertPodium | None = None
    try:
        token, before = ask_rotation(local_cluster)

        def promoted() -> bool:
            data = secret_data(local_cluster)
            bundle = certificates(pem(data, "ca.crt"))
            signer = certificates(pem(data, "signer.crt"))
            return (
                len(bundle) == 2
                and before in bundle
                and signer[0] != before
                and "signer-next.crt" not in data
                and len(certificates(webhook_bundle(local_cluster))) == 2
            )

        local_cluster.wait_for("the new CA to sign", promoted, timeout=60)
        mid = secret_data(local_cluster)
        late = SelfCertPodium(local_cluster, tmp_path_factory.mktemp("late"), overlap=2.0)
        late.start()
        # It serves the Secret's certificate, signed by the new CA, which the webhook trusts.
        assert secret_data(local_cluster) == mid, "the rotation moved on before the replica"
        assert late.served() == certificates(pem(mid, "tls.crt"))[0]
        assert late.verified_by(webhook_bundle(local_cluster))
        with Load(local_cluster, opted_in) as load:
            point_webhook_at(local_cluster, late)
            # The apiserver takes the new URL up asynchronously: stop the holding leader only
            # once the late replica is being called (stopping a replica still called is an
            # outage of its own, not the certificate's).
            local_cluster.wait_for(
                "the late replica to be called",
                lambda: any(r.get("namespace") == opted_in for r in late.audit_records()),
                timeout=60,
            )
            # The holding leader goes: the late replica leads and drops the old CA.
            holding.stop()
            local_cluster.wait_for(
                "the late replica to finish the rotation",
                lambda: rotation_done(local_cluster, token, before),
                timeout=120,
            )
            assert late.verified_by(webhook_bundle(local_cluster))
        print(
            f"\nreplica started mid-rotation: admissions through it sent {load.sent}, "
            f"failed {len(load.failures)}"
        )
        assert load.sent > 0
        ports = {"holding": holding.port, "late": late.port}
        assert load.failures == [], (ports, load.failures[:3])
    finally:
        holding.stop()
        if late is not None:
            late.stop()
        reset(local_cluster)
