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
    # Copy only what changes (metadata, labels, annotations, the affinity): the rest is shared
    # with ``pod``, which is never mutated, and ``diff`` skips what is shared.
    out: Pod = dict(pod)
    meta = out["metadata"] = dict(out.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), labels.JOB: gang_key}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    if zone is not None:
        spec = out["spec"] = dict(out.get("spec") or {})
        if "affinity" in spec:
            spec["affinity"] = copy.deepcopy(spec["affinity"])
        _require_zone(spec, zone, zone_label)
    return out


def without_trusted_label(pod: Obj) -> Pod:
    """A copy without podium's job label: a pod podium did not admit into a gang must not carry it,
    or it would be let into that gang's policy."""
    out: Pod = dict(pod)
    meta = out.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("labels"), dict):
        out["metadata"] = {**meta, "labels": dict(meta["labels"])}
        out["metadata"]["labels"].pop(labels.JOB, None)
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
    """``jsonpatch.make_patch(before, after)``, minus the walk through subtrees the two share.

    A subtree that is the *same object* on both sides (or an equal scalar of the same type)
    yields no operation, so dropping it from both before diffing changes nothing but the cost:
    ``make_patch`` serialises every leaf it compares, and a pod's containers, volumes and env
    are most of its leaves.
    """
    src, dst = _unshared(before, after)
    ops: list[dict[str, Any]] = jsonpatch.make_patch(src, dst).patch
    return ops


_SCALARS = (str, int, float, bool, type(None))


def _same(before: Any, after: Any) -> bool:
    """The same object, or equal scalars of one type (which JSON serialises alike)."""
    return before is after or (
        type(before) is type(after) and isinstance(before, _SCALARS) and before == after
    )


def _unshared(before: Any, after: Any) -> tuple[Any, Any]:
    if not (isinstance(before, dict) and isinstance(after, dict)):
        return before, after
    src: dict[str, Any] = {}
    dst: dict[str, Any] = {}
    for key, value in before.items():
        if key not in after:
            src[key] = value
        elif not _same(value, after[key]):
            src[key], dst[key] = _unshared(value, after[key])
    for key, value in after.items():
        if key not in before:
            dst[key] = value
    return src, dst
