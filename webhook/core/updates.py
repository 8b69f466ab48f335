"""An UPDATE of a pod, as podium admits it: only podium changes its trusted labels. Pure.

podium sets its job label (``podium.dev/job``) and its zone label (``podium.dev/zone``) when it
admits a pod, and a policy trusts them from then on: a pod that could change them could walk
into another job's allow policy, or claim a zone it does not run in. ``judge`` refuses any update
that changes either, except podium's own four: its releaser ungating a held pod into its gang's
zone (``mutation.is_release``), and its reconciler removing a job label the pod's controller
chain disowns (``disowned_label``), labelling a bound pod with the zone of its node, or
labelling a running member it never admitted with its gang and node's zone (``adopted``).
``engine.decide`` hands every pod UPDATE here and turns the ``Verdict`` into its ``Decision``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from webhook.core import adapters, labels, mutation
from webhook.core.objects import Obj, controller_ref, labels_of
from webhook.core.reviews import Request
from webhook.core.settings import Settings
from webhook.core.view import TERMINAL_PHASES, View


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """podium's answer to a pod UPDATE: let through (``reason`` says which kind) or refused."""

    reason: str
    detail: str
    refused: bool = False


#: The update leaves podium's labels alone: nothing to decide.
UNTOUCHED = Verdict("not-a-pod-creation", "UPDATE Pod that leaves podium's labels alone")


def judge(request: Request, view: View, settings: Settings) -> Verdict:
    """Only podium sets its job label, at creation: an update that adds, changes or removes it
    would move a pod into (or out of) some job's allow policy, so it is refused — except podium's
    own removal of a label the pod's controller chain disowns (``disowned_label``: the
    reconciler's, for a pod created with a copied label while podium was down). Both must hold:
    the request comes from podium's own user, and the label it removes is not the pod's."""
    before, after = _trusted_label(request.old_object), _trusted_label(request.object)
    if before == after:
        return _zone_update(request, view, settings)
    if (
        after is None
        and _by_podium(request, settings)
        and request.old_object is not None
        and (why := disowned_label(request.old_object, request.namespace, view)) is not None
    ):
        return Verdict(
            "own-label-removal",
            f"podium ({settings.own_user}) removed a copied {labels.JOB} label: {why}",
        )
    if (
        before is None
        and after is not None
        and _by_podium(request, settings)
        and request.old_object is not None
        and request.object is not None
        and (why := adopted(request.old_object, request.object, after, request.namespace, view))
    ):
        return Verdict(
            "own-adoption",
            f"podium ({settings.own_user}) labelled a running pod it did not "
            f"admit as its gang's: {why}",
        )
    return _refused(
        f"the {labels.JOB} label is set by podium when a pod is created and cannot be "
        f"changed afterwards ({before!r} → {after!r})"
    )


def adopted(old: Obj, new: Obj, gang_key: str, namespace: str, view: View) -> str | None:
    """Why labelling ``old`` with ``podium.dev/job`` = ``gang_key`` (and, if at all, with its
    node's zone) is podium's adoption of a running member it never admitted — one created
    before its namespace opted in or while podium was down, whose gang podium now follows
    (``core.running``) — or None when it is not: the pod is bound and not finished, an adapter
    recognises it as a member of exactly that gang, and its new zone label (if any) is the zone
    of its node. Then the gang's policy selects it as it selects the gang's other pods."""
    spec = old.get("spec") or {}
    if not spec.get("nodeName") or (old.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    gang = adapters.recognise(old, namespace, view)
    if gang is None or gang.key != gang_key:
        return None
    node = view.node(str(spec["nodeName"]))
    zone = _trusted_label(new, labels.ZONE)
    if zone is not None and (node is None or node.zone != zone):
        return None
    return f"{gang.display} runs it on node {spec['nodeName']}" + (f" in {zone}" if zone else "")


def _zone_update(request: Request, view: View, settings: Settings) -> Verdict:
    """Only podium sets its zone label, like its job label: a zone-scoped policy lets the pods
    labelled with a zone talk to each other, so a pod that says it is in another zone than it
    runs in would open traffic across zones. Refused, except podium's own release of a held pod
    into its gang's zone, and its labelling of a bound pod with the zone of its node (the
    reconciler's, for a pod whose zone was not known when podium admitted it)."""
    before = _trusted_label(request.old_object, labels.ZONE)
    after = _trusted_label(request.object, labels.ZONE)
    if before == after:
        return UNTOUCHED
    if _own_release(request, settings):
        return Verdict(
            "own-release", f"podium ({settings.own_user}) released a held pod into zone {after}"
        )
    node = view.node(str(((request.old_object or {}).get("spec") or {}).get("nodeName") or ""))
    if (
        after is not None
        and _by_podium(request, settings)
        and node is not None
        and node.zone == after
    ):
        return Verdict(
            "own-zone-label",
            f"podium ({settings.own_user}) labelled the pod with the zone of its node {node.name}",
        )
    return _refused(
        f"the {labels.ZONE} label is set by podium and cannot be changed ({before!r} → {after!r})"
    )


def _own_release(request: Request, settings: Settings) -> bool:
    """podium's releaser ungating a held pod into its gang's zone: from podium's own user, and
    the update is the one ``mutation.release`` builds (``mutation.is_release``)."""
    return (
        _by_podium(request, settings)
        and request.old_object is not None
        and request.object is not None
        and mutation.is_release(request.old_object, request.object, zone_label=settings.zone_label)
    )


def _by_podium(request: Request, settings: Settings) -> bool:
    """The request comes from podium's own user (its reconciler), when that user is known."""
    return bool(settings.own_user) and request.user.get("username") == settings.own_user


def _refused(message: str) -> Verdict:
    """A change to one of podium's trusted labels, refused with ``message``."""
    return Verdict("trusted-label-changed", message, refused=True)


def _trusted_label(pod: Obj | None, key: str = labels.JOB) -> str | None:
    """The value of podium's trusted label ``key`` on the pod (its job label by default)."""
    value = labels_of(pod)
    return value.get(key) if isinstance(value, Mapping) else None


def disowned_label(pod: Obj, namespace: str, view: View) -> str | None:
    """Why the pod's ``podium.dev/job`` label is not its own, or None when it is (or the pod has
    none, or is finished, or its own job cannot be checked right now).

    The label is its own when an adapter recognises the pod as a member of exactly that gang, or
    — the job not in the view, e.g. being deleted — when the gang key starts with the UID of an
    object in the pod's controller chain. Anything else was copied: admission strips such a label,
    but a pod created while podium was down never went through admission."""
    value = _trusted_label(pod)
    if not value or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    gang = adapters.recognise(pod, namespace, view)
    if gang is not None:
        if gang.key == value:
            return None
        return f"its controller chain leads to {gang.display} (gang {gang.key}), not gang {value}"
    chain = _controller_uids(pod, view)
    if any(value == uid or value.startswith(uid + "-") for uid in chain):
        return None
    owner = controller_ref(pod)
    what = f"{owner.get('kind')}/{owner.get('name')}" if owner else "no controller"
    return f"no job in its controller chain ({what}) has gang {value}"


def _controller_uids(obj: Obj, view: View, depth: int = 4) -> list[str]:
    """The UIDs of the object's controller, its controller's controller, … as far as the view
    knows them (a reference's UID counts even when its object is not in the view)."""
    uids: list[str] = []
    current: Obj | None = obj
    for _ in range(depth):
        ref = controller_ref(current) if current is not None else None
        uid = str((ref or {}).get("uid") or "")
        if not uid or uid in uids:
            break
        uids.append(uid)
        current = view.by_uid(uid)
    return uids
