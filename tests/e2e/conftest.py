"""Fixtures for end-to-end tests against a real control plane (see docs/e2e.md).

`local_cluster` (session scope) builds the binaries with `testbed.build`, or takes them from
``$PODIUM_CONTROLPLANE_BIN``, and starts a `LocalCluster` with kwok nodes in three zones and
the upstream CRDs of testbed/crds installed. It skips only when ``go`` is not on PATH.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import build
from testbed.controlplane import ZONES, ApiError, LocalCluster, crd_files

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that need the operators, Karpenter or Kueue last: test_demo.py, then the
    real-operator tests, then test_karpenter.py, then test_kueue.py, each in collection order.

    ``make test`` builds the operators, Karpenter and Kueue in the background while the rest of
    the suite runs (``testbed.build --for-tests``): last, they find their builds done (or wait
    for them).
    test_demo.py goes before the operator tests: only one mpi-operator runs per machine (its
    health port is a fixed :8080; the runner takes a machine-wide lock for it), and the operator
    tests' session pool keeps theirs until the session ends, so the demo's own mpi-operator
    would wait for it in vain.
    """
    operators = HERE / "operators"

    def stage(item: pytest.Item) -> int:
        if item.path == HERE / "test_demo.py":
            return 1
        if operators in item.path.parents:
            return 2
        if item.path == HERE / "test_karpenter.py":
            return 3
        return 4 if item.path == HERE / "test_kueue.py" else 0

    items.sort(key=stage)  # stable: collection order within each stage


def controlplane_or_skip() -> Path:
    """`testbed.build.controlplane_bin_dir`, but a skip without ``go`` (a failure in CI)."""
    if not os.environ.get("PODIUM_CONTROLPLANE_BIN") and not build.go_available():
        if os.environ.get("PODIUM_REQUIRE_E2E"):  # CI: a missing control plane is a failure
            pytest.fail("go is not on PATH and PODIUM_REQUIRE_E2E is set: the e2e tests must run")
        pytest.skip("go is not on PATH: cannot build the control plane for e2e tests")
    return build.controlplane_bin_dir()


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    bin_dir = controlplane_or_skip()
    with LocalCluster(bin_dir, tmp_path_factory.mktemp("controlplane")) as cluster:
        cluster.create_fake_nodes(ZONES)
        cluster.install_crds(crd_files())
        yield cluster


@pytest.fixture
def namespace(local_cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace, deleted afterwards (without waiting for it to go)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    local_cluster.create_namespace(name)
    yield name
    try:
        local_cluster.request("DELETE", f"/api/v1/namespaces/{name}")
    except ApiError as error:
        if error.status != 404:
            raise
