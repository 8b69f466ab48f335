"""One builder for every Go-built part of the test bed, from the Go module proxy.

    python -m testbed.build controlplane helm trainingoperator oracle ...

Names: ``controlplane`` (kube-apiserver, kube-scheduler, kube-controller-manager, etcd, kwok and
kwok's default stages), ``helm``, the seven operators (`OPERATORS`) and the two Cilium verdict
oracles (``oracle``, ``oracle115``). stdout gets one line per name, what it built (a bin dir, a
binary, an operator's dir); progress goes to stderr.

Versions are pinned by the wrapper modules under ``testbed/modules/`` (their go.mod and go.sum):
change them there. Everything goes to the cache (``${PODIUM_CACHE:-~/.cache/podium}``) under a
key made of the component, its version and a hash of its wrapper module's files and `RECIPE`
(not of this file: a tidier builder reuses what an older one built). A build is skipped when its
output is complete; one builder at a time per key (``flock``), the others wait and then find the
cache filled. The compiler runs under ``nice -n 10`` with ``GOFLAGS=-p=2`` and ``CGO_ENABLED=0``
(static binaries): the machine is shared and tests running beside a build keep a core.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.paths import MODULES, cache_root

__all__ = [
    "NAMES",
    "OPERATORS",
    "ORACLES",
    "RECIPE",
    "BuildError",
    "GoMissing",
    "OperatorRecipe",
    "build",
    "build_controlplane",
    "build_helm",
    "build_operator",
    "build_oracle",
    "controlplane_bin_dir",
    "go_available",
    "helm_binary",
    "main",
    "oracle_binary",
]

#: Bump when the way binaries are built changes (flags, what is copied), so caches rebuild.
RECIPE = "1"
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
_STRIP = "-s -w"
_CRD = re.compile(r"^kind: CustomResourceDefinition", re.MULTILINE)


@dataclass(frozen=True)
class OperatorRecipe:
    """How to build one operator and what to copy from its project's source tree."""

    #: The module whose version names the build.
    module: str
    #: The main package.
    package: str
    binary: str
    #: Paths in the module's source tree; directories are copied with every *.yaml below them.
    crds: tuple[str, ...]
    webhooks: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()


OPERATORS: dict[str, OperatorRecipe] = {
    "trainingoperator": OperatorRecipe(
        module="github.com/kubeflow/training-operator",
        package="github.com/kubeflow/training-operator/cmd/training-operator.v1",
        binary="training-operator",
        crds=("manifests/base/crds",),
        webhooks=("manifests/base/webhook",),
        examples=("examples",),
    ),
    "mpioperator": OperatorRecipe(
        module="github.com/kubeflow/mpi-operator",
        package="github.com/kubeflow/mpi-operator/cmd/mpi-operator",
        binary="mpi-operator",
        crds=("manifests/base/kubeflow.org_mpijobs.yaml",),
        examples=("examples/v2beta1",),
    ),
    "jobset": OperatorRecipe(
        module="sigs.k8s.io/jobset",
        package="sigs.k8s.io/jobset",
        binary="jobset-controller-manager",
        crds=("config/components/crd/bases",),
        webhooks=("config/components/webhook", "config/components/internalcert"),
        examples=("config/samples",),
    ),
    "trainer": OperatorRecipe(
        module="github.com/kubeflow/trainer/v2",
        package="github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
        binary="trainer-controller-manager",
        crds=("manifests/base/crds",),
        webhooks=("manifests/base/webhook", "manifests/base/manager"),
        examples=("examples", "manifests/base/runtimes"),
    ),
    "lws": OperatorRecipe(
        module="sigs.k8s.io/lws",
        package="sigs.k8s.io/lws/cmd",
        binary="lws-controller-manager",
        crds=("config/crd/bases",),
        webhooks=("config/webhook", "config/internalcert", "config/manager"),
        examples=("docs/examples/sample", "config/samples"),
    ),
    "kuberay": OperatorRecipe(
        module="github.com/ray-project/kuberay/ray-operator",
        package="github.com/ray-project/kuberay/ray-operator",
        binary="ray-operator",
        crds=("config/crd/bases",),
        webhooks=("config/webhook",),
        examples=("config/samples",),
    ),
    "volcano": OperatorRecipe(
        module="volcano.sh/volcano",
        package="volcano.sh/volcano/cmd/controller-manager",
        binary="vc-controller-manager",
        crds=("config/crd/volcano/bases", "config/crd/jobflow/bases"),
        examples=("example",),
    ),
}
#: The verdict oracles: Cilium's policy engine of the current line and of v1.15.
ORACLES = ("oracle", "oracle115")
#: Every name the builder knows, in the order `main` builds them without arguments.
NAMES: tuple[str, ...] = ("controlplane", "helm", *OPERATORS, *ORACLES)


class BuildError(RuntimeError):
    """A build failed or a wrapper module is broken."""


class GoMissing(BuildError):
    """``go`` is not on PATH."""


def _log(component: str, message: str) -> None:
    print(f"[build {component}] {message}", file=sys.stderr, flush=True)


def go_available() -> bool:
    return shutil.which("go") is not None


def _go_env() -> dict[str, str]:
    env = dict(os.environ, CGO_ENABLED="0")
    flags = env.get("GOFLAGS", "")
    if "-p=" not in flags:
        env["GOFLAGS"] = f"{flags} -p=2".strip()
    return env


def _go(*args: str, cwd: Path, build: bool = False, env: dict[str, str] | None = None) -> str:
    """Run ``go args`` in ``cwd``; its stdout (a build's goes to stderr, like its progress)."""
    if not go_available():
        raise GoMissing("go is not on PATH")
    command = ["nice", "-n", "10", "go", *args] if build else ["go", *args]
    result = subprocess.run(
        command,
        cwd=cwd,
        env={**_go_env(), **(env or {})},
        stdout=2 if build else subprocess.PIPE,  # a build's output is progress: stderr
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(f"`go {' '.join(args)}` in {cwd} exited with {result.returncode}")
    return (result.stdout or "").strip()


def _version(module_dir: Path, module: str) -> str:
    """The version of ``module`` the wrapper module in ``module_dir`` requires."""
    version = _go("list", "-m", "-f", "{{.Version}}", module, cwd=module_dir)
    if not version:
        raise BuildError(f"cannot read the version of {module} from {module_dir}/go.mod")
    return version


def _source_dir(module_dir: Path, module: str) -> Path:
    """Where the module cache holds ``module``'s source tree (downloaded if needed)."""
    _go("mod", "download", module, cwd=module_dir)
    return Path(_go("list", "-m", "-f", "{{.Dir}}", module, cwd=module_dir))


def _module_files(*module_dirs: Path) -> list[Path]:
    files: list[Path] = []
    for directory in module_dirs:
        files += [directory / "go.mod", directory / "go.sum", *sorted(directory.glob("*.go"))]
    return [f for f in files if f.is_file()]


def _recipe_hash(files: Iterable[Path]) -> str:
    """8 hex digits over `RECIPE` and the files (their names under MODULES and contents)."""
    digest = hashlib.sha256(f"recipe {RECIPE}\n".encode())
    for path in files:
        digest.update(f"{path.relative_to(MODULES)}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:8]


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """One builder at a time per cache entry."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A temp dir inside ``out`` (so the final move is a rename), removed unless moved away."""
    staging = Path(tempfile.mkdtemp(prefix="tmp.", dir=out))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- the control plane ----------------------------------------------------------------------------


def _k8s_ldflags(version: str) -> str:
    """What hack/lib/version.sh stamps into a release build (else /version says v0.0.0-master)."""
    minor = version.removeprefix("v1.").split(".")[0]
    flags = [_STRIP]
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
    k8s_version = _version(kubernetes, "k8s.io/kubernetes")
    etcd_version = _version(etcd, "go.etcd.io/etcd/server/v3")
    kwok_version = _version(kwok, "sigs.k8s.io/kwok")
    key = "-".join(
        (
            k8s_version,
            etcd_version,
            kwok_version,
            _recipe_hash(_module_files(kubernetes, etcd, kwok)),
        )
    )
    out = cache_root() / "controlplane" / key
    bin_dir = out / "bin"
    with _locked(out):
        if _controlplane_complete(bin_dir):
            _log("controlplane", f"cached: {bin_dir}")
            return bin_dir
        started = time.monotonic()
        _log(
            "controlplane",
            f"building kubernetes {k8s_version}, etcd {etcd_version}, kwok {kwok_version}"
            f" into {bin_dir}",
        )
        with _staging(out) as staging:
            _log(
                "controlplane",
                f"kube-apiserver, kube-scheduler, kube-controller-manager ({k8s_version})",
            )
            commands = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
            _go(
                "build",
                "-trimpath",
                f"-ldflags={_k8s_ldflags(k8s_version)}",
                "-o",
                f"{staging}/",
                *(f"k8s.io/kubernetes/cmd/{c}" for c in commands),
                cwd=kubernetes,
                build=True,
            )
            _log("controlplane", f"etcd ({etcd_version})")
            flags = ("-trimpath", f"-ldflags={_STRIP}")
            _go("build", *flags, "-o", str(staging / "etcd"), ".", cwd=etcd, build=True)
            _log("controlplane", f"kwok ({kwok_version})")
            package = "sigs.k8s.io/kwok/cmd/kwok"
            _go("build", *flags, "-o", str(staging / "kwok"), package, cwd=kwok, build=True)
            stages = _source_dir(kwok, "sigs.k8s.io/kwok") / "kustomize" / "stage"
            (staging / KWOK_STAGES_FILE).write_text(
                "".join(f"---\n{(stages / s).read_text()}" for s in _KWOK_STAGES)
            )
            if not _controlplane_complete(staging):
                raise BuildError(f"a binary is missing in {staging}")
            shutil.rmtree(bin_dir, ignore_errors=True)
            staging.rename(bin_dir)
        _log("controlplane", f"built in {time.monotonic() - started:.0f}s: {bin_dir}")
        return bin_dir


# --- helm -----------------------------------------------------------------------------------------


def build_helm(version: str | None = None) -> Path:
    """helm (``$HELM_VERSION``, else `HELM_VERSION`); returns the binary. helm.sh/helm/v3 has no
    replace directives, so a plain ``go install module@version`` builds it: no wrapper module."""
    version = version or os.environ.get("HELM_VERSION") or HELM_VERSION
    out = cache_root() / f"helm-{version}-{_recipe_hash([])}"
    binary = out / "helm"
    with _locked(out):
        if os.access(binary, os.X_OK):
            _log("helm", f"cached: {binary}")
            return binary
        started = time.monotonic()
        _log("helm", f"building helm {version} (a few minutes cold on 2 cores)")
        # The -X flags stamp what a release build stamps (else `helm version` says only v3.22).
        stamp = "helm.sh/helm/v3/internal/version"
        ldflags = f"{_STRIP} -X {stamp}.version={version} -X {stamp}.gitTreeState=clean"
        with _staging(out) as staging:
            _go(
                "install",
                "-trimpath",
                f"-ldflags={ldflags}",
                f"helm.sh/helm/v3/cmd/helm@{version}",
                cwd=staging,
                build=True,
                env={"GOBIN": str(staging)},
            )
            (staging / "helm").rename(binary)
        _log("helm", f"built in {time.monotonic() - started:.0f}s: {binary}")
        return binary


# --- operators ------------------------------------------------------------------------------------


def _copy_tree(source: Path, paths: Sequence[str], destination: Path) -> None:
    """Copy ``paths`` (relative to ``source``) into ``destination``, keeping their relative
    paths; a directory with every *.yaml below it."""
    for relative in paths:
        path = source / relative
        if path.is_dir():
            files = sorted(path.rglob("*.yaml"))
        elif path.is_file():
            files = [path]
        else:
            raise BuildError(f"{relative} is not in {source}")
        for file in files:
            target = destination / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)  # not the mode: the module cache is read-only


def _copy_crds(source: Path, paths: Sequence[str], destination: Path) -> None:
    """Copy the CustomResourceDefinition files among ``paths`` flat into ``destination``."""
    destination.mkdir(parents=True, exist_ok=True)
    for relative in paths:
        path = source / relative
        if not path.exists():
            raise BuildError(f"{relative} is not in {source}")
        for file in sorted(path.rglob("*.yaml")) if path.is_dir() else [path]:
            if _CRD.search(file.read_text(errors="replace")):
                shutil.copyfile(file, destination / file.name)
    if not any(destination.glob("*.yaml")):
        raise BuildError(f"no CRDs found in {', '.join(paths)}")


def build_operator(name: str) -> Path:
    """Operator ``name``: ``bin/<binary>``, its project's ``crds/``, ``webhooks/`` and
    ``examples/`` (copied from the module cache, so CRD and controller agree) and
    ``operator.json`` (written last: it marks the build complete); returns the directory."""
    recipe = OPERATORS.get(name)
    if recipe is None:
        raise BuildError(f"unknown operator {name!r}; known: {', '.join(OPERATORS)}")
    module_dir = MODULES / "operators" / name
    version = _version(module_dir, recipe.module)
    recipe_hash = _recipe_hash(_module_files(module_dir))
    out = cache_root() / "operators" / f"{name}-{version}-{recipe_hash}"
    with _locked(out):
        if (out / "operator.json").is_file() and os.access(out / "bin" / recipe.binary, os.X_OK):
            _log(name, f"cached: {out}")
            return out
        started = time.monotonic()
        _log(name, f"building {recipe.module} {version} ({recipe.package}) into {out}")
        with _staging(out) as staging:
            binary = staging / "bin" / recipe.binary
            flags = ("-trimpath", f"-ldflags={_STRIP}")
            _go("build", *flags, "-o", str(binary), recipe.package, cwd=module_dir, build=True)
            source = _source_dir(module_dir, recipe.module)
            _copy_crds(source, recipe.crds, staging / "crds")
            _copy_tree(source, recipe.webhooks, staging / "webhooks")
            _copy_tree(source, recipe.examples, staging / "examples")
            meta = {
                "name": name,
                "module": recipe.module,
                "version": version,
                "package": recipe.package,
                "binary": f"bin/{recipe.binary}",
                "recipe": recipe_hash,
                "build_seconds": round(time.monotonic() - started),
            }
            for part in ("crds", "webhooks", "examples", "bin"):
                shutil.rmtree(out / part, ignore_errors=True)
                if (staging / part).exists():
                    (staging / part).rename(out / part)
            (out / "operator.json").write_text(json.dumps(meta) + "\n")
        _log(name, f"built in {time.monotonic() - started:.0f}s: {out}")
        return out


# --- the Cilium verdict oracles -------------------------------------------------------------------


def _oracle_sources(name: str) -> list[Path]:
    """The shared oracle source and the line's own module (go.mod, go.sum, its Go files)."""
    return [
        *sorted((MODULES / "cilium" / "common").glob("*.go")),
        *_module_files(MODULES / "cilium" / name),
    ]


def build_oracle(name: str = "oracle") -> Path:
    """The verdict oracle ``name`` (`ORACLES`): Cilium's policy engine in a small command,
    assembled from the shared source and the line's own files; returns the binary."""
    if name not in ORACLES:
        raise BuildError(f"unknown oracle {name!r}; known: {', '.join(ORACLES)}")
    module_dir = MODULES / "cilium" / name
    version = _version(module_dir, "github.com/cilium/cilium")
    sources = _oracle_sources(name)
    out = cache_root() / "cilium-oracle" / f"{version}-{_recipe_hash(sources)}"
    binary = out / "oracle"
    with _locked(out):
        if os.access(binary, os.X_OK):
            _log(name, f"cached: {binary}")
            return binary
        started = time.monotonic()
        _log(name, f"building cilium {version} into {binary}")
        with _staging(out) as staging:
            source = staging / "src"
            source.mkdir()
            for file in sources:
                shutil.copyfile(file, source / file.name)
            flags = ("-trimpath", f"-ldflags={_STRIP}")
            _go("build", *flags, "-o", str(staging / "oracle"), ".", cwd=source, build=True)
            (staging / "oracle").rename(binary)
        _log(name, f"built in {time.monotonic() - started:.0f}s: {binary}")
        return binary


# --- entry points ---------------------------------------------------------------------------------


def build(name: str) -> Path:
    """Build (or find cached) ``name`` (`NAMES`); return what it made."""
    if name == "controlplane":
        return build_controlplane()
    if name == "helm":
        return build_helm()
    if name in ORACLES:
        return build_oracle(name)
    return build_operator(name)


def controlplane_bin_dir() -> Path:
    """``$PODIUM_CONTROLPLANE_BIN``, else the control plane's bin dir (built if needed)."""
    if from_env := os.environ.get("PODIUM_CONTROLPLANE_BIN"):
        return Path(from_env)
    return build_controlplane()


def helm_binary() -> Path:
    """``$PODIUM_HELM``, else helm (built if needed)."""
    if from_env := os.environ.get("PODIUM_HELM"):
        return Path(from_env)
    return build_helm()


def oracle_binary(name: str = "oracle") -> Path:
    """``$PODIUM_CILIUM_ORACLE`` (``…ORACLE115`` for oracle115), else the oracle (built)."""
    if from_env := os.environ.get(f"PODIUM_CILIUM_{name.upper()}"):
        return Path(from_env)
    return build_oracle(name)


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or list(NAMES)
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        print(f"unknown: {', '.join(unknown)}; known: {', '.join(NAMES)}", file=sys.stderr)
        return 2
    try:
        for name in names:
            print(build(name), flush=True)
    except BuildError as error:
        print(f"[build] {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
