"""``promtool`` (session scope): Prometheus' rule checker, built with `testbed.build` (cached in
``${PODIUM_CACHE:-~/.cache/podium}/promtool``) or taken from ``$PODIUM_PROMTOOL``. Without ``go``
on PATH the tests that need it skip, unless ``PODIUM_REQUIRE_E2E`` is set (CI), where a missing
promtool is a failure. Those tests are marked ``e2e`` (they need a Go build), so ``make unit``
stays Go-free.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed import build


@pytest.fixture(scope="session")
def promtool() -> Path:
    if not os.environ.get("PODIUM_PROMTOOL") and not build.go_available():
        if os.environ.get("PODIUM_REQUIRE_E2E"):  # CI: a missing promtool is a failure
            pytest.fail("go is not on PATH and PODIUM_REQUIRE_E2E is set: promtool must run")
        pytest.skip("go is not on PATH: cannot build promtool")
    try:
        return build.promtool_binary()
    except build.BuildError as err:
        pytest.fail(f"building promtool failed ({err}); see its stderr above")
