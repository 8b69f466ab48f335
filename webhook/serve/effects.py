"""The side-effect writer: an admission's record, PodGroup and policy, created through
``protocols.Api``.

Errors are ``kube.errors``: ``AlreadyExists`` means another admission created the object first
(its record is read and followed), ``NotFound`` on the policy means its CRD is not installed and
on the PodGroup that the apiserver does not serve PodGroups (warnings); any other ``ApiError``
reaches the caller, which fails open.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from webhook.core import records
from webhook.core.engine import Decision
from webhook.core.policies import Manifest
from webhook.core.records import Record
from webhook.kube import errors
from webhook.kube.protocols import Api

T = TypeVar("T")


#: ``followed``: the record existed with another zone than this admission chose; the admission
#: adopted the recorded zone.
EffectOutcome = Literal["created", "exists", "followed", "skipped-crd-missing", "dry-run"]


@dataclasses.dataclass(frozen=True, slots=True)
class EffectResult:
    kind: str
    name: str
    outcome: EffectOutcome

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "outcome": self.outcome}


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    results: tuple[EffectResult, ...]
    #: The record another admission created first; its zone wins over this decision's.
    followed: Record | None = None
    warnings: tuple[str, ...] = ()


async def ensure(decision: Decision, api: Api) -> Applied:
    """Create the gang's record, then its policy; follow a record someone else created first.

    The record is created before the policy so that when two replicas race, the loser learns the
    winner's zone before doing anything else. A missing policy CRD is a warning, not a failure:
    the pod is still pinned (zone co-location alone fixes deny-rule isolation).
    """
    results: list[EffectResult] = []
    record = decision.record
    if record is not None and decision.gang is not None:
        meta = record["metadata"]
        try:
            await api.create(record)
            results.append(EffectResult(record["kind"], meta["name"], "created"))
        except errors.AlreadyExists:
            existing = await api.get(
                record["apiVersion"], record["kind"], meta["namespace"], meta["name"]
            )
            followed = records.read_record(existing, decision.gang.key)
            # The gang's first decision wins: its zone, and who chooses it (podium or
            # kube-scheduler, which may differ when the setting is auto or has just changed).
            chooser = records.SCHEDULER if decision.podgroup is not None else records.PODIUM
            if followed is not None and (
                followed.zone != decision.zone or followed.chooser != chooser
            ):
                results.append(EffectResult(record["kind"], meta["name"], "followed"))
                return Applied(tuple(results), followed=followed)
            results.append(EffectResult(record["kind"], meta["name"], "exists"))
    warnings: list[str] = []
    group = decision.podgroup
    if group is not None:
        name = group["metadata"]["name"]
        missing = (
            f"podium could not create PodGroup {name}: the apiserver does not serve "
            f"{group['apiVersion']} PodGroups; the pod is neither grouped nor pinned"
        )
        await _create_unless_missing(api, group, missing, results, warnings)
    policy = decision.policy
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
    results: list[EffectResult],
    warnings: list[str],
) -> None:
    """Create an object the gang needs beside its record: one that exists already is fine; a
    kind the apiserver does not serve (a missing CRD or API) is the warning ``missing``."""
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    try:
        await api.create(manifest)
        results.append(EffectResult(kind, name, "created"))
    except errors.AlreadyExists:
        results.append(EffectResult(kind, name, "exists"))
    except errors.NotFound:
        results.append(EffectResult(kind, name, "skipped-crd-missing"))
        warnings.append(missing)


async def with_budget(seconds: float, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call`` within the admission's time budget; a timeout becomes an ``ApiError``."""
    try:
        return await asyncio.wait_for(call(), timeout=seconds)
    except TimeoutError as err:
        raise errors.ApiError(f"the Kubernetes API did not answer within {seconds:g}s") from err
