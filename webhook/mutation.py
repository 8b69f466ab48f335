"""The pod after podium's decision, and the JSON Patch from the pod before. Pure.

The patch is always a diff computed by ``jsonpatch`` between the two objects, so escaping
(``podium.dev~1zone``) and missing parents are the library's business, and re-running on an
already-patched pod yields an empty patch (the webhook may be reinvoked).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch

from webhook import labels
from webhook.snapshot import Obj

Pod = dict[str, Any]


def pin(
    pod: Obj, *, zone: str | None, gang_key: str, zone_label: str, annotations: Mapping[str, str]
) -> Pod:
    """Return a copy of ``pod`` with the trusted job label, the annotations and, given a zone,
    ``zone_label In [zone]`` required in *every* nodeSelectorTerm (terms are ORed, so one term
    without it would let the pod escape the zone)."""
    out: Pod = copy.deepcopy(dict(pod))
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), labels.JOB: gang_key}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    if zone is not None:
        _require_zone(out.setdefault("spec", {}), zone, zone_label)
    return out


def without_trusted_label(pod: Obj) -> Pod:
    """A copy without podium's job label: a pod podium did not admit into a gang must not carry it,
    or it would be let into that gang's policy."""
    out: Pod = copy.deepcopy(dict(pod))
    pod_labels = (out.get("metadata") or {}).get("labels")
    if isinstance(pod_labels, dict):
        pod_labels.pop(labels.JOB, None)
    return out


def _require_zone(spec: dict[str, Any], zone: str, zone_label: str) -> None:
    wanted = {"key": zone_label, "operator": "In", "values": [zone]}
    affinity = spec.setdefault("affinity", {}) or {}
    spec["affinity"] = affinity
    node_affinity = affinity.setdefault("nodeAffinity", {}) or {}
    affinity["nodeAffinity"] = node_affinity
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}) or {}
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = terms
    for term in terms:
        exprs = term.setdefault("matchExpressions", []) or []
        term["matchExpressions"] = exprs
        if wanted not in exprs:
            exprs.append(wanted)


def diff(before: Obj, after: Obj) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = jsonpatch.make_patch(before, after).patch
    return ops
