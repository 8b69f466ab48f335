"""Building Karpenter's KWOK provider (``sigs.k8s.io/karpenter/kwok``), the real autoscaler the
CapacityBuffer e2e test runs against.

Karpenter v1.15.0's ``go.mod`` asks for go 1.26.9, newer than the toolchain CI installs, so every
``go`` call for it runs with ``GOTOOLCHAIN`` set to that version (the Go module proxy serves the
toolchain, checked against sum.golang.org like any module). Its CRDs are vendored in the
repository (`CRD_DIR`, with their source and checksums); the build checks each against the module
it compiled and fails on any difference, so the controller and the CRDs the tests install agree.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from testbed.gobuild import go
from testbed.paths import MODULES, REPO, cache_root

__all__ = ["BINARY", "CRD_DIR", "CRD_SOURCES", "MODULE", "TOOLCHAIN", "build_karpenter"]

MODULE = "sigs.k8s.io/karpenter"
PACKAGE = "sigs.k8s.io/karpenter/kwok"
BINARY = "karpenter-kwok"
#: The toolchain Karpenter's go.mod requires (``go 1.26.9``).
TOOLCHAIN = "go1.26.9"
#: The vendored CRDs (byte for byte from the module; see SOURCES.md there).
CRD_DIR = REPO / "testbed" / "karpenter" / "crds"
#: Each vendored CRD file and where it sits in the module.
CRD_SOURCES: dict[str, str] = {
    "autoscaling.x-k8s.io_capacitybuffers.yaml": "kwok/charts/crds",
    "karpenter.sh_nodeclaims.yaml": "kwok/charts/crds",
    "karpenter.sh_nodeoverlays.yaml": "kwok/charts/crds",
    "karpenter.sh_nodepools.yaml": "kwok/charts/crds",
    "karpenter.kwok.sh_kwoknodeclasses.yaml": "kwok/apis/crds",
}


def _env() -> dict[str, str]:
    return {"GOTOOLCHAIN": TOOLCHAIN}


def _check_crds(source: Path) -> None:
    for name, directory in CRD_SOURCES.items():
        upstream = source / directory / name
        vendored = CRD_DIR / name
        if not upstream.is_file():
            raise go.BuildError(f"{directory}/{name} is not in {source}")
        if not vendored.is_file() or vendored.read_bytes() != upstream.read_bytes():
            raise go.BuildError(f"{vendored} differs from {upstream}: re-vendor it")


def build_karpenter() -> Path:
    """``bin/karpenter-kwok`` and ``karpenter.json`` (written last: the build is complete) in a
    cache directory named by version and wrapper-module hash; returns that directory."""
    module_dir = MODULES / "karpenter"
    env = _env()
    version = go.go("list", "-m", "-f", "{{.Version}}", MODULE, cwd=module_dir, env=env)
    if not version:
        raise go.BuildError(f"cannot read the version of {MODULE} from {module_dir}/go.mod")
    recipe_hash = go.recipe_hash(go.module_files(module_dir))
    out = cache_root() / "karpenter" / f"karpenter-{version}-{recipe_hash}"
    binary = out / "bin" / BINARY
    with go.locked(out):
        if (out / "karpenter.json").is_file() and os.access(binary, os.X_OK):
            go.log("karpenter", f"cached: {out}")
            return out
        started = time.monotonic()
        go.log("karpenter", f"building {PACKAGE} {version} with {TOOLCHAIN} into {out}")
        go.go("mod", "download", MODULE, cwd=module_dir, env=env)
        source = Path(go.go("list", "-m", "-f", "{{.Dir}}", MODULE, cwd=module_dir, env=env))
        _check_crds(source)
        with go.staging(out) as staging:
            built = staging / "bin" / BINARY
            flags = ("-trimpath", f"-ldflags={go.STRIP}")
            go.go("build", *flags, "-o", str(built), PACKAGE, cwd=module_dir, build=True, env=env)
            shutil.rmtree(out / "bin", ignore_errors=True)
            (staging / "bin").rename(out / "bin")
        meta = {
            "module": MODULE,
            "version": version,
            "package": PACKAGE,
            "toolchain": TOOLCHAIN,
            "binary": f"bin/{BINARY}",
            "recipe": recipe_hash,
            "build_seconds": round(time.monotonic() - started),
        }
        (out / "karpenter.json").write_text(json.dumps(meta) + "\n")
        go.log("karpenter", f"built in {time.monotonic() - started:.0f}s: {out}")
        return out
