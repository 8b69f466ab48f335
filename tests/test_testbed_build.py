"""``testbed.build``: what ``--for-tests`` builds, in the order the e2e tests need it, and
Karpenter's vendored CRDs against their recorded checksums."""

from __future__ import annotations

import hashlib
import re

import pytest

from testbed import build
from testbed.gobuild import karpenter


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        ("", ["oracle", "oracle115", "karpenter"]),
        ("jobset,kueue", ["oracle", "oracle115", "jobset", "karpenter", "kueue"]),
        ("all", ["oracle", "oracle115", *build.OPERATORS, "karpenter", "kueue"]),
    ],
)
def test_for_tests_builds_karpenter_after_the_operators_and_before_kueue(
    asked: str, expected: list[str]
) -> None:
    assert build.for_tests(asked) == expected
    assert set(build.for_tests(asked)) <= set(build.NAMES)


def test_the_vendored_karpenter_crds_match_their_recorded_checksums() -> None:
    sources = (karpenter.CRD_DIR / "SOURCES.md").read_text()
    recorded = dict(re.findall(r"^\| (\S+\.yaml) \| .*? \| ([0-9a-f]{64}) \|$", sources, re.M))
    assert set(recorded) == set(karpenter.CRD_SOURCES)
    for name, digest in recorded.items():
        assert hashlib.sha256((karpenter.CRD_DIR / name).read_bytes()).hexdigest() == digest
