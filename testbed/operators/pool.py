"""Every operator by name, and operators started on demand against one cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from testbed import build as builder
from testbed.controlplane import LocalCluster
from testbed.operators.kubeflow import MPIOperator, Trainer, TrainingOperator
from testbed.operators.kuberay import KubeRay
from testbed.operators.runner import Build, Operator, OperatorError, build
from testbed.operators.sigs import JobSet, LeaderWorkerSet
from testbed.operators.volcano import Volcano

__all__ = ["NAMES", "OPERATORS", "OperatorPool", "fresh_namespace", "start"]

OPERATORS: dict[str, type[Operator]] = {
    cls.name: cls
    for cls in (TrainingOperator, MPIOperator, JobSet, Trainer, LeaderWorkerSet, KubeRay, Volcano)
}
#: Every operator the builder knows, in the order it builds them.
NAMES: tuple[str, ...] = tuple(builder.OPERATORS)
assert set(NAMES) == set(OPERATORS), "an operator the builder knows and the runner does not"


def start(
    cluster: LocalCluster,
    name: str,
    work_dir: Path | str,
    *,
    timeout: float = 180.0,
    install_crds: bool = True,
) -> Operator:
    """Build (or take from the cache) and start operator ``name``; the caller stops it."""
    operator = OPERATORS[name](cluster, build(name), work_dir)
    operator.start(timeout=timeout, install_crds=install_crds)
    return operator


class OperatorPool:
    """Operators started on demand against one cluster and stopped together (in reverse)."""

    def __init__(self, cluster: LocalCluster, work_dir: Path | str) -> None:
        self.cluster = cluster
        self.work_dir = Path(work_dir)
        self.running: dict[str, Operator] = {}
        self.builds: dict[str, Build] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def ensure(self, names: Sequence[str], *, timeout: float = 180.0) -> list[Operator]:
        """Build and start each of ``names`` not yet running, in order; return them all."""
        for name in names:
            operator = self.running.get(name)
            if operator is not None and operator.running():
                continue
            if operator is not None:
                raise OperatorError(f"{name} exited:\n{operator.log_tail()}")
            self.builds[name] = build(name)
            operator = OPERATORS[name](self.cluster, self.builds[name], self.work_dir / name)
            operator.start(timeout=timeout)
            self.running[name] = operator
        return [self.running[n] for n in names]

    def stop(self) -> None:
        for name in reversed(list(self.running)):
            self.running.pop(name).stop()


@contextlib.contextmanager
def fresh_namespace(
    cluster: LocalCluster, name: str, *, wait_deleted: float = 120.0
) -> Iterator[str]:
    """A new namespace, deleted afterwards; waits (up to ``wait_deleted`` s) until it is empty,
    so the fake GPUs its pods held are free for the next one (the empty namespace goes a few
    seconds later)."""
    cluster.create_namespace(name)
    try:
        yield name
    finally:
        cluster.delete_namespace(name, timeout=wait_deleted, gone=False)
