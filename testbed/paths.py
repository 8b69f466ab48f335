"""Where the test bed finds things: the repository, the upstream CRDs, the build cache."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "CRD_DIR", "MODULES", "REPO", "cache_root", "crd_files"]

#: The repository root (this package sits at its top).
REPO = Path(__file__).resolve().parents[1]
#: The Go wrapper modules that pin every component the builder makes.
MODULES = Path(__file__).resolve().parent / "modules"
#: The upstream CRDs the e2e cluster installs (Cilium, the training frameworks, JobSet, LWS),
#: copied byte for byte into the repository; their sources and checksums are in SOURCES.md there.
CRD_DIR = Path(__file__).resolve().parent / "crds"
#: Overrides the cache root (default ``~/.cache/podium``).
CACHE_ENV = "PODIUM_CACHE"


def cache_root() -> Path:
    """``$PODIUM_CACHE``, else ``~/.cache/podium``: built binaries live here, outside the repo."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "podium")


def crd_files(directory: Path = CRD_DIR) -> list[Path]:
    """The CRD files to install: every ``*.yaml`` of ``directory`` (none is an error: a cluster
    without them would come up quietly without the CRDs the tests and the demo create)."""
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise FileNotFoundError(f"no CRD files in {directory}")
    return files
