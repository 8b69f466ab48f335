"""docs/cilium.md shows what the oracles say: its generated tables are regenerated and compared
(like the benchmark tables). To update: python -m tests.cilium.matrix --write."""

from __future__ import annotations

import pytest

from tests.cilium.matrix import BEGIN, DOC, END, Matrix, embed, render

pytestmark = pytest.mark.e2e


def test_the_committed_matrix_is_what_the_oracles_say(matrix: Matrix, old_matrix: Matrix) -> None:
    doc = DOC.read_text()
    assert embed(doc, render(matrix, old_matrix)) == doc


def test_the_generated_part_is_delimited_once() -> None:
    doc = DOC.read_text()
    assert doc.count(BEGIN) == doc.count(END) == 1
