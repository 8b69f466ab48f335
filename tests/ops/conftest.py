from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

#: The one line a command that reads the cluster says when its apiserver refuses connections.
UNREACHABLE = (
    "Error: cannot read the cluster: cannot reach the Kubernetes API at "
    "https://127.0.0.1:1: Connection refused"
)


def kubeconfig(server: str, *, context: str = "x") -> dict[str, Any]:
    """A kubeconfig of one cluster at ``server``, a token user and ``context``, the current."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
        "current-context": context,
    }


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose apiserver refuses every connection (``UNREACHABLE``)."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig("https://127.0.0.1:1")))
    return path
