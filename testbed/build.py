"""One builder for every Go-built part of the test bed, from the Go module proxy.

    python -m testbed.build controlplane helm trainingoperator oracle ...
    python -m testbed.build --for-tests

``--for-tests`` builds what only some tests need, in the order they need it: the two Cilium
verdict oracles, then the operators ``$PODIUM_E2E_OPERATORS`` asks to test (``all``, or a comma
list of names), Karpenter's KWOK provider (always), then Kueue if asked. ``make test`` runs it
in the background from the start, so that those builds overlap the control plane's and the rest
of the suite instead of running one after the other inside it.

Names: ``controlplane`` (kube-apiserver, kube-scheduler, kube-controller-manager, etcd, kwok and
kwok's default stages), ``helm``, ``promtool`` (Prometheus' rule checker, without service
discovery), the seven operators (`OPERATORS`), Kueue (`QUEUEING`), the two Cilium verdict
oracles (``oracle``, ``oracle115``) and ``karpenter`` (Karpenter's KWOK provider,
`testbed.gobuild.karpenter`). stdout gets one line per name, what it built (a bin dir, a
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

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from testbed.gobuild.components import (
    CONTROLPLANE_BINARIES,
    HELM_VERSION,
    KWOK_STAGES_FILE,
    ORACLES,
    build_controlplane,
    build_helm,
    build_oracle,
    build_promtool,
    monitoring_crds,
)
from testbed.gobuild.go import RECIPE, BuildError, GoMissing, go_available
from testbed.gobuild.karpenter import build_karpenter
from testbed.gobuild.operators import OPERATORS, QUEUEING, OperatorRecipe, build_operator

__all__ = [
    "CONTROLPLANE_BINARIES",
    "HELM_VERSION",
    "KWOK_STAGES_FILE",
    "NAMES",
    "OPERATORS",
    "ORACLES",
    "QUEUEING",
    "RECIPE",
    "BuildError",
    "GoMissing",
    "OperatorRecipe",
    "build",
    "build_controlplane",
    "build_helm",
    "build_karpenter",
    "build_operator",
    "build_oracle",
    "build_promtool",
    "controlplane_bin_dir",
    "for_tests",
    "go_available",
    "helm_binary",
    "karpenter_binary",
    "main",
    "monitoring_crds",
    "oracle_binary",
    "promtool_binary",
]

#: Every name the builder knows, in the order `main` builds them without arguments.
NAMES: tuple[str, ...] = (
    "controlplane",
    "helm",
    "promtool",
    *OPERATORS,
    *QUEUEING,
    *ORACLES,
    "karpenter",
)
#: Which operators and queueing systems the e2e tests run (``all``, or a comma list).
E2E_ENV = "PODIUM_E2E_OPERATORS"


def for_tests(asked: str | None = None) -> list[str]:
    """What only some tests need (``--for-tests``): the oracles, then what ``asked`` (default
    ``$PODIUM_E2E_OPERATORS``) names of the operators, Karpenter's KWOK provider, then Kueue
    if asked."""
    value = (os.environ.get(E2E_ENV, "") if asked is None else asked).strip()
    wanted = {v.strip() for v in value.split(",") if v.strip()}
    every = value in ("all", "1")
    operators = [n for n in OPERATORS if every or n in wanted]
    queueing = [n for n in QUEUEING if every or n in wanted]
    # The order the e2e tests need them in (tests/e2e/conftest.py): the real-operator tests,
    # then test_karpenter.py (always: Karpenter is not optional), then test_kueue.py.
    return [*ORACLES, *operators, "karpenter", *queueing]


def build(name: str) -> Path:
    """Build (or find cached) ``name`` (`NAMES`); return what it made."""
    if name == "controlplane":
        return build_controlplane()
    if name == "helm":
        return build_helm()
    if name == "promtool":
        return build_promtool()
    if name in ORACLES:
        return build_oracle(name)
    if name == "karpenter":
        return build_karpenter()
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


def promtool_binary() -> Path:
    """``$PODIUM_PROMTOOL``, else promtool (built if needed)."""
    if from_env := os.environ.get("PODIUM_PROMTOOL"):
        return Path(from_env)
    return build_promtool()


def karpenter_binary() -> Path:
    """``$PODIUM_KARPENTER``, else Karpenter's KWOK provider (built if needed)."""
    if from_env := os.environ.get("PODIUM_KARPENTER"):
        return Path(from_env)
    return build_karpenter() / "bin" / "karpenter-kwok"


def oracle_binary(name: str = "oracle") -> Path:
    """``$PODIUM_CILIUM_ORACLE`` (``…ORACLE115`` for oracle115), else the oracle (built)."""
    if from_env := os.environ.get(f"PODIUM_CILIUM_{name.upper()}"):
        return Path(from_env)
    return build_oracle(name)


def main(argv: Sequence[str] | None = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or list(NAMES)
    if names == ["--for-tests"]:
        names = for_tests()
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
