"""The kubernetes-sigs operators: JobSet and LeaderWorkerSet."""

from __future__ import annotations

from typing import Any

from testbed.operators.runner import ConfigFileOperator

__all__ = ["JobSet", "LeaderWorkerSet"]


class JobSet(ConfigFileOperator):
    """kubernetes-sigs/jobset: JobSet webhooks plus its pod webhooks (mutating and validating,
    for pods labelled ``jobset.sigs.k8s.io/jobset-name``)."""

    name = "jobset"
    namespace = "jobset-system"
    config_api = "config.jobset.x-k8s.io/v1alpha1"
    webhook_dir = "config/components/webhook"
    webhook_name_prefix = "jobset-"
    service_dns = "jobset-webhook-service.jobset-system.svc"

    def configuration(self) -> dict[str, Any]:
        config = super().configuration()
        # Metrics are served over TLS; give them the same serving pair.
        config["metrics"]["certDir"] = str(self.cert_dir)
        return config


class LeaderWorkerSet(ConfigFileOperator):
    """kubernetes-sigs/lws: LWS webhooks plus pod webhooks (for pods labelled
    ``leaderworkerset.sigs.k8s.io/name``; the mutating one injects the LWS_* env)."""

    name = "lws"
    namespace = "lws-system"
    config_api = "config.lws.x-k8s.io/v1alpha1"
    webhook_dir = "config/webhook"
    webhook_name_prefix = "lws-"
    service_dns = "lws-webhook-service.lws-system.svc"
