"""A gang whose pods were admitted held but ungated by someone other than podium (its gate removed
by hand where the gate guard is not installed, issue 29 item 4): the reconciler makes no zone up.
Its rebuilt record names the zone the pods were bound in, never ``zone: ""`` (which reads as
"released unpinned"), and there is no record while none of them is bound."""

from __future__ import annotations

from typing import Any

from tests.core.test_reconcile import NOW, TUNING, summary
from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, labels, reconcile
from webhook.core.reconcile import Action, Owned
from webhook.core.settings import Settings
from webhook.core.view import ClusterView


def ungated_by_hand(*nodes: str | None) -> list[Action]:
    """The plan for a PyTorchJob whose pods podium held (reason ``held``, no zone) and that lost
    the gate without podium: pod i bound to ``nodes[i]`` (None: not bound yet)."""
    job = pytorchjob(workers=len(nodes) - 1)
    uid = job["metadata"]["uid"]
    pods: list[dict[str, Any]] = []
    for i, node in enumerate(nodes):
        rtype, index = ("master", 0) if i == 0 else ("worker", i - 1)
        built = (
            pytorch_pod(job, rtype, index)
            .uid()
            .label(labels.JOB, uid)
            .annotate(labels.REASON, labels.HELD)
        )
        pods.append((built.bound(node) if node else built).obj())
    settings = Settings()
    view = ClusterView.from_objects(
        base_cluster(job, *pods), zone_label=settings.zone_label, kept=adapters.KEPT
    )
    return reconcile.plan(view, settings, owned=Owned(), now=NOW, tuning=TUNING)


def test_the_record_names_the_zone_the_pods_were_bound_in() -> None:
    actions = ungated_by_hand("c-1", "c-2", "c-3")
    records = [a for a in actions if a.reason == "missing-record"]
    (record,) = records
    assert record.manifest["data"]["zone"] == "zone-c"
    assert "removed by someone else" in record.manifest["data"]["detail"]


def test_the_majority_zone_when_they_were_bound_apart() -> None:
    (record,) = [a for a in ungated_by_hand("b-1", "c-1", "c-2") if a.reason == "missing-record"]
    assert record.manifest["data"]["zone"] == "zone-c"


def test_no_record_while_none_is_bound() -> None:
    actions = ungated_by_hand(None, None)
    assert ("create", "missing-record", "ConfigMap") not in summary(actions)
    assert all(a.manifest.get("data", {}).get("zone") != "" for a in actions)
