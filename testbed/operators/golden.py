"""Golden files: an `Observation` in the form the adapter table tests are driven from
(tests/fixtures/operators/, written by ``python -m testbed.operators.capture``)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from testbed.observe import Observation
from testbed.operators.runner import Build

__all__ = ["PODIUM_ENV", "fixture", "podium_env"]

# Set by the scheduler's binding (PodTopologyLabels admission copies the node's labels).
_BINDING_LABELS = ("topology.kubernetes.io/zone", "topology.kubernetes.io/region")

#: The container env podium reads, captured for every pod.
PODIUM_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_RDZV_ENDPOINT",
    "WORLD_SIZE",
    "RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LWS_GROUP_SIZE",
    "LWS_LEADER_ADDRESS",
    "LWS_WORKER_INDEX",
)

_VOLATILE_METADATA = ("managedFields", "resourceVersion", "generation", "creationTimestamp")


def _clean(obj: Mapping[str, Any], namespace: str, uids: Mapping[str, str]) -> Any:
    """A copy without volatile fields, the run's namespace and UIDs replaced by placeholders."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            for uid, placeholder in uids.items():
                if uid in value:
                    value = value.replace(uid, placeholder)
            return value.replace(namespace, "NAMESPACE") if namespace in value else value
        return value

    result = walk(copy.deepcopy(dict(obj)))
    metadata = result.get("metadata", {})
    for key in _VOLATILE_METADATA:
        metadata.pop(key, None)
    return result


def _env(pod: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Every container's env (init containers first), by container name."""
    spec = pod.get("spec", {})
    found: dict[str, list[Any]] = {}
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        if container.get("env"):
            found[container["name"]] = container["env"]
    return found


def podium_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The `PODIUM_ENV` variables of the pod's containers (first value seen, ``valueFrom`` as
    its JSON), for quick looks and assertions."""
    found: dict[str, str] = {}
    for entries in _env(pod).values():
        for entry in entries:
            if entry["name"] in PODIUM_ENV and entry["name"] not in found:
                found[entry["name"]] = str(entry.get("value", entry.get("valueFrom")))
    return found


def _uids(observation: Observation) -> dict[str, str]:
    """uid -> "UID(<Kind>/<name>)" for every object of the run."""
    objects: list[Mapping[str, Any]] = [
        observation.job,
        *observation.pods,
        *(o for items in observation.intermediates.values() for o in items),
    ]
    uids = {
        o["metadata"]["uid"]: f"UID({o.get('kind', 'Pod')}/{o['metadata']['name']})"
        for o in objects
        if "uid" in o["metadata"]
    }
    for chain in observation.owners.values():
        for ref in chain:
            uids.setdefault(ref["uid"], f"UID({ref['kind']}/{ref['name']})")
    # A name may hold another object's UID (a Volcano PodGroup is named <job>-<job uid>).
    for uid in list(uids):
        for other, other_placeholder in list(uids.items()):
            if other != uid and other in uids[uid]:
                uids[uid] = uids[uid].replace(other, other_placeholder)
    return uids


def fixture(
    observation: Observation,
    builds: Mapping[str, Build],
    *,
    kubernetes: str,
    captured: str,
) -> dict[str, Any]:
    """The golden-file form of an observation (UIDs and the namespace made stable)."""
    framework = observation.framework
    namespace = observation.namespace
    uids = _uids(observation)

    def clean(obj: Mapping[str, Any]) -> Any:
        return _clean(obj, namespace, uids)

    pods: list[dict[str, Any]] = []
    for index, pod in enumerate(observation.pods):
        name = pod["metadata"]["name"]
        labels = {
            k: v for k, v in pod["metadata"].get("labels", {}).items() if k not in _BINDING_LABELS
        }
        entry: dict[str, Any] = {
            "name": name,
            "order": index,
            "created_by": observation.creators.get(name),
            "user_agent": observation.agents.get(name),
            "seconds_after_submit": observation.created_after.get(name),
            "deleted_during_capture": name in observation.deleted,
            "owner_chain": [
                {k: ref[k] for k in ("apiVersion", "kind", "name") if k in ref}
                for ref in observation.owners[name]
            ],
            "stored": clean(
                {
                    "labels": labels,
                    "annotations": pod["metadata"].get("annotations", {}),
                    "ownerReferences": pod["metadata"].get("ownerReferences", []),
                    "env": _env(pod),
                    "schedulerName": pod["spec"].get("schedulerName"),
                    "hostname": pod["spec"].get("hostname"),
                    "subdomain": pod["spec"].get("subdomain"),
                }
            ),
            "created": clean(observation.created[name]) if name in observation.created else None,
        }
        pods.append(entry)
    job = clean(observation.job)
    job.pop("status", None)
    return {
        "framework": framework.name,
        "operator": {
            "name": framework.operator,
            "module": builds[framework.operator].module,
            "version": builds[framework.operator].version,
        },
        "also_running": [
            {"name": n, "module": builds[n].module, "version": builds[n].version}
            for n in framework.needs
        ],
        "kubernetes": kubernetes,
        "captured": captured,
        "source": framework.source,
        "adaptations": list(framework.adaptations),
        "notes": [
            "pods[].created is the body the controller POSTed (apiserver audit requestObject):"
            " what the first mutating webhook sees",
            "pods[].stored is the pod after admission (other operators' pod webhooks applied),"
            " without the zone/region labels the binding adds",
            "UIDs are replaced by UID(<Kind>/<name>), the namespace by NAMESPACE",
        ],
        "submitted": [clean(o) for o in observation.submitted],
        "job": job,
        "intermediates": {
            kind: [_strip_status(clean(o)) for o in items]
            for kind, items in observation.intermediates.items()
        },
        "pods": pods,
    }


def _strip_status(obj: dict[str, Any]) -> dict[str, Any]:
    obj.pop("status", None)
    return obj
