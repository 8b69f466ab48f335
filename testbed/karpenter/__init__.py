"""Karpenter's KWOK provider beside a `LocalCluster`: a real autoscaler for the test bed.

``python -m testbed.build karpenter`` builds ``sigs.k8s.io/karpenter/kwok`` (v1.15.0); its CRDs
are vendored in ``crds/`` (byte for byte, see ``crds/SOURCES.md``). Outside a cluster it reads
its client config from ``KUBECONFIG`` (it has no ``--kubeconfig`` flag), runs without leader
election, and binds its metrics and health ports on every interface, so both are chosen free::

    with LocalCluster(bin_dir, work) as cluster:
        install(cluster)
        cluster.apply(node_class())
        cluster.apply(node_pool("gpu", zones=("zone-a", "zone-b"), gpus=64))
        with Karpenter(cluster, work / "karpenter", [gpu_instance_type(...)]):
            ...

Karpenter creates a NodeClaim and then the Node itself (annotated ``kwok.x-k8s.io/node=fake``,
tainted ``karpenter.sh/unregistered`` until it registers): the control plane's kwok plays it
(heartbeats, Ready) as it plays the fake nodes, kube-controller-manager lifts the not-ready
taint and kube-scheduler binds. Karpenter acts only on pods the scheduler marked
``Unschedulable`` (and on CapacityBuffers, with ``FEATURE_GATES=CapacityBuffer=true``).
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed import build
from testbed.controlplane import ControlPlaneError, LocalCluster
from testbed.controlplane import crd_files as training_crd_files
from testbed.gobuild.karpenter import CRD_DIR, CRD_SOURCES
from testbed.processes import HOST, Process, StartStop, free_port, port_free

__all__ = [
    "CRD_DIR",
    "NODE_CLASS",
    "Karpenter",
    "autoscaled_cluster",
    "crd_files",
    "gpu_instance_type",
    "install",
    "node_class",
    "node_pool",
]

#: The KWOKNodeClass every NodePool here refers to (Karpenter needs one to exist, Ready).
NODE_CLASS = "default"
ZONE_KEY = "topology.kubernetes.io/zone"


def crd_files() -> list[Path]:
    """The vendored CRDs: NodePool, NodeClaim, NodeOverlay, CapacityBuffer, KWOKNodeClass."""
    return [CRD_DIR / name for name in CRD_SOURCES]


def install(cluster: LocalCluster) -> list[str]:
    """Install the vendored CRDs into ``cluster`` and wait until they are Established."""
    return cluster.install_crds(crd_files())


def gpu_instance_type(
    name: str, *, gpus: int, zones: Sequence[str], price: float = 10.0
) -> dict[str, Any]:
    """One entry of ``INSTANCE_TYPES_FILE_PATH``: ``gpus`` ``nvidia.com/gpu`` (and 64 cpu,
    512Gi), offered on demand in each of ``zones`` (the zone is an offering's requirement)."""
    offerings = [
        {
            "Price": price,
            "Available": True,
            "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": ZONE_KEY, "operator": "In", "values": [zone]},
            ],
        }
        for zone in zones
    ]
    return {
        "name": name,
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {
            "cpu": "64",
            "memory": "512Gi",
            "pods": "110",
            "nvidia.com/gpu": str(gpus),
        },
        "offerings": offerings,
    }


def node_class(name: str = NODE_CLASS) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": name},
    }


def node_pool(
    name: str,
    *,
    zones: Sequence[str],
    limits: Mapping[str, str] | None = None,
    node_class_name: str = NODE_CLASS,
) -> dict[str, Any]:
    """A NodePool over ``zones`` that never consolidates (the tests count what it made)."""
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.kwok.sh",
                    "kind": "KWOKNodeClass",
                    "name": node_class_name,
                },
                "requirements": [
                    {"key": ZONE_KEY, "operator": "In", "values": list(zones)},
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["on-demand"],
                    },
                ],
                "expireAfter": "Never",
            }
        },
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
    }
    if limits:
        spec["limits"] = dict(limits)
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec,
    }


def _port() -> int:
    """A port free on every interface: Karpenter binds ``:port``."""
    while not port_free(port := free_port()):
        pass
    return port


class Karpenter(StartStop):
    """``karpenter-kwok`` as a child process against ``cluster``; ready once ``/readyz`` is."""

    def __init__(
        self,
        cluster: LocalCluster,
        work_dir: Path | str,
        instance_types: Sequence[Mapping[str, Any]],
        *,
        binary: Path | None = None,
        feature_gates: str = "CapacityBuffer=true",
        startup_timeout: float = 120.0,
    ) -> None:
        self.cluster = cluster
        self.work_dir = Path(work_dir)
        self.instance_types = [dict(t) for t in instance_types]
        self.binary = binary
        self.feature_gates = feature_gates
        self.startup_timeout = startup_timeout
        self.metrics_port = self.health_port = 0
        self.process: Process | None = None

    @property
    def log_path(self) -> Path:
        return self.work_dir / "karpenter.log"

    def env(self) -> dict[str, str]:
        """What Karpenter reads instead of flags (FACTS §14)."""
        return {
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "DISABLE_LEADER_ELECTION": "true",
            "METRICS_PORT": str(self.metrics_port),
            "HEALTH_PROBE_PORT": str(self.health_port),
            "FEATURE_GATES": self.feature_gates,
            "INSTANCE_TYPES_FILE_PATH": str(self.work_dir / "instance-types.json"),
            "BATCH_IDLE_DURATION": "1s",
            "BATCH_MAX_DURATION": "10s",
            "LOG_LEVEL": "debug",
        }

    def start(self) -> None:
        binary = self.binary or build.karpenter_binary()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "instance-types.json").write_text(json.dumps(self.instance_types))
        self.metrics_port, self.health_port = _port(), _port()
        self.process = Process.spawn(
            "karpenter", [str(binary)], log_path=self.log_path, cwd=self.work_dir, env=self.env()
        )
        try:
            self.process.wait_ready(
                self._ready, timeout=self.startup_timeout, error=ControlPlaneError
            )
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        url = f"http://{HOST}:{self.health_port}/readyz"
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def tail(self, lines: int = 40) -> str:
        return self.process.tail(lines) if self.process is not None else "(not started)"


#: The one NodePool `autoscaled_cluster` makes, and its one instance type.
POOL = "gpu"
INSTANCE_TYPE = "gpu-8x"


@contextlib.contextmanager
def autoscaled_cluster(
    bin_dir: Path,
    work_dir: Path,
    *,
    zones: Sequence[str] = ("zone-a", "zone-b"),
    gpus: int = 8,
    nodes: int = 1,
) -> Iterator[LocalCluster]:
    """A `LocalCluster` with ``nodes`` ``gpus``-GPU nodes per zone, the training CRDs and
    Karpenter's, a Ready KWOKNodeClass, the NodePool `POOL` over ``zones`` (one instance type of
    ``gpus`` GPUs offered in each), and Karpenter running; all stopped afterwards."""
    with LocalCluster(bin_dir, work_dir / "controlplane") as cluster:
        cluster.create_fake_nodes({zone: [gpus] * nodes for zone in zones})
        cluster.install_crds([*training_crd_files(), *crd_files()])
        cluster.apply(node_class())
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "Ready",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        cluster.apply({**node_class(), "status": {"conditions": [ready]}}, subresource="status")
        cluster.apply(node_pool(POOL, zones=zones))
        types = [gpu_instance_type(INSTANCE_TYPE, gpus=gpus, zones=zones)]
        with Karpenter(cluster, work_dir / "karpenter", types):
            yield cluster
