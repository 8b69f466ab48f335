"""An admission's side effects: its record, PodGroup and policy, created through podium's writer
(``webhook.serve.writer``) with ``protocols.Api``.

A record another admission created first is read and, when it says another zone (or zone
chooser), followed; a PodGroup or policy there already is fine; ``KIND_MISSING`` on the policy
means its CRD is not installed and on the PodGroup that the apiserver does not serve PodGroups
(warnings); any other ``ApiError`` reaches the caller, which fails open.

Within one replica, concurrent admissions of a new gang's pods would each create the same
objects before the watch shows the first's: ``Shared`` lets the first create each object and
the others take its answer (``exists``, ``followed``, ``skipped-crd-missing``) without asking the
apiserver again, as the 409 they would get says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import TypeVar

from webhook.core import records
from webhook.core.audit import EffectOutcome
from webhook.core.engine import Decision
from webhook.core.objects import Obj
from webhook.core.policies import Manifest
from webhook.core.records import Record
from webhook.kube import errors
from webhook.kube.protocols import Api
from webhook.serve import writer

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    results: tuple[writer.Written, ...]
    #: The record another admission created first; its zone wins over this decision's.
    followed: Record | None = None
    warnings: tuple[str, ...] = ()


class Shared:
    """The creates this replica made in the last ``seconds``, by object and owner. A create of
    one of them waits for that one and answers from it (the object as it was created) instead of
    asking the apiserver for a 409 and a read. By then the watch has shown the object to the view,
    so no decision asks for it again; one deleted since is created anew.

    Only a create that made the object, or found its kind not served, is shared: after a failure
    or an object there already, the next create asks the apiserver itself."""

    def __init__(self, seconds: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self._creates: dict[Hashable, tuple[float, asyncio.Future[writer.Written | None]]] = {}

    async def create(
        self,
        api: Api,
        manifest: Manifest,
        *,
        optional: bool = False,
        same: Callable[[Obj], bool] | None = None,
    ) -> writer.Written:
        """``writer.create``, once per object in this replica's recent past."""
        now = self.clock()
        self._forget(now)
        key = _identity(manifest)
        earlier = self._creates.get(key)
        if earlier is None:
            return await self._first(key, now, api, manifest, optional=optional, same=same)
        first = await asyncio.shield(earlier[1])
        if first is None:
            return await writer.create(api, manifest, optional=optional, same=same)
        if first.outcome is EffectOutcome.KIND_MISSING:
            return writer.Written.of(manifest, EffectOutcome.KIND_MISSING)
        created = first.existing
        if same is None or created is None or same(created):
            return writer.Written.of(manifest, EffectOutcome.EXISTS)
        return writer.Written.of(manifest, EffectOutcome.FOLLOWED, created)

    async def _first(
        self,
        key: Hashable,
        now: float,
        api: Api,
        manifest: Manifest,
        *,
        optional: bool,
        same: Callable[[Obj], bool] | None,
    ) -> writer.Written:
        done: asyncio.Future[writer.Written | None] = asyncio.get_running_loop().create_future()
        self._creates[key] = (now, done)
        shared: writer.Written | None = None
        try:
            written = await writer.create(api, manifest, optional=optional, same=same)
            if written.outcome in (EffectOutcome.CREATED, EffectOutcome.KIND_MISSING):
                shared = dataclasses.replace(written, existing=dict(manifest))
            return written
        finally:
            if shared is None:
                del self._creates[key]
            done.set_result(shared)

    def _forget(self, now: float) -> None:
        old = [
            k for k, (at, done) in self._creates.items() if done.done() and now - at > self.seconds
        ]
        for k in old:
            del self._creates[k]


def _identity(manifest: Manifest) -> Hashable:
    """An object by its kind, place and name, and the owners it is made for (a job of the same
    name made anew has another UID)."""
    meta = manifest["metadata"]
    owners = tuple(str(o.get("uid", "")) for o in meta.get("ownerReferences") or ())
    return (
        manifest["apiVersion"],
        manifest["kind"],
        meta.get("namespace", ""),
        meta["name"],
        owners,
    )


async def ensure(decision: Decision, api: Api, shared: Shared | None = None) -> Applied:
    """Create the gang's record, then its PodGroup and policy; follow a record someone else
    created first.

    The record is created before the policy so that when two replicas race, the loser learns the
    winner's zone before doing anything else. A missing policy CRD is a warning, not a failure:
    the pod is still pinned (zone co-location alone fixes deny-rule isolation). ``shared``: this
    replica's recent creates, answered without the apiserver.
    """
    create = writer.create if shared is None else shared.create
    record, group, policy = decision.record, decision.podgroup, decision.policy
    results: list[writer.Written] = []
    if record is not None and decision.gang is not None:
        key = decision.gang.key
        # The gang's first decision wins: its zone, and who chooses it (podium or
        # kube-scheduler, which may differ when the setting is auto or has just changed).
        chooser = records.SCHEDULER if group is not None else records.PODIUM

        def same(existing: Obj) -> bool:
            there = records.read_record(existing, key)
            return there is None or (there.zone, there.chooser) == (decision.zone, chooser)

        written = await create(api, record, same=same)
        results.append(written)
        if written.outcome is EffectOutcome.FOLLOWED and written.existing is not None:
            return Applied(tuple(results), followed=records.read_record(written.existing, key))
    warnings: list[str] = []
    if group is not None:
        name = group["metadata"]["name"]
        missing = (
            f"podium could not create PodGroup {name}: the apiserver does not serve "
            f"{group['apiVersion']} PodGroups; the pod is neither grouped nor pinned"
        )
        results.append(await create(api, group, optional=True))
        _warn_if_missing(results[-1], missing, warnings)
    if policy is not None:
        kind, name = policy["kind"], policy["metadata"]["name"]
        missing = (
            f"podium could not create {kind} {name}: the {kind} resource is not installed; "
            "the pod is pinned but no allow policy exists"
        )
        results.append(await create(api, policy, optional=True))
        _warn_if_missing(results[-1], missing, warnings)
    return Applied(tuple(results), warnings=tuple(warnings))


def _warn_if_missing(written: writer.Written, missing: str, warnings: list[str]) -> None:
    """An object the gang needs beside its record: one that exists already is fine; a kind the
    apiserver does not serve (a missing CRD or API) is the warning ``missing``."""
    if written.outcome is EffectOutcome.KIND_MISSING:
        warnings.append(missing)


async def with_budget(seconds: float, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call`` within the admission's time budget; a timeout becomes an ``ApiError``."""
    try:
        return await asyncio.wait_for(call(), timeout=seconds)
    except TimeoutError as err:
        raise errors.ApiError(f"the Kubernetes API did not answer within {seconds:g}s") from err
