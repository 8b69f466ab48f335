"""KubeRay's ray-operator."""

from __future__ import annotations

from testbed.operators.runner import Operator
from testbed.processes import HOST

__all__ = ["KubeRay"]


class KubeRay(Operator):
    """ray-project/kuberay ray-operator. Its RayCluster webhook runs only with
    ``ENABLE_WEBHOOKS=true``; the runner leaves it off (the default)."""

    name = "kuberay"
    namespace = "ray-system"

    def args(self) -> list[str]:
        return [
            f"--metrics-addr={HOST}:{self.metrics_port}",
            f"--health-probe-bind-address={HOST}:{self.health_port}",
            "--enable-leader-election=false",
            "--log-stdout-encoder=console",
        ]
