"""Decisions read the cluster through ``View``; mypy proves ``ClusterView`` is one, and that a
class lacking one of its reads is not."""

from __future__ import annotations

import inspect
import textwrap

from mypy import api

from webhook.core import adapters
from webhook.core.view import ClusterView, View

_: View = ClusterView(zone_label="zone", kept=adapters.KEPT)


def _mypy(program: str) -> tuple[str, int]:
    out, err, status = api.run(
        ["--config-file=", "--strict", "--no-error-summary", "-c", textwrap.dedent(program)]
    )
    return out + err, status


def test_mypy_proves_the_cluster_view_is_a_view_and_a_class_lacking_a_read_is_not() -> None:
    out, status = _mypy(
        """
        from webhook.core.view import ClusterView, Kept, View
        view: View = ClusterView(zone_label="zone", kept=Kept())
        """
    )
    assert status == 0, out
    out, status = _mypy(
        """
        from webhook.core.view import ClusterView, Kept, View
        class Partial:
            def get(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...
        view: View = Partial()
        """
    )
    assert status == 1 and 'expression has type "Partial", variable has type "View"' in out, out


def test_the_protocol_has_only_reads_and_the_class_has_each_with_its_signature() -> None:
    members = {n for n, v in vars(View).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert "apply" not in members
    for name in members:
        assert str(inspect.signature(getattr(ClusterView, name))) == str(
            inspect.signature(getattr(View, name))
        ), name
