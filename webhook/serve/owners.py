"""Read-through for the owners of a pod that the watch has not delivered yet.

An operator creates a job's pods as soon as its informer sees the job; podium's watch of the same
job can arrive later (milliseconds usually, longer under load or after a re-list). A pod decided
on a view without its job gets a guessed gang size, so its zone may not fit the whole gang and
``zone-chooser: auto`` keeps the gang with podium; an LWS pod is not recognised at all. So before
each creation is decided, the pod's controller chain is walked in the view, and an owner the view
lacks, or holds under another UID, is read from the apiserver if it is of a kind podium watches;
what is read is kept in the view as a watch event would keep it (the watch's own event replaces
it when it comes). The walk is dictionary look-ups; only a miss costs a GET, and only a miss
costs the admission an await (``lacking`` walks first, without I/O).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from webhook.core.objects import Obj, controller_ref, uid_of
from webhook.core.view import View
from webhook.kube import errors, protocols
from webhook.kube.cache import WatchCache
from webhook.kube.protocols import Resource

log = logging.getLogger("podium.owners")

#: pod → Job → JobSet → TrainJob is the longest chain an adapter reads.
MAX_DEPTH = 4


def _uid(obj: Obj) -> str:
    return uid_of(obj) or ""


class _Step(NamedTuple):
    """A controller reference of a kind podium watches: where its object would be. (A tuple:
    `lacking` makes one or two per admission, and a frozen dataclass costs several times more to
    build.)"""

    resource: Resource
    api_version: str
    kind: str
    where: str
    name: str
    uid: str

    def held(self, view: View) -> Obj | None:
        return view.get(self.api_version, self.kind, self.where, self.name)


class OwnerReader:
    """``await reader(pod, namespace, view)``: read the pod's owners the view lacks;
    ``reader.lacking(pod, namespace, view)``: whether there is any (the same walk, no I/O)."""

    def __init__(self, cache: WatchCache, api: protocols.Api) -> None:
        self.cache = cache
        self.api = api

    def _step(self, obj: Obj, namespace: str) -> _Step | None:
        ref = controller_ref(obj)
        if ref is None:
            return None
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        name, uid = str(ref.get("name") or ""), str(ref.get("uid") or "")
        resource = self.cache.owner_resource(api_version, kind)
        if resource is None or not name:
            return None
        where = namespace if resource.namespaced else ""
        return _Step(resource, api_version, kind, where, name, uid)

    def lacking(self, pod: Obj, namespace: str, view: View) -> bool:
        """Whether the walk meets an owner the view lacks or holds under another UID: only then
        does the read cost a GET (and the admission a timeout around it). Run at every creation,
        so it is the walk at its cheapest: a held owner is found by its UID in the view's index,
        and its own controller reference is derived once per version of it."""
        obj: Obj = pod
        for depth in range(MAX_DEPTH):
            ref = controller_ref(obj) if depth == 0 else view.derived(obj, controller_ref)
            if ref is None:
                return False
            held = view.by_uid(str(ref.get("uid") or ""))
            if held is None:  # a GET only for an owner of a kind podium watches
                return self._step(obj, namespace) is not None
            obj = held
        return False

    async def __call__(self, pod: Obj, namespace: str, view: View) -> list[str]:
        """Return what was read, as ``Kind/name``. Stops at the first owner that is not of a
        watched kind, is gone, or was re-created under its name (the pod's owner is then gone:
        the adapters tell that case apart by UID). Raises ``errors.ApiError``."""
        read: list[str] = []
        obj: Obj = pod
        for _ in range(MAX_DEPTH):
            step = self._step(obj, namespace)
            if step is None:
                break
            held = step.held(view)
            if held is None or _uid(held) != step.uid:
                try:
                    got = await self.api.get(step.api_version, step.kind, step.where, step.name)
                except errors.NotFound:
                    break
                if _uid(got) != step.uid:
                    break
                self.cache.remember(step.resource, dict(got))
                read.append(f"{step.kind}/{step.name}")
                log.info(
                    "read %s %s/%s before the watch delivered it", step.kind, step.where, step.name
                )
                held = step.held(view)
                if held is None:
                    break
            obj = held
        return read
