"""Does a pod's own scheduling constraint admit a node? And which zones does it already pin to?

Only the parts of the scheduler that decide *where a pod may go at all* (node selector, required
node affinity, taints and tolerations) — enough to count the capacity a pod could really use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core.objects import Obj, as_mapping


def matches_requirement(operator: object, value: str | None, values: Sequence[str]) -> bool:
    """One requirement of a label selector (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``)
    against the value of its key, None when the label is absent; any other operator matches
    nothing (k8s.io/apimachinery ``pkg/labels/selector.go``, ``Requirement.Matches``)."""
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    return False


def _match_expression(expr: Obj, value: str | None) -> bool:
    """A node selector requirement: a label selector's operators, and ``Gt``/``Lt``."""
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op in ("Gt", "Lt"):
        try:
            left, right = int(value or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return left > right if op == "Gt" else left < right
    return matches_requirement(op, value, values)


def term_matches(term: Obj, node_name: str, node_labels: Mapping[str, str]) -> bool:
    """A nodeSelectorTerm: its expressions and fields are ANDed; an empty term matches nothing."""
    exprs: Sequence[Obj] = term.get("matchExpressions") or []
    fields: Sequence[Obj] = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    return all(_match_expression(e, node_labels.get(str(e.get("key")))) for e in exprs) and all(
        _match_expression(f, node_name if f.get("key") == "metadata.name" else None) for f in fields
    )


def required_terms(spec: Obj) -> list[Obj] | None:
    """The pod's required nodeSelectorTerms (the well-formed ones), or None when it has none."""
    affinity = as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = as_mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        return None
    return [t for t in terms if isinstance(t, Mapping)] or None


def admits_labels(spec: Obj, node_name: str, node_labels: Mapping[str, str]) -> bool:
    """Node selector (ANDed) and required node affinity (terms ORed) both admit the node."""
    selector: Mapping[str, Any] = spec.get("nodeSelector") or {}
    if any(node_labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    terms = required_terms(spec)
    return terms is None or any(term_matches(t, node_name, node_labels) for t in terms)


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(key) and toleration.get("value", "") == taint.get("value", "")


def tolerates_all(spec: Obj, taints: Sequence[Obj]) -> bool:
    """Every NoSchedule/NoExecute taint is tolerated (PreferNoSchedule never blocks)."""
    tolerations: Sequence[Obj] = spec.get("tolerations") or []
    return all(
        any(_tolerates(t, taint) for t in tolerations)
        for taint in taints
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )


def pinned_zones(spec: Obj, zone_label: str) -> frozenset[str] | None:
    """The zones the pod's own constraint confines it to, or None when it does not confine it.

    A nodeSelector on the zone label confines it to one zone. Required node affinity confines it
    only when *every* term (they are ORed) has an ``In`` on the zone label; the union of those is
    the answer, intersected with the nodeSelector's zone when both are there.
    """
    zones: frozenset[str] | None = None
    selector: Mapping[str, Any] = spec.get("nodeSelector") or {}
    if zone_label in selector:
        zones = frozenset({str(selector[zone_label])})
    terms = required_terms(spec)
    if terms:
        union: set[str] = set()
        for term in terms:
            term_zones: set[str] | None = None
            for expr in term.get("matchExpressions") or []:
                if expr.get("key") == zone_label and expr.get("operator") == "In":
                    values = {str(v) for v in expr.get("values") or []}
                    term_zones = values if term_zones is None else term_zones & values
            if term_zones is None:
                union = set()
                break
            union |= term_zones
        else:
            zones = frozenset(union) if zones is None else zones & frozenset(union)
    return zones
