"""Objects every test cluster needs: namespaces, fake KWOK nodes, CRDs, and the audit log."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane.api import Api, ApiError, ControlPlaneError
from testbed.controlplane.flags import FAKE_NODE_ANNOTATION

__all__ = [
    "Wait",
    "audit_events",
    "crd_established",
    "create_fake_nodes",
    "create_namespace",
    "delete_namespace",
    "delete_namespaces",
    "fake_node",
    "install_crds",
    "namespaced_collections",
    "node_ready",
]

#: ``wait(what, predicate, timeout=...)``: poll until true, raise on timeout.
Wait = Callable[..., None]
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_FORCE = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
#: libyaml's safe loader where PyYAML has it: the CRDs are large (up to 1.3 MB each), and the
#: pure-Python loader takes over a second for each on a busy machine, libyaml a tenth of that.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: Aggregated discovery: every group, version and resource in one answer.
_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


def create_namespace(
    api: Api, wait: Wait, name: str, labels: Mapping[str, str] | None = None
) -> None:
    """Create a namespace and wait until pods can be made in it (its "default"
    ServiceAccount exists)."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    api.request("POST", "/api/v1/namespaces", namespace)
    wait(
        f"the default ServiceAccount of namespace {name}",
        lambda: api.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
    )


def delete_namespace(
    api: Api, wait: Wait, name: str, *, timeout: float = 120.0, gone: bool = True
) -> None:
    """Delete a namespace (one already gone is fine) and wait until it is empty, so what its
    pods held (fake GPUs, PodGroup finalizers) is free again for the next test; with ``gone``,
    also until the namespace itself is gone (`delete_namespaces`)."""
    delete_namespaces(api, wait, [name], timeout=timeout, gone=gone)


def delete_namespaces(
    api: Api, wait: Wait, names: Sequence[str], *, timeout: float = 120.0, gone: bool = True
) -> None:
    """Delete namespaces (those already gone are fine), empty them and wait until they are
    empty; with ``gone``, also until the namespaces themselves are gone.

    Emptying is what the namespace controller does, without its waits: every namespaced
    resource served is deleted as a collection (`namespaced_collections`), pods with grace
    period 0 (as ``kubectl delete --force`` does: there is no kubelet to wait for), after the
    namespace, which then takes no new objects; then objects held by a finalizer are waited for.
    The controller looks at a deleted namespace only 5 s after its deletion (and, finding a pod
    not finished, again after half its termination grace period: 16 s by default); an emptied
    namespace is gone some 5 s after, which only ``gone`` waits for."""
    paths = [f"/api/v1/namespaces/{name}" for name in names]
    for path in paths:
        try:
            api.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise
    collections = namespaced_collections(api)
    held = [held for name in names for held in _empty(api, name, collections)]
    wait(
        f"{len(held)} objects in namespaces {list(names)} to pass their finalizers",
        lambda: not any(api.exists(path) for path in held),
        timeout=timeout,
    )
    if gone:
        wait(
            f"namespaces {list(names)} to be deleted",
            lambda: not any(api.exists(path) for path in paths),
            timeout=timeout,
        )


def namespaced_collections(api: Api) -> list[str]:
    """The path of every namespaced resource the apiserver serves that can be deleted as a
    collection, in its group's preferred version, with ``{namespace}`` to fill in:
    ``/api/v1/namespaces/{namespace}/pods``, ... (one aggregated discovery request per root)."""
    found: list[str] = []
    for root in ("/api", "/apis"):
        discovery = api.request("GET", root, accept=_DISCOVERY)
        if discovery.get("kind") != "APIGroupDiscoveryList":
            raise ControlPlaneError(f"GET {root}: no aggregated discovery: {discovery.get('kind')}")
        for group in discovery["items"]:
            preferred = group["versions"][0]
            name = group["metadata"].get("name")
            prefix = "/".join(filter(None, (root, name, preferred["version"])))
            found += [
                f"{prefix}/namespaces/{{namespace}}/{resource['resource']}"
                for resource in preferred.get("resources") or []
                if resource.get("scope") == "Namespaced"
                and "deletecollection" in resource.get("verbs", [])
            ]
    return found


def _empty(api: Api, namespace: str, collections: Sequence[str]) -> list[str]:
    """Delete every object of ``collections`` in ``namespace``, pods first and at once; the
    paths of those a finalizer keeps."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    held: list[str] = []
    for path in sorted(
        (c.format(namespace=namespace) for c in collections), key=lambda p: p != pods
    ):
        try:
            deleted = api.request("DELETE", path, _FORCE if path == pods else None)
        except ApiError as error:
            if error.status in (404, 405):  # a CRD deleted since discovery, or no such verb
                continue
            raise
        held += [
            f"{path}/{item['metadata']['name']}"
            for item in (deleted or {}).get("items") or []
            if item["metadata"].get("finalizers")
        ]
    return held


def fake_node(name: str, zone: str, gpus: int) -> dict[str, Any]:
    """A Node kwok plays: zone/region/hostname labels, ``type=kwok``, the annotation kwok
    manages, no taints, cpu 64, memory 512Gi, pods 110 and ``gpus`` ``nvidia.com/gpu``."""
    key, value = FAKE_NODE_ANNOTATION
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "local",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
            "annotations": {key: value},
        },
        "spec": {},
        "status": {"capacity": resources, "allocatable": resources},
    }


def create_fake_nodes(
    api: Api,
    wait: Wait,
    zones: Mapping[str, Sequence[int]],
    *,
    wait_ready: bool = True,
    timeout: float = 120.0,
) -> list[str]:
    """One `fake_node` per GPU count, per zone, named ``kwok-<zone>-<index>``; return their
    names. With ``wait_ready``, wait until kwok marks them Ready."""
    names: list[str] = []
    for zone, gpu_counts in zones.items():
        for index, gpus in enumerate(gpu_counts):
            node = fake_node(f"kwok-{zone}-{index}", zone, gpus)
            # Create with the status in one step (kept on create): kwok initialises the
            # node's conditions and keeps capacity and allocatable as they are.
            try:
                api.request("POST", "/api/v1/nodes", node)
            except ApiError as error:
                if error.status != 409:
                    raise
                api.apply(node)
                api.apply(node, subresource="status")
            names.append(node["metadata"]["name"])
    if wait_ready:
        wait(
            f"nodes {names} to be Ready",
            lambda: all(node_ready(api, n) for n in names),
            timeout=timeout,
        )
    return names


def node_ready(api: Api, name: str) -> bool:
    """Ready per kwok and schedulable: the not-ready taint is gone."""
    node = api.request("GET", f"/api/v1/nodes/{name}")
    conditions = node.get("status", {}).get("conditions") or []
    taints = node.get("spec", {}).get("taints") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not any(
        t["key"] == "node.kubernetes.io/not-ready" for t in taints
    )


def install_crds(
    api: Api, wait: Wait, paths: Iterable[Path | str], *, timeout: float = 180.0
) -> list[str]:
    """Create (or server-side apply) the CRDs in the YAML files; wait until Established.
    Returns the CRD names."""
    names: list[str] = []
    for path in paths:
        for document in yaml.load_all(Path(path).read_text(), Loader=_SAFE_LOADER):
            if not document:
                continue
            if document.get("kind") != "CustomResourceDefinition":
                raise ControlPlaneError(f"{path}: not a CustomResourceDefinition")
            # Create (fast); server-side apply, which costs seconds on these big schemas,
            # only to update one that exists.
            try:
                api.request("POST", _CRDS, document)
            except ApiError as error:
                if error.status != 409:
                    raise
                api.apply(document)
            names.append(document["metadata"]["name"])
    # Each GET returns a whole (big) CRD: ask only about those not yet Established.
    pending = set(names)

    def established() -> bool:
        pending.difference_update([n for n in sorted(pending) if crd_established(api, n)])
        return not pending

    wait(f"CRDs {names} to be Established", established, timeout=timeout)
    return names


def crd_established(api: Api, name: str) -> bool:
    crd = api.request("GET", f"{_CRDS}/{name}")
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def audit_events(audit_log: Path) -> list[dict[str, Any]]:
    """The audit log so far, one dict per event."""
    if not audit_log.exists():
        return []
    events: list[dict[str, Any]] = []
    for line in audit_log.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))
    return events
