"""The control plane's certificates and kubeconfig, all issued by podium's own certificate code
(`webhook.certs`): a cluster CA, the apiserver's serving certificate, the admin's client
certificate, the front-proxy CA and client, and the service-account signing key."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from testbed.controlplane.flags import SERVICE_CLUSTER_IP_RANGE
from testbed.controlplane.layout import Layout
from testbed.processes import HOST
from webhook import certs

__all__ = ["CERT_LIFETIME", "issue", "write_kubeconfig", "write_pair", "write_pki"]

#: The test cluster's certificates live a week: longer than any run, short if one leaks.
CERT_LIFETIME = datetime.timedelta(days=7)
_CONTEXT = "podium-e2e"


def issue(
    ca: certs.KeyPair,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
) -> certs.KeyPair:
    """A week-long leaf signed by ``ca``, with the subject, SANs and usages the caller needs."""
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    return certs.issue_leaf(
        ca,
        subject=x509.Name(subject),
        sans=sans,
        lifetime=CERT_LIFETIME,
        now=datetime.datetime.now(datetime.UTC),
        usages=usages,
    )


def write_pair(directory: Path, name: str, pair: certs.KeyPair) -> tuple[Path, Path]:
    """``<name>.crt`` and ``<name>.key`` (mode 600) in ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(certs.cert_to_pem(pair.cert))
    key_path.write_bytes(certs.key_to_pem(pair.key))
    key_path.chmod(0o600)
    return cert_path, key_path


def write_pki(layout: Layout) -> certs.KeyPair:
    """Every certificate and key the components read, under ``layout.pki_dir``; returns the
    cluster CA (it signs the certificates tests ask for later)."""
    pki = layout.pki_dir
    ca = certs.issue_ca("podium-e2e-ca", lifetime=CERT_LIFETIME)
    write_pair(pki, "ca", ca)
    service_ip = str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts()))
    apiserver = issue(
        ca,
        common_name="kube-apiserver",
        dns_names=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ip_addresses=[HOST, service_ip],
        server=True,
    )
    write_pair(pki, "apiserver", apiserver)
    admin = issue(ca, common_name="podium-e2e-admin", organizations=["system:masters"], client=True)
    write_pair(pki, "admin", admin)
    # The front-proxy (request header) CA and client of the aggregation layer, as kubeadm sets
    # them up; without them every component logs a missing requestheader CA bundle.
    front_proxy = certs.issue_ca("podium-e2e-front-proxy-ca", lifetime=CERT_LIFETIME)
    (pki / "front-proxy-ca.crt").write_bytes(certs.cert_to_pem(front_proxy.cert))
    write_pair(
        pki, "front-proxy-client", issue(front_proxy, common_name="front-proxy-client", client=True)
    )
    _write_service_account_key(pki)
    return ca


def _write_service_account_key(pki: Path) -> None:
    """The key pair service-account tokens are signed with (a key, not a certificate)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "sa.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (pki / "sa.key").chmod(0o600)
    (pki / "sa.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def write_kubeconfig(layout: Layout, server: str) -> None:
    """The admin's kubeconfig: ``server`` with the cluster CA, the admin's client certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": _CONTEXT,
                "cluster": {"server": server, "certificate-authority": str(layout.ca_file)},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(layout.admin_cert_file),
                    "client-key": str(layout.admin_key_file),
                },
            }
        ],
        "contexts": [{"name": _CONTEXT, "context": {"cluster": _CONTEXT, "user": "admin"}}],
        "current-context": _CONTEXT,
    }
    layout.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
