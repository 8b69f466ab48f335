"""``webhook.certs.state``: the state directory on disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.certs.support import T0, common_name, mode
from webhook import certs


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
