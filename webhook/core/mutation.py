"""The pod after podium's decision, and the JSON Patch that turns the pod before into it. Pure.

podium changes three places of a pod: its trusted labels (the job, and the zone when it pins the
pod), a few annotations and the node affinity. The
patch names exactly those (``add`` where the member is new, ``replace`` where it exists), with
keys escaped by ``jsonpointer``; a pod that already carries what podium would set gets no
operation at all, so a reinvoked webhook answers with an empty patch. Only an affinity the pod
brought with it is diffed, by ``jsonpatch.make_patch``. Generic diffing of the whole pod was a
quarter of an admission's CPU (docs/benchmarks/README.md); ``tests/core/test_mutation.py`` checks,
for arbitrary pods, that the patch applied by ``jsonpatch`` gives exactly the pod returned here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jsonpatch
from jsonpointer import escape

from webhook.core import labels, selectors
from webhook.core.objects import Obj, annotations_of, as_mapping, metadata_of
from webhook.core.view import has_gate

Pod = dict[str, Any]
Op = dict[str, Any]


class Mutation(NamedTuple):
    pod: Pod
    """The pod after the change; it shares every unchanged subtree with the pod before."""
    patch: list[Op]
    """The JSON Patch from the pod before to ``pod``."""


def pin(
    pod: Obj,
    *,
    zone: str | None,
    gang_key: str,
    zone_label: str,
    annotations: Mapping[str, str],
    below: Sequence[Mapping[str, Any]] = (),
) -> Mutation:
    """``pod`` with the trusted job label, the annotations and, given a zone, the trusted zone
    label and ``zone_label In [zone]`` required in *every* nodeSelectorTerm (terms are ORed, so
    one term without it would let the pod escape the zone), followed there by the requirements
    ``below`` it (the domain of the zone the releaser chose, ``topology.requirements``).
    Without a zone, a zone label the pod brought is removed: only podium says which zone a pod
    is in. ``pod`` itself is never mutated."""
    out: Pod = dict(pod)
    ops: list[Op] = []
    meta, meta_ops = _child(out, "metadata", ops)
    trusted = {labels.JOB: gang_key, **({labels.ZONE: zone} if zone is not None else {})}
    _merge(meta, "labels", trusted, meta_ops, "/metadata")
    if zone is None:
        _drop(meta, "labels", labels.ZONE, meta_ops, "/metadata")
    _merge(meta, "annotations", annotations, meta_ops, "/metadata")
    if zone is not None:
        spec, spec_ops = _child(out, "spec", ops)
        before = spec.get("affinity")
        if not isinstance(before, dict) or not before:
            after = _require_zone({}, zone, zone_label, below)
            _set(spec, "affinity", after, spec_ops, "/spec")
        elif (after := _require_zone(copy.deepcopy(before), zone, zone_label, below)) != before:
            spec["affinity"] = after
            spec_ops += [
                {**op, "path": "/spec/affinity" + op["path"]}
                for op in jsonpatch.make_patch(before, after).patch
            ]
    return Mutation(out, ops)


def hold(pod: Obj, *, gang_key: str) -> Mutation:
    """``pod`` held (``zone-chooser: hold``): the trusted job label, the reason annotation
    ``held``, podium's scheduling gate, and no zone (a zone label it brought is removed). A pod
    that carries all of it already (a reinvoked webhook) gets no operation."""
    after, ops = pin(
        pod,
        zone=None,
        gang_key=gang_key,
        zone_label=labels.ZONE_LABEL,
        annotations={labels.REASON: labels.HELD},
    )
    spec, spec_ops = _child(after, "spec", ops)
    gates = spec.get("schedulingGates")
    gate = {"name": labels.HOLD_GATE}
    if not isinstance(gates, list) or not gates:
        _set(spec, "schedulingGates", [gate], spec_ops, "/spec")
    elif gate not in gates:
        spec["schedulingGates"] = [*gates, gate]
        spec_ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": gate})
    return Mutation(after, ops)


def release(
    pod: Obj,
    *,
    zone: str | None,
    gang_key: str,
    zone_label: str,
    annotations: Mapping[str, str],
    below: Sequence[Mapping[str, Any]] = (),
) -> Mutation:
    """``pod`` released from podium's gate into ``zone`` (``pin``, with the domain ``below`` it)
    in one patch, as KEP-3838 advises: the zone is added to every required term while the pod
    is still gated (the only time its placement may be narrowed), and the gate is removed by
    index behind a ``test`` of that index's name and of the pod's UID, so a patch computed from
    a stale read fails instead of removing another gate or touching a recreated pod of the same
    name."""
    after, ops = pin(
        pod,
        zone=zone,
        gang_key=gang_key,
        zone_label=zone_label,
        annotations=annotations,
        below=below,
    )
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    index = next(
        (
            i
            for i, g in enumerate(gates)
            if isinstance(g, Mapping) and g.get("name") == labels.HOLD_GATE
        ),
        None,
    )
    if index is None:
        return Mutation(after, ops)
    uid = metadata_of(pod).get("uid")
    said = annotations_of(after)
    if labels.HELD_WHY in said:  # why it waited: no longer true
        meta = after["metadata"] = dict(after["metadata"])
        meta["annotations"] = {k: v for k, v in said.items() if k != labels.HELD_WHY}
        ops = [*ops, {"op": "remove", "path": "/metadata/annotations/" + escape(labels.HELD_WHY)}]
    spec = after["spec"] = dict(after.get("spec") or {})
    kept = [g for i, g in enumerate(gates) if i != index]
    path = f"/spec/schedulingGates/{index}"
    guard = [{"op": "test", "path": path + "/name", "value": labels.HOLD_GATE}]
    if uid:
        guard.insert(0, {"op": "test", "path": "/metadata/uid", "value": uid})
    if kept:
        spec["schedulingGates"] = kept
        ungate = [{"op": "remove", "path": path}]
    else:
        spec.pop("schedulingGates", None)
        ungate = [{"op": "remove", "path": "/spec/schedulingGates"}]
    return Mutation(after, [*guard, *ops, *ungate])


def is_release(before: Obj, after: Obj, *, zone_label: str) -> bool:
    """``after`` is ``before`` as ``release`` makes it: ``before`` carried podium's gate, ``after``
    does not, and ``after``'s trusted zone label names the one zone its placement allows (required
    in every term, or its node selector). What the admission of podium's own UPDATE recognises
    (``updates``), beside what builds it, so the two change together."""
    zone = as_mapping(as_mapping(after.get("metadata")).get("labels")).get(labels.ZONE)
    old_spec, new_spec = as_mapping(before.get("spec")), as_mapping(after.get("spec"))
    return (
        isinstance(zone, str)
        and has_gate(old_spec)
        and not has_gate(new_spec)
        and selectors.pinned_zones(new_spec, zone_label) == frozenset({zone})
    )


def without_trusted_label(pod: Obj) -> Mutation:
    """``pod`` without podium's job and zone labels: a pod podium did not admit into a gang must
    not carry them, or it would be let into that gang's policy (or claim a zone it is not in)."""
    meta = pod.get("metadata")
    if not (isinstance(meta, dict) and isinstance(meta.get("labels"), dict)):
        return Mutation(dict(pod), [])
    found = [k for k in (labels.JOB, labels.ZONE) if k in meta["labels"]]
    if not found:
        return Mutation(dict(pod), [])
    kept = {k: v for k, v in meta["labels"].items() if k not in found}
    ops = [{"op": "remove", "path": f"/metadata/labels/{escape(k)}"} for k in found]
    return Mutation({**pod, "metadata": {**meta, "labels": kept}}, ops)


def _set(parent: dict[str, Any], key: str, value: Any, ops: list[Op], path: str) -> None:
    op = "replace" if key in parent else "add"
    ops.append({"op": op, "path": f"{path}/{escape(key)}", "value": value})
    parent[key] = value


def _child(parent: dict[str, Any], key: str, ops: list[Op]) -> tuple[dict[str, Any], list[Op]]:
    """A copy of the top-level object ``parent[key]`` put in its place, to change, and the list
    its changes go to: ``ops``. If the pod has no such object, one ``add`` of a new object is
    the whole change: the caller fills that very object in, and its finer operations go to a
    list that is dropped."""
    value = parent.get(key)
    if isinstance(value, dict):
        parent[key] = dict(value)
        return parent[key], ops
    fresh: dict[str, Any] = {}
    _set(parent, key, fresh, ops, "")
    return fresh, []


def _drop(parent: dict[str, Any], key: str, member: str, ops: list[Op], path: str) -> None:
    """Remove ``member`` from the string map ``parent[key]``, if it is there."""
    current = parent.get(key)
    if isinstance(current, dict) and member in current:
        parent[key] = {k: v for k, v in current.items() if k != member}
        ops.append({"op": "remove", "path": f"{path}/{escape(key)}/{escape(member)}"})


def _merge(
    parent: dict[str, Any], key: str, wanted: Mapping[str, str], ops: list[Op], path: str
) -> None:
    """Set each of ``wanted`` in the string map ``parent[key]``, one operation per change."""
    current = parent.get(key)
    if not isinstance(current, dict):
        _set(parent, key, dict(wanted), ops, path)
        return
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    if changed:
        merged = parent[key] = {**current}
        for k, v in changed.items():
            _set(merged, k, v, ops, f"{path}/{escape(key)}")


def _require_zone(
    affinity: dict[str, Any],
    zone: str,
    zone_label: str,
    below: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    zone_expr = {"key": zone_label, "operator": "In", "values": [zone]}
    wanted_all = [zone_expr, *map(dict, below)]
    node_affinity = affinity.setdefault("nodeAffinity", {}) or {}
    affinity["nodeAffinity"] = node_affinity
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}) or {}
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = terms
    for term in terms:
        exprs = term.setdefault("matchExpressions", []) or []
        term["matchExpressions"] = exprs
        for wanted in wanted_all:
            if wanted not in exprs:
                exprs.append(wanted)
    return affinity
