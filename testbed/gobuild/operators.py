"""Building the seven operators, each with its project's own CRDs, webhooks and examples — and
Kueue (`QUEUEING`), built the same way but run by the placement study and its own e2e test, not
by the operator pool."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.gobuild import go
from testbed.paths import MODULES, cache_root

__all__ = ["OPERATORS", "QUEUEING", "OperatorRecipe", "build_operator"]

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

#: Kueue, the queueing layer the placement study compares podium's hold with (its Topology Aware
#: Scheduling, plain-pod groups). Its manager config (``config/components/manager``) comes along
#: as an example; its CRDs are installed without the conversion-webhook patches (every client
#: here speaks the storage version, v1beta2).
QUEUEING: dict[str, OperatorRecipe] = {
    "kueue": OperatorRecipe(
        module="sigs.k8s.io/kueue",
        package="sigs.k8s.io/kueue/cmd/kueue",
        binary="kueue",
        crds=("config/components/crd/bases",),
        webhooks=("config/components/webhook",),
        examples=("config/components/manager",),
    ),
}


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
            raise go.BuildError(f"{relative} is not in {source}")
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
            raise go.BuildError(f"{relative} is not in {source}")
        for file in sorted(path.rglob("*.yaml")) if path.is_dir() else [path]:
            if _CRD.search(file.read_text(errors="replace")):
                shutil.copyfile(file, destination / file.name)
    if not any(destination.glob("*.yaml")):
        raise go.BuildError(f"no CRDs found in {', '.join(paths)}")


def build_operator(name: str) -> Path:
    """Operator ``name``: ``bin/<binary>``, its project's ``crds/``, ``webhooks/`` and
    ``examples/`` (copied from the module cache, so CRD and controller agree) and
    ``operator.json`` (written last: it marks the build complete); returns the directory."""
    recipe = OPERATORS.get(name) or QUEUEING.get(name)
    if recipe is None:
        known = ", ".join([*OPERATORS, *QUEUEING])
        raise go.BuildError(f"unknown operator {name!r}; known: {known}")
    module_dir = MODULES / "operators" / name
    version = go.version(module_dir, recipe.module)
    recipe_hash = go.recipe_hash(go.module_files(module_dir))
    out = cache_root() / "operators" / f"{name}-{version}-{recipe_hash}"
    with go.locked(out):
        if (out / "operator.json").is_file() and os.access(out / "bin" / recipe.binary, os.X_OK):
            go.log(name, f"cached: {out}")
            return out
        started = time.monotonic()
        go.log(name, f"building {recipe.module} {version} ({recipe.package}) into {out}")
        with go.staging(out) as staging:
            binary = staging / "bin" / recipe.binary
            flags = ("-trimpath", f"-ldflags={go.STRIP}")
            go.go("build", *flags, "-o", str(binary), recipe.package, cwd=module_dir, build=True)
            source = go.source_dir(module_dir, recipe.module)
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
        go.log(name, f"built in {time.monotonic() - started:.0f}s: {out}")
        return out
