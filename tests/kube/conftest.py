from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kube.apiserver import FakeApiServer, running


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with running() as server:
        yield server
