"""Fixtures for the verdict-oracle tests (see docs/cilium.md).

``oracle`` / ``oracle115`` (session scope) build Cilium's policy engine with build.sh (cached in
``${PODIUM_CACHE:-~/.cache/podium}/cilium-oracle``), or take the binary from
``$PODIUM_CILIUM_ORACLE`` / ``$PODIUM_CILIUM_ORACLE115``. Without ``go`` on PATH they skip, unless
``PODIUM_REQUIRE_E2E`` is set (CI), where a missing oracle is a failure. Every test here is marked
``e2e`` (it needs a Go build), so ``make unit`` stays Go-free.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cilium.matrix import Matrix
from tests.cilium.oracle import Oracle, build


def oracle_binary(module: str, env: str) -> Path:
    """The oracle of ``module``: $``env``, else what build.sh prints."""
    if from_env := os.environ.get(env):
        return Path(from_env)
    if shutil.which("go") is None:
        if os.environ.get("PODIUM_REQUIRE_E2E"):  # CI: a missing oracle is a failure
            pytest.fail("go is not on PATH and PODIUM_REQUIRE_E2E is set: the oracle must run")
        pytest.skip("go is not on PATH: cannot build Cilium's policy engine")
    try:
        return build(module)
    except subprocess.CalledProcessError as err:
        pytest.fail(f"building the {module} verdict oracle failed ({err}); see its stderr above")


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    """Cilium's current policy engine (the version tests/cilium/oracle/go.mod pins)."""
    return Oracle(oracle_binary("oracle", "PODIUM_CILIUM_ORACLE"))


@pytest.fixture(scope="session")
def oracle115() -> Oracle:
    """Cilium v1.15's policy engine: no enableDefaultDeny, no port ranges."""
    return Oracle(oracle_binary("oracle115", "PODIUM_CILIUM_ORACLE115"))


@pytest.fixture(scope="session")
def matrix(oracle: Oracle) -> Matrix:
    return Matrix(oracle)


@pytest.fixture(scope="session")
def old_matrix(oracle115: Oracle) -> Matrix:
    return Matrix(oracle115, prune=True)
