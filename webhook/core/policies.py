"""The objects podium creates for a gang: its decision record and its allow policies. Pure.

All are named after the gang (``labels.object_name``), owned by the job so the garbage collector
removes them with it, and labelled as managed by podium so people and the reconciler find them.

A gang's allow policy is scoped to the gang *and a zone* (``policy-scope: zone``, the default):
its selector and its peers carry ``podium.dev/zone``, so it lets the gang's pods in one zone talk
to each other and never opens traffic between zones, even for a gang whose pods ended up in
several (unpinned, or placed by the scheduler). A gang has one such policy per zone its pods are
known to run in; the one for the zone its decision record names is named like the record, any
other one after the zone as well (``policy_name``). ``policy-scope: job`` keeps one job-wide
policy, named like the record.

Cilium before 1.16 has no ``enableDefaultDeny``: its CRD prunes the field, and podium's allow
policy would then put the job's pods into default deny. ``withheld`` says when not to write it,
from the installed CRD (``knows_default_deny``).

Which of them a gang gets, read against the view (the name that covers a pod, and whether the
policy still has to be created): ``covering_policy`` for an admission, ``gang_policy`` for a gang
released into its recorded zone, ``job_wide_policy`` for a gang kube-scheduler places or one
released across zones. The engine and the releaser's plan ask the same functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core import labels, records
from webhook.core.adapters.base import Gang
from webhook.core.objects import metadata_of
from webhook.core.settings import OldCilium, PolicyMode, PolicyScope, Settings
from webhook.core.view import View

Manifest = dict[str, Any]

RECORD_API_VERSION = "v1"
RECORD_KIND = "ConfigMap"
CILIUM_API_VERSION = "cilium.io/v2"
CILIUM_KIND = "CiliumNetworkPolicy"
K8S_POLICY_API_VERSION = "networking.k8s.io/v1"
K8S_POLICY_KIND = "NetworkPolicy"
CRD_API_VERSION = "apiextensions.k8s.io/v1"
CRD_KIND = "CustomResourceDefinition"
#: The CRD whose schema says whether the installed Cilium knows ``enableDefaultDeny``.
CILIUM_CRD = "ciliumnetworkpolicies.cilium.io"

OLD_CILIUM_WARNING = (
    f"podium wrote no {CILIUM_KIND}: the installed {CILIUM_CRD} CRD has no enableDefaultDeny "
    "(Cilium < 1.16), so podium's allow policy would put the job's pods into default deny; "
    "upgrade Cilium, or set old-cilium: create-policy to write it anyway"
)


def _metadata(gang: Gang, namespace: str, component: str) -> dict[str, Any]:
    return {
        "name": labels.object_name(gang.owner.kind, gang.owner.name, gang.key),
        "namespace": namespace,
        "labels": {
            labels.MANAGED_BY: labels.MANAGER,
            labels.COMPONENT: component,
            labels.JOB: gang.key,
        },
        "ownerReferences": [gang.owner.as_owner_reference()],
    }


def build_record(
    *,
    gang: Gang,
    namespace: str,
    zone: str | None,
    reason: str,
    detail: str,
    decided_at: str,
    chooser: str = records.PODIUM,
    domain: str = "",
) -> Manifest:
    """The decision record: created atomically once per gang, so every replica follows one zone.
    A gang whose zone kube-scheduler chooses is recorded with ``zoneChooser: scheduler`` and no
    zone. ``domain``: the domain below the zone the releaser chose (``data.topology``, only when
    there is one)."""
    record: Manifest = {
        "apiVersion": RECORD_API_VERSION,
        "kind": RECORD_KIND,
        "metadata": _metadata(gang, namespace, "decision"),
        "data": {
            "zone": zone or "",
            "reason": reason,
            "detail": detail,
            "job": f"{gang.owner.api_version}/{gang.owner.kind}/{gang.owner.name}",
            "jobUID": gang.owner.uid,
            "gang": gang.key,
            "decidedAt": decided_at,
            # stdlib json: a (nonsensical but valid) request past 2**63 must not break the record
            "demand": json.dumps(gang.total, sort_keys=True, separators=(",", ":")),
        },
    }
    if chooser != records.PODIUM:
        record["data"]["zoneChooser"] = chooser
    if domain:
        record["data"]["topology"] = domain
    return record


def _zone_slug(zone: str) -> str:
    """A zone (a label value) as a piece of an object name: lowercase, ``-`` for the rest."""
    return re.sub(r"[^a-z0-9]+", "-", zone.lower()).strip("-")[:63] or "zone"


def policy_name(gang: Gang, zone: str | None = None, *, record_zone: str | None = None) -> str:
    """The name of the gang's policy for ``zone``: the record's name for the job-wide policy
    (``zone`` None) and for the zone the gang's record names; else one that also names the zone
    (and hashes it with the gang, so no two zones or gangs share a name)."""
    if zone is None or zone == record_zone:
        return labels.object_name(gang.owner.kind, gang.owner.name, gang.key)
    return labels.object_name(
        gang.owner.kind, f"{gang.owner.name}-{_zone_slug(zone)}", f"{gang.key}/{zone}"
    )


def build_policy(
    *,
    gang: Gang,
    namespace: str,
    mode: PolicyMode,
    scope: PolicyScope,
    zone: str | None,
    record_zone: str | None = None,
) -> Manifest | None:
    """Allow all traffic between the gang's own pods in ``zone`` (``scope`` zone; None without a
    zone, for there is nothing to scope to yet), or wherever they run (``scope`` job), and open
    nothing else.

    All ports: NCCL's bootstrap and peer sockets use ephemeral ports, so a port list breaks it.
    Cilium: ``enableDefaultDeny`` off both ways, so the policy only adds an allow and never puts
    the pods into default-deny. A namespaced policy selects only pods of its own namespace.
    Selecting on per-gang labels (not a per-pod one) keeps it to one identity per gang and zone.
    """
    if scope is PolicyScope.ZONE and not zone:
        return None
    where = zone if scope is PolicyScope.ZONE else None
    peers = {"matchLabels": {labels.JOB: gang.key, **({labels.ZONE: where} if where else {})}}
    metadata = _metadata(gang, namespace, "policy")
    metadata["name"] = policy_name(gang, where, record_zone=record_zone)
    if where:
        metadata["labels"][labels.ZONE] = where
    between = f"the pods of {gang.display}" + (f" in {where}" if where else "")
    if mode is PolicyMode.CILIUM:
        return {
            "apiVersion": CILIUM_API_VERSION,
            "kind": CILIUM_KIND,
            "metadata": metadata,
            "spec": {
                "description": f"podium: traffic between {between}",
                "endpointSelector": peers,
                "enableDefaultDeny": {"ingress": False, "egress": False},
                "ingress": [{"fromEndpoints": [peers]}],
                "egress": [{"toEndpoints": [peers]}],
            },
        }
    if mode is PolicyMode.KUBERNETES:
        return {
            "apiVersion": K8S_POLICY_API_VERSION,
            "kind": K8S_POLICY_KIND,
            "metadata": metadata,
            "spec": {
                "podSelector": peers,
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": peers}]}],
                "egress": [{"to": [{"podSelector": peers}]}],
            },
        }
    return None


def build_policies(
    *,
    gang: Gang,
    namespace: str,
    mode: PolicyMode,
    scope: PolicyScope,
    zones: Iterable[str],
    record_zone: str | None = None,
) -> list[Manifest]:
    """Every policy the gang needs: one per zone in ``zones`` (``scope`` zone), or the job-wide
    one (``scope`` job); none in ``none`` mode."""
    wanted: Iterable[str | None] = sorted(set(zones)) if scope is PolicyScope.ZONE else [None]
    built = (
        build_policy(
            gang=gang, namespace=namespace, mode=mode, scope=scope, zone=z, record_zone=record_zone
        )
        for z in wanted
    )
    return [p for p in built if p is not None]


def policy_zone(policy: Mapping[str, Any]) -> str | None:
    """The zone one of podium's policies is scoped to (its selector's ``podium.dev/zone``); None
    for a job-wide one."""
    spec = policy.get("spec") or {}
    selector = spec.get("endpointSelector") or spec.get("podSelector") or {}
    zone = (
        (selector.get("matchLabels") or {}).get(labels.ZONE)
        if isinstance(selector, Mapping)
        else None
    )
    return str(zone) if zone else None


def knows_default_deny(crd: Mapping[str, Any]) -> bool:
    """Whether the CiliumNetworkPolicy CRD's ``v2`` schema has ``spec.enableDefaultDeny``
    (Cilium ≥ 1.16). Where it has not, the apiserver prunes the field from podium's policy."""
    for version in (crd.get("spec") or {}).get("versions") or []:
        if not isinstance(version, Mapping) or version.get("name") != "v2":
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        spec = (schema.get("properties") or {}).get("spec") or {}
        return "enableDefaultDeny" in (spec.get("properties") or {})
    return False


def slim_crd(crd: Mapping[str, Any]) -> dict[str, Any]:
    """The CRD as podium keeps it: its metadata and, per version, whether the schema has
    ``spec.enableDefaultDeny`` (the CiliumNetworkPolicy CRD's whole schema is ~400 KB)."""
    versions = []
    for version in (crd.get("spec") or {}).get("versions") or []:
        if not isinstance(version, Mapping):
            continue
        kept = {k: version[k] for k in ("name", "served", "storage") if k in version}
        if knows_default_deny({"spec": {"versions": [{**version, "name": "v2"}]}}):
            field = {"enableDefaultDeny": {"type": "object"}}
            kept["schema"] = {"openAPIV3Schema": {"properties": {"spec": {"properties": field}}}}
        versions.append(kept)
    meta = metadata_of(crd)
    return {
        "apiVersion": crd.get("apiVersion", CRD_API_VERSION),
        "kind": crd.get("kind", CRD_KIND),
        "metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion") if k in meta},
        "spec": {"group": (crd.get("spec") or {}).get("group"), "versions": versions},
    }


def withheld(settings: Settings, crd: Mapping[str, Any] | None) -> str | None:
    """Why podium must not write its CiliumNetworkPolicy (a warning), or None: in ``cilium``
    mode, when the installed CRD (``crd``; None when podium has not seen one) lacks
    ``enableDefaultDeny`` and ``old-cilium`` is ``skip-policy``."""
    if (
        settings.policy_mode is PolicyMode.CILIUM
        and settings.old_cilium is OldCilium.SKIP_POLICY
        and crd is not None
        and not knows_default_deny(crd)
    ):
        return OLD_CILIUM_WARNING
    return None


def policy_kind(mode: PolicyMode) -> tuple[str, str] | None:
    if mode is PolicyMode.CILIUM:
        return CILIUM_API_VERSION, CILIUM_KIND
    if mode is PolicyMode.KUBERNETES:
        return K8S_POLICY_API_VERSION, K8S_POLICY_KIND
    return None


# -- which policy a gang gets --------------------------------------------------------------------


def covering_policy(
    gang: Gang,
    namespace: str,
    view: View,
    settings: Settings,
    *,
    zone: str | None,
    record_zone: str | None,
    fresh: bool = False,
) -> tuple[str | None, list[Manifest], str | None]:
    """The name of the gang's policy that covers a pod in ``zone`` (None when none does: no
    policy mode, no zone yet in zone scope, or withheld), the policy to create when the view does
    not hold it yet, and the warning when podium withholds it (``withheld``)."""
    kind = policy_kind(settings.policy_mode)
    if kind is None or (settings.policy_scope is PolicyScope.ZONE and not zone):
        return None, [], None
    crd = view.get(CRD_API_VERSION, CRD_KIND, "", CILIUM_CRD)
    if (why := withheld(settings, crd)) is not None:
        return None, [], why
    scoped = zone if settings.policy_scope is PolicyScope.ZONE else None
    name = policy_name(gang, scoped, record_zone=record_zone)
    if not fresh and view.get(*kind, namespace, name) is not None:
        return name, [], None
    built = build_policy(
        gang=gang,
        namespace=namespace,
        mode=settings.policy_mode,
        scope=settings.policy_scope,
        zone=zone,
        record_zone=record_zone,
    )
    return name, [built] if built is not None else [], None


def gang_policy(
    gang: Gang,
    namespace: str,
    view: View,
    settings: Settings,
    *,
    zone: str | None,
    fresh: bool = False,
) -> tuple[str | None, list[Manifest]]:
    """The gang's policy for ``zone`` (the zone its record names) as an admission pinned to that
    zone would ask for it: its name (None when there is none) and the policy to create when the
    view does not hold it yet (``fresh``: whether or not it does, for a gang decided again, whose
    policy of the same name may be scoped to the zone decided before). The releaser writes it
    before it ungates a pod."""
    name, manifests, _ = covering_policy(
        gang, namespace, view, settings, zone=zone, record_zone=zone, fresh=fresh
    )
    return name, manifests


def job_wide_policy(
    gang: Gang, namespace: str, view: View, settings: Settings
) -> tuple[str | None, list[Manifest]]:
    """The name of the gang's job-wide policy (None without a policy mode), and the policy to
    create when the view does not hold it yet: what a gang kube-scheduler places gets
    (``engine._group``), and a held gang released across zones (``too-big: spread``)."""
    kind = policy_kind(settings.policy_mode)
    policy = build_policy(
        gang=gang, namespace=namespace, mode=settings.policy_mode, scope=PolicyScope.JOB, zone=None
    )
    name = policy["metadata"]["name"] if policy is not None else None
    if (
        kind is not None
        and policy is not None
        and name is not None
        and view.get(*kind, namespace, name) is None
    ):
        return name, [policy]
    return name, []
