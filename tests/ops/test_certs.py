"""Tests for webhook.ops.certs (issuing, renewal timing, CA rotation, files) and
webhook.ops.certs_cli."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import http.server
import ipaddress
import json
import os
import socket
import stat
import threading
from collections.abc import Iterator, Sequence
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

    def test_min_overlap_holds_a_promotion_back_offline(self, state_dir: Path) -> None:
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
        actions = certs.plan_rotation(moved, now=T0 + DAY).actions
        assert actions == (A.RENEW_LEAF,)
        renewed = certs.apply_rotation(moved, actions, now=T0 + DAY)
        assert certs.plan_rotation(renewed, now=T0 + 2 * DAY).actions == (A.DROP_CA,)

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
            actions = certs.plan_rotation(state, now=now).actions
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


# --- the gates: promote only what the apiserver trusts, drop only what nobody serves ----------

HOOK = certs.WEBHOOK_NAMES[0]


def trust(*cas: x509.Certificate, secret: x509.Certificate | None = None) -> certs.ClusterTrust:
    return certs.ClusterTrust({HOOK: tuple(cas)}, secret)


def staged(state_dir: Path) -> certs.CertState:
    """The state right after B was staged at 61 days (A still signs)."""
    return step(state_dir, 61 * DAY).state


class TestGates:
    def test_promotion_waits_for_the_apiserver_to_hold_the_staged_ca(self, state_dir: Path) -> None:
        state = staged(state_dir)
        assert state.next_ca is not None
        a, b = state.ca.cert, state.next_ca.cert
        # Not injected: however long we wait, nothing is promoted, and it says what to do.
        plan = certs.plan_rotation(state, now=T0 + 80 * DAY, cluster=trust(a))
        assert plan.actions == ()
        (hold,) = plan.held
        assert (hold.action, hold.waiting) == (A.PROMOTE_CA, False)
        assert "podium certs inject" in hold.reason
        # Injected: promoted on the next run, no overlap needed.
        plan = certs.plan_rotation(state, now=T0 + 61 * DAY, cluster=trust(a, b))
        assert plan.actions == (A.PROMOTE_CA, A.RENEW_LEAF)
        assert plan.held == () and plan.warnings == ()

    def test_offline_promotion_waits_for_the_overlap(self, state_dir: Path) -> None:
        state = staged(state_dir)
        early = certs.plan_rotation(state, now=T0 + 61 * DAY + datetime.timedelta(hours=23))
        assert early.actions == ()
        assert [(h.action, h.waiting) for h in early.held] == [(A.PROMOTE_CA, True)]
        assert "24 h" in early.held[0].reason
        late = certs.plan_rotation(state, now=T0 + 62 * DAY + datetime.timedelta(minutes=6))
        assert late.actions == (A.PROMOTE_CA, A.RENEW_LEAF)

    def test_the_old_ca_goes_once_the_new_leaf_was_served_for_the_overlap(
        self, state_dir: Path
    ) -> None:
        old_leaf = staged(state_dir).leaf.cert  # still A's
        promoted = step(state_dir, 61 * DAY).state  # promoted at once (no overlap: mechanics)
        a, b = promoted.bundle
        assert certs.is_signed_by(promoted.leaf.cert, b)
        at = T0 + 61 * DAY
        # An hour later: the leaf of B has not been out long enough.
        plan = certs.plan_rotation(promoted, now=at + datetime.timedelta(hours=1))
        assert plan.actions == () and [h.waiting for h in plan.held] == [True]
        # A day later, but the Secret still holds A's leaf: apply it first.
        day_later = at + DAY + datetime.timedelta(minutes=6)
        plan = certs.plan_rotation(promoted, now=day_later, cluster=trust(a, b, secret=old_leaf))
        assert plan.actions == ()
        assert [(h.action, h.waiting) for h in plan.held] == [(A.DROP_CA, False)]
        assert "podium certs secret" in plan.held[0].reason
        plan = certs.plan_rotation(
            promoted, now=day_later, cluster=trust(a, b, secret=promoted.leaf.cert)
        )
        assert plan.actions == (A.DROP_CA,)

    def test_force_takes_a_held_step_and_says_what_it_risks(self, state_dir: Path) -> None:
        state = staged(state_dir)
        plan = certs.plan_rotation(
            state, now=T0 + 61 * DAY, cluster=trust(state.ca.cert), force=True
        )
        assert plan.actions == (A.PROMOTE_CA, A.RENEW_LEAF)
        (warning,) = plan.warnings
        assert warning.startswith("--force: promote-ca although")
        assert "admitted unpinned" in warning

    def test_a_cluster_that_does_not_trust_the_served_leaf_is_reported(
        self, state_dir: Path
    ) -> None:
        state = certs.load_state(state_dir)
        stranger = certs.issue_ca("someone-else", now=T0).cert
        plan = certs.plan_rotation(state, now=T0 + DAY, cluster=trust(stranger))
        assert any("cannot verify podium now" in w for w in plan.warnings)


class Cluster:
    """What a rotate-every-minute cron job acts on: the apiserver's caBundle, the Secret, and the
    replicas serving what the kubelet mounted a little later. ``injects`` decides, per minute,
    whether this run's ``podium certs inject`` got through."""

    #: Minutes between `kubectl apply` of the Secret and every replica serving its new pair
    #: (kubelet sync period plus the reloader's interval).
    MOUNT_DELAY = 2

    def __init__(self, state: certs.CertState) -> None:
        self.bundle = state.bundle
        self.secret = state.leaf.cert
        self.mounted: list[tuple[int, x509.Certificate]] = []
        self.served = state.leaf.cert

    def trust(self) -> certs.ClusterTrust:
        return certs.ClusterTrust({HOOK: self.bundle}, self.secret)

    def apply_secret(self, leaf: x509.Certificate, minute: int) -> None:
        if leaf != self.secret:
            self.secret = leaf
            self.mounted.append((minute + self.MOUNT_DELAY, leaf))

    def tick(self, minute: int) -> None:
        while self.mounted and self.mounted[0][0] <= minute:
            self.served = self.mounted.pop(0)[1]

    def verifies_what_is_served(self, now: datetime.datetime) -> bool:
        """The apiserver's caBundle holds a CA, valid now, that signed the served leaf, itself
        valid now."""
        return now < self.served.not_valid_after_utc and any(
            certs.is_signed_by(self.served, ca) and now < ca.not_valid_after_utc
            for ca in self.bundle
        )


@dataclasses.dataclass
class Run:
    taken: list[str] = dataclasses.field(default_factory=list)
    #: (minute, actions of that minute's run) whenever the apiserver could not verify podium.
    broken: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    #: Minutes whose run exited 1: a step waits for something to be done.
    alerted: list[int] = dataclasses.field(default_factory=list)

    def kinds(self) -> list[str]:
        return [t.split(":")[1] for t in self.taken if not t.endswith("renew-leaf")]


def run_every_minute(
    days: int,
    *,
    injects: Any,
    online: bool,
    min_overlap: datetime.timedelta = certs.DEFAULT_MIN_OVERLAP,
) -> Run:
    """``rotate`` then ``secret | kubectl apply`` then ``inject`` every simulated minute for
    ``days``, and what happened."""
    ca_lifetime, leaf_lifetime = 9 * DAY, 3 * DAY
    ca = certs.issue_ca("podium-ca", lifetime=ca_lifetime, now=T0)
    leaf = certs.issue_serving(ca, service="s", namespace="n", lifetime=leaf_lifetime, now=T0)
    state = certs.CertState(ca=ca, bundle=(ca.cert,), leaf=leaf)
    cluster = Cluster(state)
    run = Run()
    for minute in range(days * 24 * 60):
        now = T0 + datetime.timedelta(minutes=minute)
        rotation = certs.rotate_state(
            state,
            now=now,
            leaf_lifetime=leaf_lifetime,
            ca_lifetime=ca_lifetime,
            min_overlap=min_overlap,
            cluster=cluster.trust() if online else None,
        )
        state = rotation.state
        run.taken += [f"{minute}:{a}" for a in rotation.actions]
        if any(not hold.waiting for hold in rotation.held):
            run.alerted.append(minute)
        cluster.apply_secret(state.leaf.cert, minute)
        if injects(minute):
            cluster.bundle = state.bundle
        cluster.tick(minute)
        if not cluster.verifies_what_is_served(now):
            run.broken.append((minute, ", ".join(str(a) for a in rotation.actions) or "-"))
    return run


class TestRotateEveryMinute:
    """The cron job the issue describes, on a simulated clock: 9-day CAs, 3-day leaves, the
    default 24 h overlap, 20 days (three CA hand-overs), one run a minute."""

    DAYS = 20

    def test_the_apiserver_never_loses_trust_when_injects_fail_for_hours(self) -> None:
        # Every inject fails except in the first five minutes of each 6-hour window.
        run = run_every_minute(self.DAYS, injects=lambda minute: minute % 360 < 5, online=True)
        assert run.broken == []
        assert run.kinds() == ["stage-ca", "promote-ca", "drop-ca"] * 3
        # The runs between a staging and the inject that got through said so (exit 1).
        stagings = [int(t.split(":")[0]) for t in run.taken if t.endswith("stage-ca")]
        assert run.alerted
        assert all(any(s < m <= s + 360 for s in stagings) for m in run.alerted)

    def test_a_missed_inject_holds_the_promotion_and_alerts_every_run(self) -> None:
        run = run_every_minute(6, injects=lambda minute: minute == 0, online=True)
        assert run.broken == []
        assert run.kinds() == ["stage-ca"]
        staged_at = int(next(t for t in run.taken if t.endswith("stage-ca")).split(":")[0])
        assert run.alerted == list(range(staged_at + 1, 6 * 24 * 60))

    def test_offline_the_overlap_covers_an_inject_hours_late(self) -> None:
        run = run_every_minute(
            self.DAYS, injects=lambda minute: minute % (12 * 60) == 0, online=False
        )
        assert run.broken == []
        assert run.kinds() == ["stage-ca", "promote-ca", "drop-ca"] * 3

    def test_the_old_default_broke_trust_within_minutes(self) -> None:
        """The check above can fail: without the gates (no overlap, the cluster not read) the
        same loop staged, promoted and dropped within minutes, before the Secret was mounted
        or the new CA injected."""
        run = run_every_minute(
            self.DAYS,
            injects=lambda minute: minute % 360 < 5,
            online=False,
            min_overlap=datetime.timedelta(0),
        )
        stage, promote, drop = [
            int(t.split(":")[0]) for t in run.taken if not t.endswith("renew-leaf")
        ][:3]
        assert (promote - stage, drop - stage) == (1, 2)
        assert run.broken[0] == (drop, "drop-ca")


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

        result = cli.invoke(certs_cli.app, ["rotate", "--dir", str(state_dir), "--offline"])
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
        result = cli.invoke(certs_cli.app, ["rotate", "--dir", str(tmp_path), "--offline"])
        assert result.exit_code == 0, result.output
        assert "renew-leaf: renewed the serving certificate" in result.output
        assert "tls.crt changed: apply it" in result.output

    @pytest.mark.parametrize("san", ["bad name", "*.wild.example", "a,,b c"])
    def test_a_bad_san_is_a_usage_error(self, cli: CliRunner, tmp_path: Path, san: str) -> None:
        result = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path / "c"), "--san", san])
        assert result.exit_code == 2
        assert not (tmp_path / "c").exists()

    def test_issue_twice_needs_force(self, cli: CliRunner, tmp_path: Path) -> None:
        assert cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path)]).exit_code == 0
        again = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path)])
        assert again.exit_code == 2
        assert "already holds a CA" in again.output and "--force" in again.output
        forced = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path), "--force"])
        assert forced.exit_code == 0

    @pytest.mark.parametrize("command", ["rotate", "show", "secret", "inject"])
    def test_an_empty_directory_is_a_clear_error(
        self, cli: CliRunner, tmp_path: Path, command: str
    ) -> None:
        result = cli.invoke(certs_cli.app, [command, "--dir", str(tmp_path)])
        assert result.exit_code == 2
        assert result.stderr.startswith("Error: ")
        assert len(result.stderr.splitlines()) == 1

    def test_inject_applies_the_bundle_through_a_kubeconfig(
        self, cli: CliRunner, tmp_path: Path, apiserver: FakeApiServer
    ) -> None:
        certs.issue(tmp_path / "certs", service="s", namespace="n")
        kubeconfig = kubeconfig_for(tmp_path, apiserver.url)
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


def serve_cluster(
    apiserver: FakeApiServer, bundle: Sequence[x509.Certificate], leaf: x509.Certificate | None
) -> None:
    """The fake apiserver holds the webhook configuration with ``bundle`` as its caBundle, and
    the Secret with ``leaf`` (none when None)."""
    apiserver.objects[WEBHOOK_PATH] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "podium"},
        "webhooks": [
            {
                "name": "pods.podium.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "clientConfig": {"caBundle": base64.b64encode(certs.certs_to_pem(bundle)).decode()},
            }
        ],
    }
    apiserver.objects.pop(SECRET_PATH, None)
    if leaf is not None:
        pem = base64.b64encode(certs.cert_to_pem(leaf)).decode()
        apiserver.objects[SECRET_PATH] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "podium-tls", "namespace": "podium-system"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": pem, "tls.key": "", "ca.crt": pem},
        }


class TestCLIWithACluster:
    def test_rotate_promotes_only_what_the_cluster_trusts(
        self, cli: CliRunner, tmp_path: Path, apiserver: FakeApiServer
    ) -> None:
        state_dir = tmp_path / "certs"
        now = datetime.datetime.now(datetime.UTC)
        certs.issue(
            state_dir,
            service="podium",
            namespace="podium-system",
            ca_lifetime=90 * DAY,
            leaf_lifetime=30 * DAY,
            now=now - 61 * DAY,
        )
        a = certs.load_state(state_dir)
        serve_cluster(apiserver, [a.ca.cert], a.leaf.cert)
        args = ["rotate", "--dir", str(state_dir), "--kubeconfig"]
        args.append(str(kubeconfig_for(tmp_path, apiserver.url)))

        staged = cli.invoke(certs_cli.app, args)
        assert staged.exit_code == 0, staged.output
        assert "stage-ca" in staged.stdout and "ca-bundle.pem changed" in staged.stdout

        held = cli.invoke(certs_cli.app, args)  # nobody injected
        assert held.exit_code == 1, held.output
        assert "promote-ca held" in held.stdout and "podium certs inject" in held.stdout
        assert certs.load_state(state_dir).next_ca is not None

        serve_cluster(apiserver, certs.load_state(state_dir).bundle, a.leaf.cert)  # injected
        promoted = cli.invoke(certs_cli.app, args)
        assert promoted.exit_code == 0, promoted.output
        assert "promote-ca: promoted" in promoted.stdout
        assert "tls.crt changed: apply it" in promoted.stdout

        forced = cli.invoke(certs_cli.app, [*args, "--force", "--min-overlap-hours", "0"])
        assert forced.exit_code == 0, forced.output
        # The Secret still holds A's leaf: forced, with a warning that says what it risks.
        assert "drop-ca: dropped" in forced.stdout
        assert "Warning: --force: drop-ca although the Secret still holds" in forced.stderr

    def test_show_cluster_says_whether_the_cabundle_trusts_the_secret(
        self, cli: CliRunner, tmp_path: Path, apiserver: FakeApiServer
    ) -> None:
        state = certs.issue(tmp_path / "certs", service="podium", namespace="podium-system")
        stranger = certs.issue_ca("someone-else")
        kubeconfig = str(kubeconfig_for(tmp_path, apiserver.url))
        show = ["show", "--dir", str(tmp_path / "certs"), "--cluster", "--kubeconfig", kubeconfig]

        serve_cluster(apiserver, [state.ca.cert], state.leaf.cert)
        result = cli.invoke(certs_cli.app, [*show, "-o", "json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        sources = [row["source"] for row in doc["certificates"]]
        assert "MutatingWebhookConfiguration podium pods.podium.dev caBundle" in sources
        assert "Secret podium-system/podium-tls tls.crt" in sources
        assert str(tmp_path / "certs" / "tls.crt") in sources
        assert doc["checks"] == [
            {"check": "caBundle trusts the Secret's serving certificate", "ok": True, "fix": None}
        ]

        serve_cluster(apiserver, [stranger.cert], state.leaf.cert)
        result = cli.invoke(certs_cli.app, show)
        assert result.exit_code == 1
        assert "PROBLEM: caBundle trusts the Secret's serving certificate" in result.stdout

    def test_show_json_lists_every_file(self, cli: CliRunner, tmp_path: Path) -> None:
        certs.issue(tmp_path, service="podium", namespace="podium-system")
        result = cli.invoke(certs_cli.app, ["show", "--dir", str(tmp_path), "-o", "json"])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)["certificates"]
        assert [Path(r["source"]).name for r in rows] == ["tls.crt", "ca.pem", "ca-bundle.pem"]
        assert rows[0]["sans"][:1] == ["podium"] and rows[0]["status"] == "ok"
        assert rows[1]["isCA"] is True

    @pytest.mark.parametrize("command", ["inject", "rotate"])
    def test_an_unreachable_apiserver_is_one_line_and_exit_2(
        self, cli: CliRunner, tmp_path: Path, command: str
    ) -> None:
        certs.issue(tmp_path / "certs", service="s", namespace="n")
        with socket.socket() as sock:  # a port nothing listens on
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        kubeconfig = kubeconfig_for(tmp_path, f"https://127.0.0.1:{port}")
        result = cli.invoke(
            certs_cli.app,
            [command, "--dir", str(tmp_path / "certs"), "--kubeconfig", str(kubeconfig)],
        )
        assert result.exit_code == 2
        (line,) = result.stderr.splitlines()
        assert line.startswith("Error: ")
        assert f"cannot reach the Kubernetes API at https://127.0.0.1:{port}" in line
        assert "Traceback" not in result.output
        if command == "rotate":
            assert "--offline" in line

    def test_a_missing_context_is_one_line(self, cli: CliRunner, tmp_path: Path) -> None:
        certs.issue(tmp_path / "certs", service="s", namespace="n")
        kubeconfig = kubeconfig_for(tmp_path, "https://127.0.0.1:1")
        result = cli.invoke(
            certs_cli.app,
            [
                "inject",
                "--dir",
                str(tmp_path / "certs"),
                "--kubeconfig",
                str(kubeconfig),
                "--context",
                "nope",
            ],
        )
        assert result.exit_code == 2
        (line,) = result.stderr.splitlines()
        assert "cannot load a Kubernetes configuration" in line and "nope" in line
