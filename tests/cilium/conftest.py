"""Fixtures for the verdict-oracle tests (see docs/cilium.md).

``oracle`` / ``oracle115`` (session scope) build Cilium's policy engine with `testbed.build`
(cached in ``${PODIUM_CACHE:-~/.cache/podium}/cilium-oracle``), or take the binary from
``$PODIUM_CILIUM_ORACLE`` / ``$PODIUM_CILIUM_ORACLE115``. Without ``go`` on PATH they skip, unless
``PODIUM_REQUIRE_E2E`` is set (CI), where a missing oracle is a failure. Every test here is marked
``e2e`` (it needs a Go build), so ``make unit`` stays Go-free.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed import build
from tests.cilium.matrix import Matrix
from tests.cilium.oracle import Oracle


def oracle_or_skip(module: str, env: str) -> Path:
    """`testbed.build.oracle_binary`, but a skip without ``go`` (a failure in CI)."""
    if not os.environ.get(env) and not build.go_available():
        if os.environ.get("PODIUM_REQUIRE_E2E"):  # CI: a missing oracle is a failure
            pytest.fail("go is not on PATH and PODIUM_REQUIRE_E2E is set: the oracle must run")
        pytest.skip("go is not on PATH: cannot build Cilium's policy engine")
    try:
        return build.oracle_binary(module)
    except build.BuildError as err:
        pytest.fail(f"building the {module} verdict oracle failed ({err}); see its stderr above")


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    """Cilium's current policy engine (the version testbed/modules/cilium/oracle/go.mod pins)."""
    return Oracle(oracle_or_skip("oracle", "PODIUM_CILIUM_ORACLE"))


@pytest.fixture(scope="session")
def oracle115() -> Oracle:
    """Cilium v1.15's policy engine: no enableDefaultDeny, no port ranges."""
    return Oracle(oracle_or_skip("oracle115", "PODIUM_CILIUM_ORACLE115"))


@pytest.fixture(scope="session")
def matrix(oracle: Oracle) -> Matrix:
    return Matrix(oracle)


@pytest.fixture(scope="session")
def old_matrix(oracle115: Oracle) -> Matrix:
    return Matrix(oracle115, prune=True)
