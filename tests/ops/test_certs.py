"""Tests for webhook.ops.certs (issuing, renewal timing, CA rotation, files) and
webhook.ops.certs_cli."""

from __future__ import annotations

import base64
import datetime
import http.server
import ipaddress
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from webhook.ops import certs, certs_cli

DAY = datetime.timedelta(days=1)
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def ext(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension[Any]:
    return cert.extensions.get_extension_for_class(kind)


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


@pytest.fixture(scope="module")
def ca() -> certs.KeyPair:
    return certs.issue_ca("podium-ca", lifetime=90 * DAY, now=T0)


# --- issuing ---------------------------------------------------------------------------------


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


class TestRenewalTiming:
    @pytest.mark.parametrize(
        ("after_issue", "due"),
        [
            (datetime.timedelta(0), False),
            (59 * DAY, False),
            # 2/3 of (90 days + the 5-minute backdating), counted from the backdated start
            (60 * DAY - datetime.timedelta(minutes=1, seconds=41), False),
            (60 * DAY - datetime.timedelta(minutes=1, seconds=40), True),
            (60 * DAY, True),
            (91 * DAY, True),
        ],
    )
    def test_due_at_two_thirds_of_the_lifetime(
        self, ca: certs.KeyPair, after_issue: datetime.timedelta, due: bool
    ) -> None:
        assert certs.needs_renewal(ca.cert, T0 + after_issue) is due

    def test_renewal_time(self, ca: certs.KeyPair) -> None:
        start = T0 - certs.CLOCK_SKEW
        assert certs.renewal_time(ca.cert) == start + (T0 + 90 * DAY - start) * 2 / 3


# --- subject alternative names ---------------------------------------------------------------


class TestParseSAN:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("127.0.0.1", x509.IPAddress(ipaddress.ip_address("127.0.0.1"))),
            ("::1", x509.IPAddress(ipaddress.ip_address("::1"))),
            ("localhost", x509.DNSName("localhost")),
            ("Podium.Podium-System.SVC", x509.DNSName("podium.podium-system.svc")),
            ("a-1.b2", x509.DNSName("a-1.b2")),
            ("1a.example", x509.DNSName("1a.example")),
        ],
    )
    def test_accepts(self, text: str, expected: x509.GeneralName) -> None:
        assert certs.parse_san(text) == expected

    @pytest.mark.parametrize(
        "text",
        [
            "",
            " ",
            "localhost ",
            "*.example.com",
            "example.com.",
            "-a.example",
            "a-.example",
            "a..b",
            "under_score",
            "1.2.3",
            "256.1.1.1",
            "fe80::1%eth0",
            "a" * 64,
            ".".join(["a" * 63] * 4) + ".com",
            "ünïcode",
        ],
    )
    def test_refuses(self, text: str) -> None:
        with pytest.raises(certs.InvalidSANError):
            certs.parse_san(text)

    def test_several_comma_separated_values_collapse_duplicates(self) -> None:
        assert certs.parse_sans(["a,b", "a", "127.0.0.1,", "B"]) == (
            x509.DNSName("a"),
            x509.DNSName("b"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        )

    @given(st.ip_addresses())
    def test_any_ip_address_round_trips(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address
    ) -> None:
        assert certs.parse_san(str(address)) == x509.IPAddress(address)

    @given(
        st.lists(
            st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
            min_size=1,
            max_size=5,
        ).filter(lambda labels: not labels[-1].isdigit())
    )
    def test_any_host_name_round_trips(self, labels: list[str]) -> None:
        name = ".".join(labels)
        assert certs.parse_san(name.upper()) == x509.DNSName(name)

    @given(st.text(max_size=80))
    def test_any_text_is_a_valid_name_or_a_clean_refusal(self, text: str) -> None:
        try:
            name = certs.parse_san(text)
        except certs.InvalidSANError:
            return
        if isinstance(name, x509.DNSName):
            assert name.value == text.lower()
            assert name.value.isascii()
            assert len(name.value) <= 253
            assert all(0 < len(label) <= 63 for label in name.value.split("."))
        else:
            assert isinstance(name, x509.IPAddress)
            assert name.value == ipaddress.ip_address(text)

    @given(st.lists(st.text(alphabet="ab1.,-", max_size=12), max_size=6))
    def test_cli_lists_parse_or_refuse_cleanly_and_without_duplicates(
        self, values: list[str]
    ) -> None:
        try:
            names = certs.parse_sans(values)
        except certs.InvalidSANError:
            return
        assert len(set(names)) == len(names)


# --- PEM -------------------------------------------------------------------------------------


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


# --- files -----------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class TestFiles:
    def test_issue_writes_the_layout_with_private_keys(self, tmp_path: Path) -> None:
        state_dir = tmp_path / "certs"
        state = certs.issue(state_dir, service="podium", namespace="podium-system", now=T0)
        assert sorted(p.name for p in state_dir.iterdir()) == [
            "ca-bundle.pem",
            "ca-key.pem",
            "ca.pem",
            "tls.crt",
            "tls.key",
        ]
        assert mode(state_dir / "ca-key.pem") == 0o600
        assert mode(state_dir / "tls.key") == 0o600
        assert mode(state_dir / "ca.pem") == 0o644
        assert mode(state_dir / "tls.crt") == 0o644
        assert mode(state_dir / "ca-bundle.pem") == 0o644
        loaded = certs.load_state(state_dir)
        assert loaded.ca.cert == state.ca.cert
        assert loaded.leaf.cert == state.leaf.cert
        assert loaded.bundle == (state.ca.cert,)
        assert loaded.next_ca is None
        assert common_name(state.ca.cert) == f"podium-ca@{int(T0.timestamp())}"

    def test_issue_refuses_to_replace_a_ca_unless_told(self, tmp_path: Path) -> None:
        first = certs.issue(tmp_path, service="s", namespace="n")
        with pytest.raises(certs.CertStateError, match="already holds a CA"):
            certs.issue(tmp_path, service="s", namespace="n")
        second = certs.issue(tmp_path, service="s", namespace="n", overwrite=True)
        assert second.ca.cert != first.ca.cert
        assert certs.load_state(tmp_path).ca.cert == second.ca.cert

    def test_issue_checks_sans_before_writing_anything(self, tmp_path: Path) -> None:
        with pytest.raises(certs.InvalidSANError):
            certs.issue(tmp_path / "x", service="s", namespace="n", extra_sans=["a b"])
        assert not (tmp_path / "x").exists()

    def test_atomic_write_sets_the_mode_whatever_the_umask(self, tmp_path: Path) -> None:
        old = os.umask(0o077)
        try:
            certs.atomic_write(tmp_path / "c.pem", b"cert")
            certs.atomic_write(tmp_path / "k.pem", b"key", mode=0o600)
        finally:
            os.umask(old)
        assert mode(tmp_path / "c.pem") == 0o644
        assert mode(tmp_path / "k.pem") == 0o600
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pem", "k.pem"]

    def test_atomic_write_replaces_whole_or_not_at_all(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        target = tmp_path / "tls.key"
        certs.atomic_write(target, b"old", mode=0o600)
        inode = target.stat().st_ino
        certs.atomic_write(target, b"new", mode=0o600)
        assert target.read_bytes() == b"new"
        assert target.stat().st_ino != inode  # a rename, not an in-place rewrite

        def refuse(src: str, dst: Path) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(os, "replace", refuse)
        with pytest.raises(OSError, match="disk full"):
            certs.atomic_write(target, b"newer", mode=0o600)
        assert target.read_bytes() == b"new"
        assert [p.name for p in tmp_path.iterdir()] == ["tls.key"]  # no temp file left behind

    @pytest.mark.parametrize("missing", ["ca.pem", "ca-key.pem", "ca-bundle.pem", "tls.crt"])
    def test_a_missing_file_says_how_to_start(self, tmp_path: Path, missing: str) -> None:
        certs.issue(tmp_path, service="s", namespace="n")
        (tmp_path / missing).unlink()
        with pytest.raises(certs.CertStateError, match="podium certs issue"):
            certs.load_state(tmp_path)

    def test_a_bundle_that_does_not_trust_the_ca_is_refused(self, tmp_path: Path) -> None:
        certs.issue(tmp_path, service="s", namespace="n")
        (tmp_path / "ca-bundle.pem").write_bytes(certs.issue_ca("other").cert_pem())
        with pytest.raises(certs.CertStateError, match="does not trust"):
            certs.load_state(tmp_path)

    def test_a_ca_key_that_belongs_to_nothing_is_refused(self, tmp_path: Path) -> None:
        certs.issue(tmp_path, service="s", namespace="n")
        (tmp_path / "ca-key.pem").write_bytes(certs.issue_ca("other").key_pem())
        with pytest.raises(certs.CertStateError, match="does not belong"):
            certs.load_state(tmp_path)


# --- rotation --------------------------------------------------------------------------------

A = certs.Action


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    certs.issue(
        tmp_path,
        service="podium",
        namespace="podium-system",
        extra_sans=["127.0.0.1"],
        leaf_lifetime=30 * DAY,
        ca_lifetime=90 * DAY,
        now=T0,
    )
    return tmp_path


def step(state_dir: Path, at: datetime.timedelta, **kwargs: Any) -> certs.Rotation:
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


class TestRotation:
    def test_the_ca_rotation_sequence_step_by_step(self, state_dir: Path) -> None:
        a = certs.load_state(state_dir).ca.cert

        # Nothing is due a day in.
        r = step(state_dir, DAY)
        assert r.actions == ()

        # The leaf reaches 2/3 of its 30 days: renewed, still by A.
        r = step(state_dir, 21 * DAY)
        assert r.actions == (A.RENEW_LEAF,)
        assert r.state.bundle == (a,)
        assert certs.is_signed_by(r.state.leaf.cert, a)
        assert certs.needs_renewal(r.state.leaf.cert, T0 + 21 * DAY) is False

        # A reaches 2/3 of its 90 days: B is staged in the bundle, but A still signs.
        r = step(state_dir, 61 * DAY)
        assert r.actions == (A.STAGE_CA, A.RENEW_LEAF)
        assert r.state.next_ca is not None
        b = r.state.next_ca.cert
        assert r.state.ca.cert == a
        assert r.state.bundle == (a, b)
        assert certs.is_signed_by(r.state.leaf.cert, a)
        assert files(state_dir) == [
            "ca-bundle.pem",
            "ca-key.pem",
            "ca-next-key.pem",
            "ca-next.pem",
            "ca.pem",
            "tls.crt",
            "tls.key",
        ]
        assert mode(state_dir / "ca-next-key.pem") == 0o600
        assert common_name(b) == f"podium-ca@{int((T0 + 61 * DAY).timestamp())}"

        # The next step, even at the same moment: B has been trusted for a step, so it signs.
        r = step(state_dir, 61 * DAY)
        assert r.actions == (A.PROMOTE_CA, A.RENEW_LEAF)
        assert r.state.ca.cert == b
        assert r.state.next_ca is None
        assert r.state.bundle == (a, b)
        assert certs.is_signed_by(r.state.leaf.cert, b)
        assert "ca-next.pem" not in files(state_dir)
        assert certs.san_strings(r.state.leaf.cert)[-1] == "127.0.0.1"

        # A signed nothing that is served any more: dropped.
        r = step(state_dir, 62 * DAY)
        assert r.actions == (A.DROP_CA,)
        assert r.state.bundle == (b,)
        assert certs.is_signed_by(r.state.leaf.cert, b)

        r = step(state_dir, 63 * DAY)
        assert r.actions == ()

    def test_planning_is_pure(self, state_dir: Path) -> None:
        state = certs.load_state(state_dir)
        now = T0 + 61 * DAY
        assert certs.plan_rotation(state, now=now) == certs.plan_rotation(state, now=now)
        assert certs.load_state(state_dir).leaf.cert == state.leaf.cert

    def test_min_overlap_holds_a_promotion_back(self, state_dir: Path) -> None:
        step(state_dir, 61 * DAY)
        held = step(state_dir, 61 * DAY + datetime.timedelta(hours=1), min_overlap=2 * DAY)
        assert held.actions == ()
        assert held.state.next_ca is not None
        promoted = step(state_dir, 63 * DAY + datetime.timedelta(minutes=1), min_overlap=2 * DAY)
        assert promoted.actions == (A.PROMOTE_CA, A.RENEW_LEAF)

    def test_a_staging_that_stopped_before_the_bundle_is_finished(self, state_dir: Path) -> None:
        bundle_before = (state_dir / "ca-bundle.pem").read_bytes()
        staged = step(state_dir, 61 * DAY)
        assert staged.state.next_ca is not None
        (state_dir / "ca-bundle.pem").write_bytes(bundle_before)  # as if we stopped right there

        r = step(state_dir, 61 * DAY)
        assert r.actions == (A.STAGE_CA,)
        assert r.state.next_ca is not None
        assert r.state.next_ca.cert == staged.state.next_ca.cert  # the same CA, not another one
        assert r.state.bundle == (staged.state.ca.cert, staged.state.next_ca.cert)

    def test_a_promotion_that_stopped_between_the_ca_files_is_finished(
        self, state_dir: Path
    ) -> None:
        staged = step(state_dir, 61 * DAY)
        assert staged.state.next_ca is not None
        (state_dir / "ca-key.pem").write_bytes(staged.state.next_ca.key_pem())

        healed = certs.load_state(state_dir)
        assert healed.ca.cert == staged.state.next_ca.cert
        assert healed.ca.matches
        assert (state_dir / "ca.pem").read_bytes() == staged.state.next_ca.cert_pem()

        r = step(state_dir, 61 * DAY)
        assert r.state.ca.cert == staged.state.next_ca.cert
        assert r.state.next_ca is None
        assert certs.is_signed_by(r.state.leaf.cert, r.state.ca.cert)

    def test_a_leaf_whose_key_was_lost_is_renewed(self, state_dir: Path) -> None:
        (state_dir / "tls.key").write_bytes(certs.issue_ca("x").key_pem())
        r = step(state_dir, DAY)
        assert r.actions == (A.RENEW_LEAF,)
        assert r.state.leaf.matches

    def test_a_retired_ca_stays_while_it_signs_the_served_leaf(self, state_dir: Path) -> None:
        state = certs.load_state(state_dir)
        newer = certs.issue_ca("newer", lifetime=90 * DAY, now=T0)
        # Someone put a new CA in place by hand; the leaf is still the old CA's.
        moved = certs.CertState(ca=newer, bundle=(state.ca.cert, newer.cert), leaf=state.leaf)
        actions = certs.plan_rotation(moved, now=T0 + DAY)
        assert actions == (A.RENEW_LEAF,)
        renewed = certs.apply_rotation(moved, actions, now=T0 + DAY)
        assert certs.plan_rotation(renewed, now=T0 + 2 * DAY) == (A.DROP_CA,)

    def test_rotate_needs_an_issued_directory(self, tmp_path: Path) -> None:
        with pytest.raises(certs.CertStateError, match="issue"):
            certs.rotate(tmp_path)

    @given(
        gaps=st.lists(st.integers(min_value=1, max_value=9 * 24), min_size=20, max_size=60),
    )
    def test_trust_always_runs_a_step_ahead_of_serving(self, gaps: list[int]) -> None:
        """Over many CA lifetimes, with steps at least every 9 days (a third of the leaf's life):

        * the leaf served after a step is signed by a CA the bundle held *before* the step
          (the apiserver learnt about it a step earlier);
        * the bundle after a step still trusts the leaf served *before* it (a replica that has
          not reloaded yet is still trusted);
        * CA and leaf are valid, and at most two CAs are trusted at once.
        """
        ca = certs.issue_ca("podium-ca", lifetime=90 * DAY, now=T0)
        leaf = certs.issue_serving(ca, service="s", namespace="n", lifetime=30 * DAY, now=T0)
        state = certs.CertState(ca=ca, bundle=(ca.cert,), leaf=leaf)
        now = T0
        for hours in gaps:
            now += datetime.timedelta(hours=hours)
            actions = certs.plan_rotation(state, now=now)
            new = certs.apply_rotation(
                state, actions, now=now, leaf_lifetime=30 * DAY, ca_lifetime=90 * DAY
            )
            assert any(certs.is_signed_by(new.leaf.cert, c) for c in state.bundle)
            assert any(certs.is_signed_by(state.leaf.cert, c) for c in new.bundle)
            assert new.leaf.cert.not_valid_before_utc <= now < new.leaf.cert.not_valid_after_utc
            assert now < new.ca.cert.not_valid_after_utc
            assert new.ca.cert in new.bundle
            assert len(new.bundle) <= 2
            state = new


# --- handing it to the cluster ---------------------------------------------------------------


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


class FakeApiServer:
    """Records PATCH requests on 127.0.0.1 and answers like the apiserver would."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        recorder = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
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


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


def assert_server_side_apply(request: dict[str, Any], bundle: bytes) -> None:
    path, _, query = request["path"].partition("?")
    assert path == "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/podium"
    assert sorted(query.split("&")) == ["fieldManager=podium-certs", "force=true"]
    assert request["headers"]["content-type"] == "application/apply-patch+yaml"
    assert request["body"] == certs.ca_bundle_patch("podium", bundle)


def test_apply_ca_bundle_sends_a_forced_server_side_apply(apiserver: FakeApiServer) -> None:
    from kubernetes import client  # noqa: PLC0415

    configuration = client.Configuration()
    configuration.host = apiserver.url
    with client.ApiClient(configuration) as api_client:
        result = certs.apply_ca_bundle(api_client, "podium", b"BUNDLE")
    assert result.metadata.name == "podium"
    assert len(apiserver.requests) == 1
    assert_server_side_apply(apiserver.requests[0], b"BUNDLE")


# --- podium certs ----------------------------------------------------------------------------


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()


class TestCLI:
    def test_issue_then_show_rotate_and_secret(self, cli: CliRunner, tmp_path: Path) -> None:
        state_dir = tmp_path / "certs"
        result = cli.invoke(
            certs_cli.app,
            ["issue", "--dir", str(state_dir), "--san", "127.0.0.1,localhost", "--days", "10"],
        )
        assert result.exit_code == 0, result.output
        assert "127.0.0.1" in result.output
        leaf = certs.load_state(state_dir).leaf.cert
        assert certs.san_strings(leaf)[-2:] == ["localhost", "127.0.0.1"]
        lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
        assert lifetime == 10 * DAY + certs.CLOCK_SKEW

        result = cli.invoke(
            certs_cli.app, ["show", "--dir", str(state_dir)], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, result.output
        assert "podium.podium-system.svc" in result.output
        assert "tls.crt" in result.output and "ca-bundle.pem" in result.output

        result = cli.invoke(certs_cli.app, ["rotate", "--dir", str(state_dir)])
        assert result.exit_code == 0, result.output
        assert "Nothing due" in result.output

        result = cli.invoke(
            certs_cli.app, ["secret", "--dir", str(state_dir), "--name", "tls", "--namespace", "x"]
        )
        assert result.exit_code == 0, result.output
        secret = yaml.safe_load(result.stdout)
        assert secret["metadata"] == {
            "name": "tls",
            "namespace": "x",
            "labels": {
                "app.kubernetes.io/name": "podium",
                "app.kubernetes.io/managed-by": "podium-certs",
            },
        }
        assert base64.b64decode(secret["data"]["tls.key"]) == (state_dir / "tls.key").read_bytes()
        assert (
            base64.b64decode(secret["data"]["ca.crt"]) == (state_dir / "ca-bundle.pem").read_bytes()
        )

    def test_rotate_reports_what_it_did(self, cli: CliRunner, tmp_path: Path) -> None:
        certs.issue(tmp_path, service="s", namespace="n", leaf_lifetime=DAY, now=T0)
        result = cli.invoke(certs_cli.app, ["rotate", "--dir", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert "renew-leaf: renewed the serving certificate" in result.output

    @pytest.mark.parametrize("san", ["bad name", "*.wild.example", "a,,b c"])
    def test_a_bad_san_is_a_usage_error(self, cli: CliRunner, tmp_path: Path, san: str) -> None:
        result = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path / "c"), "--san", san])
        assert result.exit_code == 2
        assert not (tmp_path / "c").exists()

    def test_issue_twice_needs_force(self, cli: CliRunner, tmp_path: Path) -> None:
        assert cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path)]).exit_code == 0
        again = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path)])
        assert again.exit_code == 1
        assert "already holds a CA" in again.output
        forced = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path), "--force"])
        assert forced.exit_code == 0

    @pytest.mark.parametrize("command", ["rotate", "show", "secret", "inject"])
    def test_an_empty_directory_is_a_clear_error(
        self, cli: CliRunner, tmp_path: Path, command: str
    ) -> None:
        result = cli.invoke(certs_cli.app, [command, "--dir", str(tmp_path)])
        assert result.exit_code == 1
        assert "error:" in result.output

    def test_inject_applies_the_bundle_through_a_kubeconfig(
        self, cli: CliRunner, tmp_path: Path, apiserver: FakeApiServer
    ) -> None:
        certs.issue(tmp_path / "certs", service="s", namespace="n")
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": apiserver.url}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        result = cli.invoke(
            certs_cli.app,
            ["inject", "--dir", str(tmp_path / "certs"), "--kubeconfig", str(kubeconfig)],
        )
        assert result.exit_code == 0, result.output
        assert "now trusts 1 CA" in result.output
        assert len(apiserver.requests) == 1
        bundle = (tmp_path / "certs" / "ca-bundle.pem").read_bytes()
        assert_server_side_apply(apiserver.requests[0], bundle)
        assert apiserver.requests[0]["headers"]["authorization"] == "Bearer t"
