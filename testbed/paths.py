"""Where the test bed finds things: the repository, the shared fixtures, the build cache."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "CRD_DIR", "MODULES", "REPO", "SHARED", "cache_root", "crd_files"]

#: The repository root (this package sits at its top).
REPO = Path(__file__).resolve().parents[1]
#: The Go wrapper modules that pin every component the builder makes.
MODULES = Path(__file__).resolve().parent / "modules"
#: shared/ is a sibling of the repository root (also in CI, which clones elsewhere).
SHARED = (REPO / ".." / "shared").resolve()
#: The CRDs the e2e cluster installs (training frameworks, Cilium, Volcano, ...).
CRD_DIR = SHARED / "fixtures" / "crds"
#: Overrides the cache root (default ``~/.cache/podium``).
CACHE_ENV = "PODIUM_CACHE"
# Both MPIJob files define mpijobs.kubeflow.org; keep mpi-operator's v2beta1.
_EXCLUDED_CRD_FILES = frozenset({"kubeflow.org_mpijobs.yaml"})


def cache_root() -> Path:
    """``$PODIUM_CACHE``, else ``~/.cache/podium``: built binaries live here, outside the repo."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "podium")


def crd_files(directory: Path = CRD_DIR) -> list[Path]:
    """The CRD files to install: all of ``directory`` but the clashing MPIJob v1."""
    return sorted(p for p in directory.glob("*.yaml") if p.name not in _EXCLUDED_CRD_FILES)
