"""``webhook.certs.keys``: PEM in and out, and keys that must match."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from webhook import certs


class TestPEM:
    def test_a_pair_round_trips(self, ca: certs.KeyPair) -> None:
        again = certs.load_pair(ca.cert_pem(), ca.key_pem())
        assert again.cert == ca.cert
        assert again.key.private_numbers() == ca.key.private_numbers()

    def test_a_mismatched_pair_is_refused(self, ca: certs.KeyPair) -> None:
        other = certs.issue_ca("other")
        with pytest.raises(certs.CertError, match="does not belong"):
            certs.load_pair(ca.cert_pem(), other.key_pem())

    def test_a_non_ec_key_is_refused(self) -> None:
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
        pem = rsa_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        with pytest.raises(certs.CertError, match="ECDSA"):
            certs.key_from_pem(pem)

    @pytest.mark.parametrize("data", [b"", b"garbage", b"-----BEGIN CERTIFICATE-----\nAAAA\n"])
    def test_garbage_is_refused(self, data: bytes) -> None:
        with pytest.raises(certs.CertError):
            certs.certs_from_pem(data)
        with pytest.raises(certs.CertError):
            certs.key_from_pem(data)

    def test_a_bundle_keeps_its_order(self, ca: certs.KeyPair) -> None:
        other = certs.issue_ca("other")
        bundle = certs.certs_to_pem([ca.cert, other.cert])
        assert certs.certs_from_pem(bundle) == [ca.cert, other.cert]
