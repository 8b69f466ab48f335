"""Keys and certificates: the pair, PEM in and out, and who signed what."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from webhook.certs.errors import CertError


@dataclasses.dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key. Not checked to match: see `matches` and `load_pair`."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def matches(self) -> bool:
        return bool(self.cert.public_key() == self.key.public_key())

    def cert_pem(self) -> bytes:
        return cert_to_pem(self.cert)

    def key_pem(self) -> bytes:
        return key_to_pem(self.key)


def cert_to_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def certs_to_pem(certs: Iterable[x509.Certificate]) -> bytes:
    return b"".join(cert_to_pem(cert) for cert in certs)


def certs_from_pem(data: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM blob, in order; at least one."""
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as error:
        raise CertError(f"not a PEM certificate: {error}") from error


def key_to_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def key_from_pem(data: bytes) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise CertError(f"not an unencrypted PEM private key: {error}") from error
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"expected an ECDSA key, got {type(key).__name__}")
    return key


def load_pair(cert_pem: bytes, key_pem: bytes) -> KeyPair:
    """Parse a certificate (the first one in ``cert_pem``) and its key; refuse a mismatch."""
    pair = KeyPair(certs_from_pem(cert_pem)[0], key_from_pem(key_pem))
    if not pair.matches:
        raise CertError("the private key does not belong to the certificate")
    return pair


@functools.lru_cache(maxsize=256)
def is_signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Whether ``issuer``'s key signed ``cert`` (and the names line up). Cached: a rotation plan
    asks about the same few certificates again and again."""
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
