"""``webhook.certs.issuing``: a CA and the serving leaves it signs."""

from __future__ import annotations

import datetime
import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.certs.support import DAY, T0, common_name, ext
from webhook import certs


class TestIssueCA:
    def test_is_a_p256_self_signed_ca_that_signs_leaves_only(self, ca: certs.KeyPair) -> None:
        assert isinstance(ca.key.curve, ec.SECP256R1)
        assert ca.matches
        assert certs.is_signed_by(ca.cert, ca.cert)
        constraints = ext(ca.cert, x509.BasicConstraints)
        assert constraints.critical
        assert constraints.value == x509.BasicConstraints(ca=True, path_length=0)
        usage = ext(ca.cert, x509.KeyUsage)
        assert usage.critical
        assert usage.value.key_cert_sign and usage.value.crl_sign
        assert not usage.value.key_encipherment
        assert common_name(ca.cert) == "podium-ca"

    def test_validity_starts_a_little_early_and_lasts_the_lifetime(self, ca: certs.KeyPair) -> None:
        assert ca.cert.not_valid_before_utc == T0 - certs.CLOCK_SKEW
        assert ca.cert.not_valid_after_utc == T0 + 90 * DAY

    @pytest.mark.parametrize("lifetime", [datetime.timedelta(0), -DAY])
    def test_refuses_a_non_positive_lifetime(self, lifetime: datetime.timedelta) -> None:
        with pytest.raises(ValueError, match="lifetime"):
            certs.issue_ca("x", lifetime=lifetime, now=T0)

    def test_refuses_a_naive_now(self) -> None:
        with pytest.raises(ValueError, match="timezone"):
            certs.issue_ca("x", now=datetime.datetime(2026, 1, 1))


class TestIssueServing:
    @pytest.mark.parametrize(
        ("cluster_domain", "long_name"),
        [
            ("cluster.local", ["podium.podium-system.svc.cluster.local"]),
            ("corp.example", ["podium.podium-system.svc.corp.example"]),
            (None, []),
        ],
    )
    def test_sans_are_the_service_names_then_the_extras(
        self, ca: certs.KeyPair, cluster_domain: str | None, long_name: list[str]
    ) -> None:
        leaf = certs.issue_serving(
            ca,
            service="podium",
            namespace="podium-system",
            extra_sans=["127.0.0.1", "localhost", "::1"],
            cluster_domain=cluster_domain,
            now=T0,
        )
        assert certs.san_strings(leaf.cert) == [
            "podium",
            "podium.podium-system",
            "podium.podium-system.svc",
            *long_name,
            "localhost",
            "127.0.0.1",
            "::1",
        ]
        sans = ext(leaf.cert, x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.IPAddress) == [
            ipaddress.ip_address("127.0.0.1"),
            ipaddress.ip_address("::1"),
        ]

    def test_is_a_p256_server_auth_leaf_signed_by_the_ca(self, ca: certs.KeyPair) -> None:
        leaf = certs.issue_serving(ca, service="podium", namespace="podium-system", now=T0)
        assert isinstance(leaf.key.curve, ec.SECP256R1)
        assert leaf.matches
        assert certs.is_signed_by(leaf.cert, ca.cert)
        assert not certs.is_signed_by(leaf.cert, leaf.cert)
        assert common_name(leaf.cert) == "podium.podium-system.svc"
        assert leaf.cert.issuer == ca.cert.subject
        assert ext(leaf.cert, x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH]
        )
        constraints = ext(leaf.cert, x509.BasicConstraints)
        assert constraints.critical
        assert constraints.value.ca is False
        usage = ext(leaf.cert, x509.KeyUsage).value
        assert usage.digital_signature
        assert not usage.key_cert_sign
        ca_ski = ext(ca.cert, x509.SubjectKeyIdentifier).value.digest
        aki = ext(leaf.cert, x509.AuthorityKeyIdentifier).value
        assert aki.key_identifier == ca_ski

    def test_validity(self, ca: certs.KeyPair) -> None:
        leaf = certs.issue_serving(ca, service="s", namespace="n", lifetime=30 * DAY, now=T0)
        assert leaf.cert.not_valid_before_utc == T0 - certs.CLOCK_SKEW
        assert leaf.cert.not_valid_after_utc == T0 + 30 * DAY

    def test_never_outlives_its_ca(self, ca: certs.KeyPair) -> None:
        leaf = certs.issue_serving(
            ca, service="s", namespace="n", lifetime=30 * DAY, now=T0 + 80 * DAY
        )
        assert leaf.cert.not_valid_after_utc == ca.cert.not_valid_after_utc

    def test_bad_extra_san_is_refused(self, ca: certs.KeyPair) -> None:
        with pytest.raises(certs.InvalidSANError):
            certs.issue_serving(ca, service="s", namespace="n", extra_sans=["not a name"])

    def test_reissue_keeps_subject_and_sans_with_a_new_key(self, ca: certs.KeyPair) -> None:
        leaf = certs.issue_serving(ca, service="s", namespace="n", extra_sans=["10.0.0.1"], now=T0)
        again = certs.reissue_serving(leaf.cert, ca, lifetime=7 * DAY, now=T0 + DAY)
        assert again.cert.subject == leaf.cert.subject
        assert certs.san_strings(again.cert) == certs.san_strings(leaf.cert)
        assert again.key.public_key() != leaf.key.public_key()
        assert again.cert.not_valid_after_utc == T0 + 8 * DAY
