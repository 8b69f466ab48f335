"""An admission's side effects: its record, PodGroup and policy, created through podium's writer
(``webhook.serve.writer``) with ``protocols.Api``.

A record another admission created first is read and, when it says another zone (or zone
chooser), followed; a PodGroup or policy there already is fine; ``KIND_MISSING`` on the policy
means its CRD is not installed and on the PodGroup that the apiserver does not serve PodGroups
(warnings); any other ``ApiError`` reaches the caller, which fails open.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
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


async def ensure(decision: Decision, api: Api) -> Applied:
    """Create the gang's record, then its PodGroup and policy; follow a record someone else
    created first.

    The record is created before the policy so that when two replicas race, the loser learns the
    winner's zone before doing anything else. A missing policy CRD is a warning, not a failure:
    the pod is still pinned (zone co-location alone fixes deny-rule isolation).
    """
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

        written = await writer.create(api, record, same=same)
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
        await _create_unless_missing(api, group, missing, results, warnings)
    if policy is not None:
        kind, name = policy["kind"], policy["metadata"]["name"]
        missing = (
            f"podium could not create {kind} {name}: the {kind} resource is not installed; "
            "the pod is pinned but no allow policy exists"
        )
        await _create_unless_missing(api, policy, missing, results, warnings)
    return Applied(tuple(results), warnings=tuple(warnings))


async def _create_unless_missing(
    api: Api,
    manifest: Manifest,
    missing: str,
    results: list[writer.Written],
    warnings: list[str],
) -> None:
    """Create an object the gang needs beside its record: one that exists already is fine; a
    kind the apiserver does not serve (a missing CRD or API) is the warning ``missing``."""
    written = await writer.create(api, manifest, optional=True)
    results.append(written)
    if written.outcome is EffectOutcome.KIND_MISSING:
        warnings.append(missing)


async def with_budget(seconds: float, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call`` within the admission's time budget; a timeout becomes an ``ApiError``."""
    try:
        return await asyncio.wait_for(call(), timeout=seconds)
    except TimeoutError as err:
        raise errors.ApiError(f"the Kubernetes API did not answer within {seconds:g}s") from err
