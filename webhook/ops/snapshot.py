"""``podium snapshot``: what ``podium review`` needs of a live cluster, as one v1 List.

The nodes; the namespaces that opted in (or those named); in them, the pods, the job objects the
adapters read, and podium's own decision records and policies — each kept as the watch cache
keeps it (``cache.slim``: no managed fields, no status but what the decision reads), so that
``podium snapshot > cluster.json`` and ``podium review pod.yaml --cluster cluster.json`` answer
"what would podium do with this pod in my cluster?" from the same objects ``podium serve``
decides on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from webhook.core.objects import Obj, labels_of, metadata_of, name_of
from webhook.core.settings import Settings
from webhook.kube import cache, errors, protocols

#: With more namespaces than this, each kind is listed once across the cluster and filtered,
#: rather than once per namespace.
PER_NAMESPACE_UP_TO = 4


class SnapshotError(RuntimeError):
    """Something named is not there; one line."""


def opted_in(namespace: Obj, settings: Settings) -> bool:
    """podium decides the namespace's pods (enforcing them or in shadow mode)."""
    labels = labels_of(namespace)
    return settings.namespace_mode(name_of(namespace), labels) is not None


async def capture(
    api: protocols.Objects,
    settings: Settings,
    *,
    namespaces: Sequence[str] = (),
    on_kind: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """The snapshot's objects: Namespaces, Nodes, then per namespace what ``cache.WATCHED``
    lists there. ``namespaces``: exactly these (opted in or not, so that a review can say
    which); none: every namespace that opted in. Kinds whose CRD is missing are skipped."""
    by_kind = {r.kind: r for r in cache.WATCHED if not r.namespaced}

    def progress(kind: str) -> None:
        if on_kind is not None:
            on_kind(kind)

    progress("Namespace")
    every = await api.list("v1", "Namespace")
    if namespaces:
        known = {name_of(ns) for ns in every}
        missing = [n for n in namespaces if n not in known]
        if missing:
            raise SnapshotError(f"namespace {', '.join(missing)} does not exist")
        chosen = [ns for ns in every if name_of(ns) in namespaces]
    else:
        chosen = [ns for ns in every if opted_in(ns, settings)]
    out = [cache.slim(by_kind["Namespace"], dict(ns)) for ns in chosen]
    progress("Node")
    out += [cache.slim(by_kind["Node"], dict(n)) for n in await api.list("v1", "Node")]
    names = sorted(name_of(ns) for ns in chosen)
    for resource in (r for r in cache.WATCHED if r.namespaced):
        progress(resource.kind)
        try:
            if len(names) <= PER_NAMESPACE_UP_TO:
                found = [
                    obj
                    for name in names
                    for obj in await api.list(
                        resource.api_version,
                        resource.kind,
                        namespace=name,
                        label_selector=resource.label_selector,
                    )
                ]
            else:
                wanted = set(names)
                found = [
                    obj
                    for obj in await api.list(
                        resource.api_version, resource.kind, label_selector=resource.label_selector
                    )
                    if metadata_of(obj).get("namespace") in wanted
                ]
        except errors.NotFound:  # the CRD is not installed
            continue
        out += [cache.slim(resource, dict(obj)) for obj in found]
    return out


def as_list(objects: Sequence[Obj]) -> dict[str, Any]:
    """A v1 List, as ``kubectl get -o json`` writes one (``podium review --cluster`` reads it)."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(objects)}


def counts(objects: Sequence[Obj]) -> str:
    """``2 namespaces, 12 nodes, 40 pods, 5 PyTorchJob, …`` for the note on stderr."""
    tally: dict[str, int] = {}
    for obj in objects:
        kind = str(obj.get("kind"))
        tally[kind] = tally.get(kind, 0) + 1
    plural = {"Namespace": "namespaces", "Node": "nodes", "Pod": "pods"}
    return ", ".join(f"{n} {plural.get(k, k)}" for k, n in tally.items()) or "nothing"
