"""Issuing: a CA, a leaf it signs, a serving leaf for a Service, and a leaf re-issued as it was."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certs.errors import CertStateError
from webhook.certs.keys import KeyPair
from webhook.certs.names import DEFAULT_CLUSTER_DOMAIN, parse_sans, serving_names

DEFAULT_CA_LIFETIME = datetime.timedelta(days=730)
DEFAULT_LEAF_LIFETIME = datetime.timedelta(days=90)
DEFAULT_CA_NAME = "podium-ca"
#: Certificates start this long before they are issued, so that a peer whose clock is a little
#: behind does not see a brand-new certificate as "not yet valid".
CLOCK_SKEW = datetime.timedelta(minutes=5)


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def check_time(now: datetime.datetime | None) -> datetime.datetime:
    if now is None:
        return utcnow()
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now


def _check_lifetime(lifetime: datetime.timedelta) -> None:
    if lifetime <= datetime.timedelta(0):
        raise ValueError(f"lifetime must be positive, got {lifetime}")


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def issue_ca(
    common_name: str,
    *,
    lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A self-signed CA that may sign leaves only (path length 0)."""
    now = check_time(now)
    _check_lifetime(lifetime)
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = _certificate(
        subject=name,
        issuer=name,
        key=key,
        not_after=now + lifetime,
        now=now,
        ca=True,
        issuer_ski=x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
    ).sign(key, hashes.SHA256())
    return KeyPair(cert, key)


def issue_leaf(
    ca: KeyPair,
    *,
    subject: x509.Name,
    sans: Sequence[x509.GeneralName],
    lifetime: datetime.timedelta,
    now: datetime.datetime,
    usages: Sequence[x509.ObjectIdentifier] = (ExtendedKeyUsageOID.SERVER_AUTH,),
) -> KeyPair:
    """A leaf signed by ``ca``: serverAuth by default; a client certificate may have no SANs."""
    _check_lifetime(lifetime)
    key = _new_key()
    builder = _certificate(
        subject=subject,
        issuer=ca.cert.subject,
        key=key,
        # A leaf never outlives the CA that vouches for it.
        not_after=min(now + lifetime, ca.cert.not_valid_after_utc),
        now=now,
        ca=False,
        issuer_ski=ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value,
        usages=usages,
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def _certificate(
    *,
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    not_after: datetime.datetime,
    now: datetime.datetime,
    ca: bool,
    issuer_ski: x509.SubjectKeyIdentifier,
    usages: Sequence[x509.ObjectIdentifier] | None = None,
) -> x509.CertificateBuilder:
    """What a CA and a leaf both carry: names, key, a fresh serial, validity from ``now`` less the
    clock skew, basic constraints and key usage (a CA signs certificates and CRLs; a leaf only
    signs handshakes), a leaf's extended key usages, and both key identifiers."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if usages is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    return builder.add_extension(
        x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
    ).add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski), critical=False
    )


def issue_serving(
    ca: KeyPair,
    *,
    service: str,
    namespace: str,
    extra_sans: Iterable[str] = (),
    lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME,
    cluster_domain: str | None = DEFAULT_CLUSTER_DOMAIN,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A serverAuth leaf for a Service, signed by ``ca``, valid for its DNS names plus extras.

    ``extra_sans`` are parsed like the command line's ``--san`` (`parse_sans`), so
    ``("127.0.0.1", "localhost")`` adds an IP and a DNS SAN.
    """
    now = check_time(now)
    base = serving_names(service, namespace, cluster_domain=cluster_domain)
    sans = parse_sans([*base, *extra_sans])
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, base[2])])
    return issue_leaf(ca, subject=subject, sans=sans, lifetime=lifetime, now=now)


def reissue_serving(
    leaf: x509.Certificate,
    ca: KeyPair,
    *,
    lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A new key and certificate with ``leaf``'s subject and SANs, signed by ``ca``."""
    now = check_time(now)
    try:
        sans = list(leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound as error:
        raise CertStateError("the serving certificate has no SANs to carry over") from error
    return issue_leaf(ca, subject=leaf.subject, sans=sans, lifetime=lifetime, now=now)


def issued_at(cert: x509.Certificate) -> datetime.datetime:
    """When a certificate was made (its not-before minus the allowance for clock skew)."""
    return cert.not_valid_before_utc + CLOCK_SKEW
