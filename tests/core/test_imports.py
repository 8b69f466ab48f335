"""The decision and the offline commands load no Kubernetes client, web server or terminal UI.

``make lint`` keeps the imports of ``webhook.core`` honest statically (import-linter); these
tests check what a fresh interpreter really loads, which also catches a dependency that imports
one of them behind podium's back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

#: What the decision must never load (pyproject's import-linter contract names the same).
HEAVY = ("kubernetes", "urllib3", "fastapi", "starlette", "uvicorn", "rich", "typer")


def loaded_after(code: str) -> set[str]:
    """The top-level packages a fresh interpreter has loaded after running ``code``."""
    probe = textwrap.dedent(code) + textwrap.dedent(
        """
        import json, sys
        print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_core_and_the_offline_review_load_none_of_the_heavy_packages() -> None:
    loaded = loaded_after(
        """
        import importlib, pkgutil
        import webhook.core
        for module in pkgutil.walk_packages(webhook.core.__path__, "webhook.core."):
            importlib.import_module(module.name)
        import webhook.ops.offline
        """
    )
    assert "webhook" in loaded
    assert loaded.isdisjoint(HEAVY)


@pytest.mark.parametrize("command", ["review", "audit"])
def test_podium_review_and_audit_do_not_load_the_kubernetes_client(command: str) -> None:
    loaded = loaded_after(
        f"""
        import contextlib, io, sys
        sys.argv = ["podium", {command!r}, "--help"]
        from webhook.ops import cli
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli.main()
        """
    )
    assert "typer" in loaded  # the command line itself did run
    assert loaded.isdisjoint({"kubernetes", "urllib3", "fastapi", "starlette", "uvicorn"})
