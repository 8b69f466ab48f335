"""Fixtures for the certificate tests: a CA, a fresh state directory, a fake apiserver, the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.certs.support import DAY, T0, FakeApiServer
from webhook import certs


@pytest.fixture(scope="module")
def ca() -> certs.KeyPair:
    return certs.issue_ca("podium-ca", lifetime=90 * DAY, now=T0)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    certs.issue(
        tmp_path,
        service="podium",
        namespace="podium-system",
        extra_sans=["127.0.0.1"],
        leaf_lifetime=30 * DAY,
        ca_lifetime=90 * DAY,
        now=T0,
    )
    return tmp_path


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def cli() -> CliRunner:
    return CliRunner()
