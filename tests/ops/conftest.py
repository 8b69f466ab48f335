from __future__ import annotations

from pathlib import Path

import pytest
import yaml

#: The one line a command that reads the cluster says when its apiserver refuses connections.
UNREACHABLE = (
    "Error: cannot read the cluster: cannot reach the Kubernetes API at "
    "https://127.0.0.1:1: Connection refused"
)


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose apiserver refuses every connection (``UNREACHABLE``)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return kubeconfig
