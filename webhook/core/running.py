"""Gangs that already run: members bound to a node that podium's gate will never hold. Pure.

A gang can have members running that podium never held: created before their namespace opted
in, while podium was down (``failurePolicy: Ignore``), or placed by someone else. Holding its
new pods until "all of it" is gated and fits one zone would wait for ever — the running pods
are never gated again — and would let the operator's replacement pod sit ``SchedulingGated``
while the rest of the job runs. Where its members run decides the gang's zone, as the pin does
(``zones.choose_zone``: the coordinator's zone, else the zone most of them run in; several zones
are said in a warning and never added to):

* at admission (``engine``), a new pod of such a gang is pinned there at once, ungated
  (``follow``), with the record and policy a pinned pod gets;
* in the releaser (``release.plan``), a held gang that has such members — the pods it held
  before they bound — is released into their zone at once, whatever the fit
  (``release.releases.follow``).

Either way the pod is ungated and pinned, so kube-scheduler (and an autoscaler, which never acts
on a gated pod) sees it at once; where the zone has no room it is Pending there, as a pinned pod
is, never placed in another zone than the running job's.

Members are the pods bound to a node and not finished that carry the gang's trusted label or
all its member labels and that the adapters recognise as the gang's (``placed_members``), found
through the view's bound-pod label index (``view.bound_pods``): a gang none of whose pods is
bound — every held gang podium saw whole — costs one dictionary lookup per query.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence

from webhook.core import adapters, labels, zones
from webhook.core.adapters.base import Gang
from webhook.core.settings import Settings
from webhook.core.view import PodSummary, View

_NOTHING_RESERVED: Mapping[str, dict[str, int]] = {}


def running_members(gang: Gang, namespace: str, view: View) -> list[tuple[PodSummary, str, bool]]:
    """Members of the gang bound to a node with a zone (not finished): each pod, its zone, and
    whether it is the gang's coordinator."""
    out = []
    # Only pods carrying the gang's trusted label or all its member labels can be members.
    queries = [{labels.JOB: gang.key}, *([gang.member_labels] if gang.member_labels else [])]
    seen: set[str] = set()
    for pod in (p for query in queries for p in view.bound_pods(namespace, query)):
        if pod.name in seen:
            continue
        seen.add(pod.name)
        member = adapters.recognise(pod.as_object(), namespace, view)
        if member is None or member.key != gang.key:
            continue
        node = view.node(str(pod.node))
        if node is not None and node.zone:
            out.append((pod, node.zone, member.coordinator))
    return out


def placed_members(gang: Gang, namespace: str, view: View) -> list[zones.Placed]:
    """Members of the gang bound to a node with a zone (not finished), the coordinator marked."""
    return [zones.Placed(zone, first) for _, zone, first in running_members(gang, namespace, view)]


def follow(
    placed: Sequence[zones.Placed], view: View, settings: Settings
) -> zones.ZoneChoice | None:
    """The zone a gang with running members follows (``zones.choose_zone`` from ``placed``),
    with its reason and detail, and a warning when they run in several zones; None when none
    runs."""
    if not placed:
        return None
    choice = zones.choose_zone(
        pod_spec={},
        demand=(),
        recorded_zone=None,
        placed=placed,
        view=view,
        settings=settings,
        reserved=lambda: _NOTHING_RESERVED,
    )
    running = Counter(p.zone for p in placed)
    where = ", ".join(f"{z}: {n}" for z, n in sorted(running.items()))
    detail = (
        f"{choice.detail}; {sum(running.values())} pod(s) of the job already run ({where}) "
        "without podium's gate, so its new pods follow them at once, ungated, instead of "
        "waiting for pods that will never be held"
    )
    if len(running) > 1:
        detail += f"; the job is split across {len(running)} zones and podium adds none"
    return dataclasses.replace(choice, detail=detail)


def unadmitted(gang: Gang, namespace: str, view: View) -> list[tuple[PodSummary, str]]:
    """The gang's running members that do not carry its ``podium.dev/job`` label — podium never
    admitted them — with their zone: what the reconciler adopts (``reconcile._adoptions``). Only
    pods carrying all the gang's member labels can be such (and the pods podium labelled are
    skipped before an adapter is asked), so a pass over a big gang that podium admitted whole
    recognises nothing."""
    if not gang.member_labels:
        return []
    out = []
    for pod in view.bound_pods(namespace, gang.member_labels):
        if pod.labels.get(labels.JOB) == gang.key:
            continue
        member = adapters.recognise(pod.as_object(), namespace, view)
        node = view.node(str(pod.node))
        if member is not None and member.key == gang.key and node is not None and node.zone:
            out.append((pod, node.zone))
    return out
