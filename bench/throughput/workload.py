"""Synthetic clusters and AdmissionReviews for the benchmarks.

Pods are shaped like ``examples/review-master-0.json`` with what a training-operator really adds
(env, volume mounts, default tolerations, service-account volume), ~3 KB as compact JSON. A
cluster is 3 zones of 8-GPU nodes, ``pods_per_node`` pods each: one GPU pod of an 8-node
PyTorchJob (4 GPUs) and the rest small ReplicaSet pods, with a decision record per job (decided
long ago, as in a cluster that has run for a while) — roughly what 150,000 pods look like.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from webhook.core import labels, reviews

ZONE_LABEL = labels.ZONE_LABEL
NS = "ml-team"
KF = "training.kubeflow.org/"
ZONES = ("zone-a", "zone-b", "zone-c")
NODES_PER_JOB = 8
Obj = dict[str, Any]


def _uid(*parts: object) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_OID, "/".join(map(str, parts))))


def namespace(name: str = NS) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": _uid("ns", name),
            "labels": {"kubernetes.io/metadata.name": name, labels.ENABLED: "true"},
        },
    }


def node(i: int) -> Obj:
    name = f"gpu-node-{i:05d}"
    zone = ZONES[i % len(ZONES)]
    alloc = {"cpu": "96", "memory": "1000Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid("node", i),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
                ZONE_LABEL: zone,
                "topology.kubernetes.io/region": "region-1",
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "DiskPressure", "status": "False"},
                {"type": "Ready", "status": "True"},
            ],
        },
    }


def pytorchjob(name: str, uid: str, workers: int, gpus: int) -> Obj:
    def tpl() -> Obj:
        return {"spec": {"containers": [_container(gpus, world=workers + 1, rank=0)]}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NS, "uid": uid},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": tpl()},
                "Worker": {"replicas": workers, "template": tpl()},
            }
        },
    }


def _container(gpus: int, *, world: int, rank: int) -> Obj:
    env = {
        "MASTER_PORT": "23456",
        "MASTER_ADDR": "llama-ft-master-0",
        "WORLD_SIZE": str(world),
        "RANK": str(rank),
        "PYTHONUNBUFFERED": "1",
        "NCCL_DEBUG": "WARN",
        "NCCL_SOCKET_IFNAME": "eth0",
        "HF_HOME": "/cache/huggingface",
    }
    return {
        "name": "pytorch",
        "image": "ghcr.io/example/llama-ft:1.4",
        "imagePullPolicy": "IfNotPresent",
        "command": ["torchrun", "--nnodes", str(world), "train.py", "--config", "/etc/cfg.yaml"],
        "ports": [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}],
        "resources": {
            "limits": {"nvidia.com/gpu": str(gpus)},
            "requests": {
                "cpu": str(4 * gpus),
                "memory": f"{32 * gpus}Gi",
                "nvidia.com/gpu": str(gpus),
            },
        },
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "cache", "mountPath": "/cache"},
            {"name": "config", "mountPath": "/etc/cfg.yaml", "subPath": "cfg.yaml"},
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            },
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }


def training_pod(
    job_name: str,
    job_uid: str,
    rtype: str,
    index: int,
    *,
    world: int,
    gpus: int = 8,
    node_name: str | None = None,
    gang: str | None = None,
) -> Obj:
    """A pod as the training-operator creates it (and, with ``node_name``, as it runs)."""
    name = f"{job_name}-{rtype}-{index}"
    pod_labels = {
        KF + "operator-name": "pytorchjob-controller",
        KF + "job-name": job_name,
        KF + "replica-type": rtype,
        KF + "replica-index": str(index),
    }
    if rtype == "master":
        pod_labels[KF + "job-role"] = "master"
    if gang:
        pod_labels[labels.JOB] = gang
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": pod_labels,
            "annotations": {"sidecar.istio.io/inject": "false"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": job_name,
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [_container(gpus, world=world, rank=index)],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
                {"name": "cache", "persistentVolumeClaim": {"claimName": "hf-cache"}},
                {"name": "config", "configMap": {"name": f"{job_name}-config"}},
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                },
            ],
            "restartPolicy": "OnFailure",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
    }
    if node_name:
        pod["spec"]["nodeName"] = node_name
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def small_pod(node_name: str, i: int) -> Obj:
    """A web/sidecar-ish pod of some Deployment: podium never admits it, but it uses the node."""
    app = f"svc-{i % 97}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-7d9f8c6b5-{i:06x}",
            "namespace": NS,
            "uid": _uid("small", node_name, i),
            "labels": {"app": app, "pod-template-hash": "7d9f8c6b5", "tier": "backend"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-7d9f8c6b5",
                    "uid": _uid("rs", app),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example/{app}:2.1",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                }
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def record(job_name: str, job_uid: str, zone: str, decided: datetime) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": labels.object_name("PyTorchJob", job_name, job_uid),
            "namespace": NS,
            "uid": _uid("record", job_uid),
            "labels": {
                labels.MANAGED_BY: labels.MANAGER,
                labels.COMPONENT: "decision",
                labels.JOB: job_uid,
            },
        },
        "data": {
            "gang": job_uid,
            "zone": zone,
            "reason": "best-fit",
            "decidedAt": decided.isoformat(timespec="seconds"),
            "demand": orjson.dumps(
                {"nvidia.com/gpu": 4 * NODES_PER_JOB, "pods": NODES_PER_JOB}
            ).decode(),
        },
    }


def job_of(i: int) -> tuple[str, str]:
    return f"train-{i:05d}", _uid("job", i)


def cluster(nodes: int, pods_per_node: int = 30, *, now: datetime | None = None) -> Iterator[Obj]:
    """Namespace, nodes, then per node its pods; a PyTorchJob and its record per 8 nodes."""
    decided = (now or datetime.now(UTC)) - timedelta(hours=6)
    yield namespace()
    for i in range(nodes):
        yield node(i)
    for i in range(nodes):
        node_name = f"gpu-node-{i:05d}"
        job = i // NODES_PER_JOB
        job_name, job_uid = job_of(job)
        if i % NODES_PER_JOB == 0:
            yield pytorchjob(job_name, job_uid, NODES_PER_JOB - 1, 4)
            yield record(job_name, job_uid, ZONES[i % len(ZONES)], decided)
        rank = i % NODES_PER_JOB
        pod = training_pod(
            job_name,
            job_uid,
            "master" if rank == 0 else "worker",
            rank,
            world=NODES_PER_JOB,
            gpus=4,
            node_name=node_name,
            gang=job_uid,
        )
        pod["metadata"]["uid"] = _uid("pod", i)
        yield pod
        for j in range(pods_per_node - 1):
            yield small_pod(node_name, i * pods_per_node + j)


def review(pod: Obj, uid: str = "bench") -> bytes:
    """The AdmissionReview the apiserver sends to create ``pod`` (compact JSON)."""
    return orjson.dumps(reviews.review_for_pod(pod, uid=uid))
