"""``make demo``'s tables (scripts/demo.py) say things in words, not as Python values."""

from __future__ import annotations

from typing import Any

import pytest

from scripts import demo


@pytest.mark.parametrize(
    ("spec", "cell"),
    [
        ({"enableDefaultDeny": {"ingress": False, "egress": False}}, "off"),  # podium's own
        ({"enableDefaultDeny": {"ingress": True, "egress": True}}, "on"),
        ({"enableDefaultDeny": {"ingress": True, "egress": False}}, "ingress on, egress off"),
        ({"enableDefaultDeny": {"egress": False}}, "ingress default, egress off"),
        ({}, "Cilium's default"),
    ],
)
def test_the_policy_tables_default_deny_column_is_words(spec: dict[str, Any], cell: str) -> None:
    assert demo.default_deny(spec) == cell
