"""Building the control plane, helm and the Cilium verdict oracles."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from testbed.gobuild import go
from testbed.paths import MODULES, cache_root

__all__ = [
    "CONTROLPLANE_BINARIES",
    "HELM_VERSION",
    "KWOK_STAGES_FILE",
    "ORACLES",
    "build_controlplane",
    "build_helm",
    "build_oracle",
    "build_promtool",
]

HELM_VERSION = "v3.22.0"
CONTROLPLANE_BINARIES = (
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "etcd",
    "kwok",
)
#: kwok needs its Stage objects in a config file (kwokctl embeds the defaults; the bare
#: controller does not): the upstream defaults of the pinned kwok.
KWOK_STAGES_FILE = "kwok-stages.yaml"
_KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
#: The verdict oracles: Cilium's policy engine of the current line and of v1.15.
ORACLES = ("oracle", "oracle115")


# --- the control plane ----------------------------------------------------------------------------


def _k8s_ldflags(version: str) -> str:
    """What hack/lib/version.sh stamps into a release build (else /version says v0.0.0-master)."""
    minor = version.removeprefix("v1.").split(".")[0]
    flags = [go.STRIP]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor=1",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return " ".join(flags)


def _controlplane_complete(directory: Path) -> bool:
    binaries = all(os.access(directory / b, os.X_OK) for b in CONTROLPLANE_BINARIES)
    stages = directory / KWOK_STAGES_FILE
    return binaries and stages.is_file() and stages.stat().st_size > 0


def build_controlplane() -> Path:
    """kube-apiserver, kube-scheduler, kube-controller-manager, etcd, kwok and the kwok stages
    in one bin dir; returns it."""
    modules = MODULES / "controlplane"
    kubernetes, etcd, kwok = modules / "kubernetes", modules / "etcd", modules / "kwok"
    k8s_version = go.version(kubernetes, "k8s.io/kubernetes")
    etcd_version = go.version(etcd, "go.etcd.io/etcd/server/v3")
    kwok_version = go.version(kwok, "sigs.k8s.io/kwok")
    key = "-".join(
        (
            k8s_version,
            etcd_version,
            kwok_version,
            go.recipe_hash(go.module_files(kubernetes, etcd, kwok)),
        )
    )
    out = cache_root() / "controlplane" / key
    bin_dir = out / "bin"
    with go.locked(out):
        if _controlplane_complete(bin_dir):
            go.log("controlplane", f"cached: {bin_dir}")
            return bin_dir
        started = time.monotonic()
        go.log(
            "controlplane",
            f"building kubernetes {k8s_version}, etcd {etcd_version}, kwok {kwok_version}"
            f" into {bin_dir}",
        )
        with go.staging(out) as staging:
            go.log(
                "controlplane",
                f"kube-apiserver, kube-scheduler, kube-controller-manager ({k8s_version})",
            )
            commands = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
            go.go(
                "build",
                "-trimpath",
                f"-ldflags={_k8s_ldflags(k8s_version)}",
                "-o",
                f"{staging}/",
                *(f"k8s.io/kubernetes/cmd/{c}" for c in commands),
                cwd=kubernetes,
                build=True,
            )
            go.log("controlplane", f"etcd ({etcd_version})")
            flags = ("-trimpath", f"-ldflags={go.STRIP}")
            go.go("build", *flags, "-o", str(staging / "etcd"), ".", cwd=etcd, build=True)
            go.log("controlplane", f"kwok ({kwok_version})")
            package = "sigs.k8s.io/kwok/cmd/kwok"
            go.go("build", *flags, "-o", str(staging / "kwok"), package, cwd=kwok, build=True)
            stages = go.source_dir(kwok, "sigs.k8s.io/kwok") / "kustomize" / "stage"
            (staging / KWOK_STAGES_FILE).write_text(
                "".join(f"---\n{(stages / s).read_text()}" for s in _KWOK_STAGES)
            )
            if not _controlplane_complete(staging):
                raise go.BuildError(f"a binary is missing in {staging}")
            shutil.rmtree(bin_dir, ignore_errors=True)
            staging.rename(bin_dir)
        go.log("controlplane", f"built in {time.monotonic() - started:.0f}s: {bin_dir}")
        return bin_dir


# --- one binary: helm, promtool, the oracles -----------------------------------------------------


def _one_binary(
    component: str, binary: Path, what: str, compile_into: Callable[[Path], None]
) -> Path:
    """``binary`` from the cache, else built: ``compile_into(staging)`` writes a file of the
    binary's name into a staging dir, which is then renamed into place. Returns the binary."""
    with go.locked(binary.parent):
        if os.access(binary, os.X_OK):
            go.log(component, f"cached: {binary}")
            return binary
        started = time.monotonic()
        go.log(component, f"building {what} into {binary}")
        with go.staging(binary.parent) as staging:
            compile_into(staging)
            (staging / binary.name).rename(binary)
        go.log(component, f"built in {time.monotonic() - started:.0f}s: {binary}")
        return binary


# --- helm -----------------------------------------------------------------------------------------


def build_helm(version: str | None = None) -> Path:
    """helm (``$HELM_VERSION``, else `HELM_VERSION`); returns the binary. helm.sh/helm/v3 has no
    replace directives, so a plain ``go install module@version`` builds it: no wrapper module."""
    version = version or os.environ.get("HELM_VERSION") or HELM_VERSION
    # The -X flags stamp what a release build stamps (else `helm version` says only v3.22).
    stamp = "helm.sh/helm/v3/internal/version"
    ldflags = f"{go.STRIP} -X {stamp}.version={version} -X {stamp}.gitTreeState=clean"

    def compile_into(staging: Path) -> None:
        go.go(
            "install",
            "-trimpath",
            f"-ldflags={ldflags}",
            f"helm.sh/helm/v3/cmd/helm@{version}",
            cwd=staging,
            build=True,
            env={"GOBIN": str(staging)},
        )

    binary = cache_root() / f"helm-{version}-{go.recipe_hash([])}" / "helm"
    return _one_binary("helm", binary, f"helm {version} (a few minutes cold)", compile_into)


# --- promtool ---------------------------------------------------------------------------------

#: promtool needs no service discovery: the ``remove_all_sd`` tag leaves out every SD plugin
#: (github.com/prometheus/prometheus/plugins/plugin_*.go), most of Prometheus' dependencies.
PROMTOOL_TAGS = "remove_all_sd"


def build_promtool() -> Path:
    """promtool (``promtool check rules``, ``promtool test rules`` for the chart's alerts), at
    the version testbed/modules/promtool/go.mod pins; returns the binary."""
    module_dir = MODULES / "promtool"
    version = go.version(module_dir, "github.com/prometheus/prometheus")
    key = f"{version}-{go.recipe_hash(go.module_files(module_dir))}"

    def compile_into(staging: Path) -> None:
        flags = ("-trimpath", f"-tags={PROMTOOL_TAGS}", f"-ldflags={go.STRIP}")
        package = "github.com/prometheus/prometheus/cmd/promtool"
        out = str(staging / "promtool")
        go.go("build", *flags, "-o", out, package, cwd=module_dir, build=True)

    binary = cache_root() / "promtool" / key / "promtool"
    return _one_binary("promtool", binary, f"prometheus {version} cmd/promtool", compile_into)


#: The Prometheus Operator's CRDs of the kinds podium's chart ships (PodMonitor, PrometheusRule).
MONITORING_CRDS = (
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)


def monitoring_crds() -> list[Path]:
    """The Prometheus Operator's own PodMonitor and PrometheusRule CRDs, read from the module
    cache at the version testbed/modules/monitoringcrds/go.mod pins (downloaded, never built), so
    that a real apiserver validates the chart's monitoring objects."""
    module = "github.com/prometheus-operator/prometheus-operator"
    source = go.source_dir(MODULES / "monitoringcrds", module)
    return [source / "example" / "prometheus-operator-crd" / name for name in MONITORING_CRDS]


# --- the Cilium verdict oracles -------------------------------------------------------------------


def _oracle_sources(name: str) -> list[Path]:
    """The shared oracle source and the line's own module (go.mod, go.sum, its Go files)."""
    return [
        *sorted((MODULES / "cilium" / "common").glob("*.go")),
        *go.module_files(MODULES / "cilium" / name),
    ]


def build_oracle(name: str = "oracle") -> Path:
    """The verdict oracle ``name`` (`ORACLES`): Cilium's policy engine in a small command,
    assembled from the shared source and the line's own files; returns the binary."""
    if name not in ORACLES:
        raise go.BuildError(f"unknown oracle {name!r}; known: {', '.join(ORACLES)}")
    module_dir = MODULES / "cilium" / name
    version = go.version(module_dir, "github.com/cilium/cilium")
    sources = _oracle_sources(name)

    def compile_into(staging: Path) -> None:
        source = staging / "src"
        source.mkdir()
        for file in sources:
            shutil.copyfile(file, source / file.name)
        flags = ("-trimpath", f"-ldflags={go.STRIP}")
        go.go("build", *flags, "-o", str(staging / "oracle"), ".", cwd=source, build=True)

    binary = cache_root() / "cilium-oracle" / f"{version}-{go.recipe_hash(sources)}" / "oracle"
    return _one_binary(name, binary, f"cilium {version}", compile_into)
