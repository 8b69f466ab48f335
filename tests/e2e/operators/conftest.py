"""Fixtures for the real-operator tests (docs/operators.md).

They run only for the operators named in ``$PODIUM_E2E_OPERATORS`` (comma-separated build
names, or ``all``): building all seven operators cold takes a long while, so they are opt-in.
`operator_cluster` is a control plane of its own (the suite's ``local_cluster`` installs the
CRDs of testbed/crds, including a clashing MPIJob, and no operator); `operator_pool` starts
operators on demand and stops them at the end of the session.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from testbed.controlplane import ZONES, ApiError, LocalCluster, crd_files
from testbed.operators import NAMES, OperatorPool
from testbed.operators.frameworks import FRAMEWORKS

from ..conftest import controlplane_or_skip

ENV = "PODIUM_E2E_OPERATORS"


def enabled_operators() -> frozenset[str]:
    """The operators ``$PODIUM_E2E_OPERATORS`` asks to test."""
    value = os.environ.get(ENV, "").strip()
    if value in ("all", "1"):
        return frozenset(NAMES)
    return frozenset(v.strip() for v in value.split(",") if v.strip())


def needs(*operators: str) -> pytest.MarkDecorator:
    """Skip unless ``$PODIUM_E2E_OPERATORS`` asks for every one of ``operators``."""
    missing = set(operators) - enabled_operators()
    return pytest.mark.skipif(bool(missing), reason=f"set {ENV}={','.join(operators)}")


def framework_params(names: Iterable[str]) -> list[Any]:
    """One parameter per framework, skipped unless its operators are asked for."""
    return [pytest.param(n, id=n, marks=needs(*FRAMEWORKS[n].operators)) for n in names]


@pytest.fixture(scope="session")
def operator_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    bin_dir = controlplane_or_skip()
    with LocalCluster(bin_dir, tmp_path_factory.mktemp("operators-controlplane")) as cluster:
        cluster.create_fake_nodes(ZONES)
        yield cluster


@pytest.fixture(scope="session")
def operator_pool(
    operator_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorPool]:
    with OperatorPool(operator_cluster, tmp_path_factory.mktemp("operators")) as pool:
        yield pool


def ready_for_podium(cluster: LocalCluster, pool: OperatorPool) -> None:
    """What podium finds on a cluster where it is installed beside the operators: the requested
    operators running (so their CRDs exist: podium retries a kind whose CRD is missing only
    every 30 s, and until then an adapter that verifies the owner chain, LWS, does not recognise
    the pods), Cilium's policy CRDs (so it writes its policies), and its own namespace (for the
    leader-election lease)."""
    pool.ensure([n for n in NAMES if n in enabled_operators()])
    cluster.install_crds(p for p in crd_files() if p.name.startswith("cilium.io_"))
    with contextlib.suppress(ApiError):
        cluster.create_namespace("podium-system")
