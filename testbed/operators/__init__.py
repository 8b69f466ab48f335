"""Real training operators as local processes beside a `LocalCluster` (see docs/operators.md).

::

    with LocalCluster(controlplane_bin_dir(), work_dir) as cluster:
        cluster.create_fake_nodes(ZONES)
        with OperatorPool(cluster, work_dir / "operators") as pool:
            pool.ensure(["trainingoperator"])
            cluster.apply(pytorchjob)        # the operator creates the pods

The parts: `runner` (a build, one operator process, the base classes), `webhooks` (their
serving certificates and webhook configurations), one module per family (`kubeflow`: the
training-operator, mpi-operator and Trainer; `sigs`: JobSet and LeaderWorkerSet; `kuberay`;
`volcano`; `kueue`: Kueue with Topology Aware Scheduling, not one of the pool's operators),
`pool` (every operator by name, started on demand), `frameworks` (each framework's
upstream example), `golden` (an observation as a golden file) and `capture`
(``python -m testbed.operators.capture``: writes the golden files).
"""

from __future__ import annotations

from testbed.operators.pool import NAMES, OPERATORS, OperatorPool, fresh_namespace, start
from testbed.operators.runner import Build, ConfigFileOperator, Operator, OperatorError, build
from testbed.operators.webhooks import (
    WebhookCerts,
    issue_webhook_certs,
    render_webhook_configurations,
)

__all__ = [
    "NAMES",
    "OPERATORS",
    "Build",
    "ConfigFileOperator",
    "Operator",
    "OperatorError",
    "OperatorPool",
    "WebhookCerts",
    "build",
    "fresh_namespace",
    "issue_webhook_certs",
    "render_webhook_configurations",
    "start",
]
