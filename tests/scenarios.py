"""Small clusters and jobs that many tests share, built with the builders."""

from __future__ import annotations

from typing import Any

from tests.builders import PodBuilder, job, namespace, node, template

NS = "team-a"
OPERATOR_LABELS = "training.kubeflow.org/"


def zones_8_16_64() -> list[dict[str, Any]]:
    """Three zones with 8, 16 and 64 free GPUs (8-GPU nodes)."""
    return [
        node("a-1", "zone-a"),
        node("b-1", "zone-b"),
        node("b-2", "zone-b"),
        *[node(f"c-{i}", "zone-c") for i in range(8)],
    ]


def pytorchjob(name: str = "llama", workers: int = 3, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return job(
        "kubeflow.org/v1",
        "PyTorchJob",
        name,
        NS,
        spec={
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template(gpus)},
                "Worker": {"replicas": workers, "template": template(gpus)},
            }
        },
        **kw,
    )


def pytorch_pod(
    pj: dict[str, Any], rtype: str = "worker", index: int = 0, gpus: int = 8
) -> PodBuilder:
    name = pj["metadata"]["name"]
    b = (
        PodBuilder(NS, name=f"{name}-{rtype}-{index}")
        .label(OPERATOR_LABELS + "operator-name", "pytorchjob-controller")
        .label(OPERATOR_LABELS + "job-name", name)
        .label(OPERATOR_LABELS + "replica-type", rtype)
        .label(OPERATOR_LABELS + "replica-index", str(index))
        .owner(pj["apiVersion"], pj["kind"], name, pj["metadata"]["uid"])
        .gpus(gpus)
    )
    if rtype == "master":
        b.label(OPERATOR_LABELS + "job-role", "master")
    return b


def base_cluster(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [namespace(NS), namespace("sandbox", enabled=False), *zones_8_16_64(), *extra]
