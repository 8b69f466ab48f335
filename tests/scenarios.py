"""Small clusters and jobs that many tests share, built with the builders."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tests.builders import PIN, JobBuilder, NodeBuilder, PodBuilder, namespace, template
from webhook.core import adapters, audit, engine, reviews
from webhook.core.view import ClusterView

NS = "team-a"
OPERATOR_LABELS = "training.kubeflow.org/"


def zones_8_16_64() -> list[dict[str, Any]]:
    """Three zones with 8, 16 and 64 free GPUs (8-GPU nodes)."""
    return [
        NodeBuilder("a-1").zone("zone-a").obj(),
        NodeBuilder("b-1").zone("zone-b").obj(),
        NodeBuilder("b-2").zone("zone-b").obj(),
        *[NodeBuilder(f"c-{i}").zone("zone-c").obj() for i in range(8)],
    ]


def pytorchjob(
    name: str = "llama",
    workers: int = 3,
    gpus: int = 8,
    *,
    uid: str | None = None,
    skip: bool = False,
) -> dict[str, Any]:
    """A PyTorchJob with one master and ``workers`` workers of ``gpus`` GPUs each; ``skip``:
    annotated ``podium.dev/skip=true``."""
    built = JobBuilder("kubeflow.org/v1", "PyTorchJob", name, NS).spec(
        pytorchReplicaSpecs={
            "Master": {"replicas": 1, "template": template(gpus)},
            "Worker": {"replicas": workers, "template": template(gpus)},
        }
    )
    if uid is not None:
        built.uid(uid)
    if skip:
        built.annotate("podium.dev/skip", "true")
    return built.obj()


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


def audit_entry_for(
    pod: dict[str, Any], objects: list[dict[str, Any]], now: datetime
) -> audit.AuditEntry:
    request = reviews.from_document(reviews.review_for_pod(pod, uid="r-1"))
    view = ClusterView.from_objects(
        objects, zone_label="topology.kubernetes.io/zone", kept=adapters.KEPT
    )
    decision = engine.decide(request, view, PIN, now=now)
    return audit.build(
        request=request,
        decision=decision,
        time=now,
        latency_ms=1.23456,
        effects=[{"kind": "ConfigMap", "name": "x", "outcome": "created"}],
    )
