"""Where a `LocalCluster` keeps its files: everything lives under one work dir."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Layout"]


@dataclass(frozen=True)
class Layout:
    """The binaries' dir and the work dir, and the paths derived from them."""

    bin_dir: Path
    work_dir: Path

    @property
    def pki_dir(self) -> Path:
        return self.work_dir / "pki"

    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "logs"

    @property
    def kwok_home(self) -> Path:
        """kwok's HOME, so it never reads a ~/.kwok/kwok.yaml."""
        return self.work_dir / "kwok"

    @property
    def etcd_data(self) -> Path:
        return self.work_dir / "etcd"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def ca_key_file(self) -> Path:
        return self.pki_dir / "ca.key"

    @property
    def admin_cert_file(self) -> Path:
        return self.pki_dir / "admin.crt"

    @property
    def admin_key_file(self) -> Path:
        return self.pki_dir / "admin.key"

    @property
    def kubeconfig(self) -> Path:
        return self.work_dir / "admin.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.work_dir / "audit" / "audit.log"

    @property
    def audit_policy_file(self) -> Path:
        return self.work_dir / "audit" / "policy.yaml"

    def make_dirs(self) -> None:
        for directory in (self.pki_dir, self.logs_dir, self.audit_log.parent, self.kwok_home):
            directory.mkdir(parents=True, exist_ok=True)
