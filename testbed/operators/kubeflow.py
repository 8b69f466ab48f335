"""The Kubeflow operators: training-operator v1, mpi-operator and Trainer v2."""

from __future__ import annotations

import datetime
import time
from pathlib import Path
from typing import Any, ClassVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed.controlplane import LocalCluster
from testbed.operators.runner import Build, ConfigFileOperator, Operator, OperatorError
from testbed.operators.webhooks import (
    CA_LIFETIME,
    LEAF_LIFETIME,
    WebhookCerts,
    render_webhook_configurations,
    serving_sans,
)
from testbed.processes import HOST, free_port, machine_lock, port_free

__all__ = ["MPIOperator", "Trainer", "TrainingOperator", "issue_rotator_certs"]


def _pkcs1(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def issue_rotator_certs(ca_name: str, dns_names: list[str]) -> WebhookCerts:
    """Certificates open-policy-agent/cert-controller's rotator keeps instead of replacing.

    Why not `webhook.certs` (ECDSA): the rotator reads the CA key of its Secret with
    ``x509.ParsePKCS1PrivateKey``, which only knows RSA, and it keeps a CA only when it names
    itself as a DNS SAN. A CA it cannot read is replaced by its own, injected into the webhook
    configuration, and the serving cert it would make does not name 127.0.0.1. So this one
    issuer makes an RSA CA (PKCS#1 key, its own name as SAN) and an RSA serving cert.
    """
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ca_name),
            x509.NameAttribute(NameOID.COMMON_NAME, ca_name),
        ]
    )
    usage = x509.KeyUsage(
        digital_signature=True,
        key_encipherment=True,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    ca_cert = (
        _builder(ca_subject, ca_subject, ca_key.public_key(), now, CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])])
    cert = (
        _builder(subject, ca_subject, key.public_key(), now, LEAF_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(serving_sans(dns_names)), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return WebhookCerts(
        ca_cert=ca_cert.public_bytes(serialization.Encoding.PEM),
        ca_key=_pkcs1(ca_key),
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=_pkcs1(key),
    )


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: rsa.RSAPublicKey,
    now: datetime.datetime,
    lifetime: datetime.timedelta,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + lifetime)
    )


class TrainingOperator(Operator):
    """Kubeflow training-operator v1 (``cmd/training-operator.v1``).

    It always runs cert-controller's rotator on the Secret ``training-operator-webhook-cert``
    (namespace ``kubeflow``, or ``$MY_POD_NAMESPACE``) for ``training-operator.kubeflow.svc``,
    injects the CA into ``validator.training-operator.kubeflow.org`` and only reports ready (and
    only starts its controllers) once the rotator sees ``tls.crt`` in the hard-coded
    ``/tmp/k8s-webhook-server/serving-certs``. Its webhook server itself reads
    ``$TMPDIR/k8s-webhook-server/serving-certs`` and listens on every interface (no host flag).
    """

    name = "trainingoperator"
    namespace = "kubeflow"
    secret_name = "training-operator-webhook-cert"
    #: The schemes to run. MPIJob v1 is left out: its CRD has the name of mpi-operator's v2beta1.
    schemes: ClassVar[tuple[str, ...]] = (
        "TFJob",
        "PyTorchJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
    )
    rotator_cert_dir = Path("/tmp/k8s-webhook-server/serving-certs")

    def crd_files(self) -> list[Path]:
        return [p for p in super().crd_files() if p.name != "kubeflow.org_mpijobs.yaml"]

    def args(self) -> list[str]:
        return [
            f"--metrics-bind-address={HOST}:{self.metrics_port}",
            f"--health-probe-bind-address={HOST}:{self.health_port}",
            f"--webhook-server-port={self.webhook_port}",
            "--leader-elect=false",
            *(f"--enable-scheme={s}" for s in self.schemes),
        ]

    def env(self) -> dict[str, str]:
        return {"MY_POD_NAMESPACE": self.namespace}

    def prepare(self) -> None:
        dns = [f"training-operator.{self.namespace}.svc"]
        self.certs = certs = issue_rotator_certs("training-operator-ca", dns)
        certs.write(self.cert_dir)
        self.cluster.apply(certs.secret(self.secret_name, self.namespace))
        certs.write(self.default_webhook_cert_dir())
        # The rotator only checks that tls.crt exists there; the server never reads it.
        if not (self.rotator_cert_dir / "tls.crt").exists():
            certs.write(self.rotator_cert_dir)

    def webhook_configurations(self) -> list[dict[str, Any]]:
        assert self.certs is not None
        return render_webhook_configurations(
            self.build.webhooks_dir / "manifests/base/webhook",
            url=self.webhook_url,
            ca_bundle=self.certs.ca_bundle,
        )


class MPIOperator(Operator):
    """kubeflow/mpi-operator (MPIJob ``kubeflow.org/v2beta1``); no webhooks.

    Leader election cannot be turned off (the lease lives in ``--lock-namespace``), and the
    health server listens on the hard-coded ``:8080`` on every interface, so only one
    mpi-operator runs per machine: `start` takes a machine-wide lock and waits for the port.
    """

    name = "mpioperator"
    namespace = "mpi-operator"
    health_path = "/healthz"
    health_port_fixed = 8080

    def __init__(self, cluster: LocalCluster, build: Build, work_dir: Path | str) -> None:
        super().__init__(cluster, build, work_dir)
        self.health_port = self.health_port_fixed

    def args(self) -> list[str]:
        return [
            f"--kubeConfig={self.cluster.kubeconfig}",
            f"--lock-namespace={self.namespace}",
            "--monitoring-port=0",
            "--threadiness=2",
        ]

    def prepare(self) -> None:
        try:
            self._stack.enter_context(machine_lock("mpi-operator-8080", timeout=600))
        except TimeoutError as error:
            raise OperatorError(str(error)) from None
        deadline = time.monotonic() + 60
        while not port_free(self.health_port_fixed):
            if time.monotonic() > deadline:
                raise OperatorError(f"port {self.health_port_fixed} stays in use")
            time.sleep(0.5)


class Trainer(ConfigFileOperator):
    """Kubeflow Trainer v2 (``cmd/trainer-controller-manager``): TrainJob → JobSet, so the JobSet
    operator must run too. Its webhook cert dir is not configurable: controller-runtime's
    default under ``$TMPDIR``."""

    name = "trainer"
    namespace = "kubeflow-system"
    config_api = "config.trainer.kubeflow.org/v1alpha1"
    webhook_dir = "manifests/base/webhook"
    service_dns = "kubeflow-trainer-controller-manager.kubeflow-system.svc"

    def configuration(self) -> dict[str, Any]:
        return {
            "apiVersion": self.config_api,
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
            "webhook": {"port": self.webhook_port, "host": HOST},
            "metrics": {"bindAddress": f"{HOST}:{self.metrics_port}", "secureServing": False},
            "health": {"healthProbeBindAddress": f"{HOST}:{self.health_port}"},
            "statusServer": {"port": free_port()},
        }

    def prepare(self) -> None:
        super().prepare()
        assert self.certs is not None
        self.certs.write(self.default_webhook_cert_dir())
