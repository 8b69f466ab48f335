"""docs/settings.md, the settings reference: one short row per setting, defaults as the code's."""

from __future__ import annotations

import dataclasses
import enum
import re
from pathlib import Path

import pytest

from webhook.core.settings import Settings

DOC = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
#: A row a reader takes in at a glance; the rest goes to the setting's section below the table.
MAX_ROW = 200


def rows() -> dict[str, tuple[str, str, str]]:
    """key -> (row, default cell, meaning cell) of the table."""
    out = {}
    for line in DOC.read_text().splitlines():
        if match := re.fullmatch(r"\| `([a-z-]+)` \| (.+?) \| (.+) \|", line):
            out[match[1]] = (line, match[2], match[3])
    return out


FIELDS = {f.name.replace("_", "-"): f for f in dataclasses.fields(Settings)}


def test_every_setting_has_exactly_one_row() -> None:
    assert sorted(rows()) == sorted(FIELDS)


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_a_row_is_short(key: str) -> None:
    row, _, _ = rows()[key]
    assert len(row) <= MAX_ROW, f"{key}: {len(row)} characters; move the rest to its section"


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_the_default_is_the_codes(key: str) -> None:
    default = getattr(Settings(), FIELDS[key].name)
    _, cell, _ = rows()[key]
    if key == "own-user":  # asked of the apiserver when podium serve starts
        assert default == "" and "apiserver" in cell
        return
    shown = re.match(r"`([^`]*)`", cell)
    assert shown is not None, cell
    if isinstance(default, frozenset | tuple):
        assert set(shown[1].strip("[]").replace(" ", "").split(",")) - {""} == set(default)
    elif isinstance(default, enum.Enum):
        assert shown[1] == default.value
    elif isinstance(default, int | float) and not isinstance(default, bool):
        assert float(shown[1]) == default
    else:
        assert shown[1] == default


def test_every_section_belongs_to_a_setting_and_every_link_to_a_section() -> None:
    text = DOC.read_text()
    sections = set(re.findall(r"^## (\S+)$", text, flags=re.MULTILINE))
    assert sections <= set(FIELDS)
    assert set(re.findall(r"\]\(#([a-z-]+)\)", text)) <= sections
