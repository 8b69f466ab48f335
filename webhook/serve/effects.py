"""Creating podium's objects: the API interface, its in-memory twin, and the side-effect writer.

Exception tree::

    ApiError            any failed API call (``status`` is the HTTP code when there was one)
    ├── AlreadyExists   409 on create: someone else created the object first
    └── NotFound        404: the object — or its resource type, e.g. a missing CRD — is not there
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar

import orjson

from webhook.core import records
from webhook.core.engine import Decision
from webhook.core.objects import Obj, key_of
from webhook.core.policies import Manifest
from webhook.core.records import Record

T = TypeVar("T")


class ApiError(Exception):
    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AlreadyExists(ApiError):
    pass


class NotFound(ApiError):
    pass


class Api(Protocol):
    """The two calls an admission needs. Implementations raise ``ApiError`` and nothing else."""

    async def create(self, manifest: Manifest) -> Obj: ...

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj: ...


class InMemoryApi:
    """A twin of the apiserver for the two calls: atomic create, get, optional delay and faults."""

    def __init__(self, *, delay: float = 0.0, missing_kinds: frozenset[str] = frozenset()) -> None:
        self.objects: dict[tuple[str, str, str, str], Obj] = {}
        self.delay = delay
        self.missing_kinds = missing_kinds
        self.fail: Callable[[str, Manifest | None], ApiError | None] = lambda _op, _m: None
        self.calls: list[tuple[str, str, str]] = []
        self.listeners: list[Callable[[Obj], None]] = []

    async def _pause(self) -> None:
        await asyncio.sleep(self.delay)

    async def create(self, manifest: Manifest) -> Obj:
        self.calls.append(("create", manifest["kind"], manifest["metadata"]["name"]))
        await self._pause()
        if (err := self.fail("create", manifest)) is not None:
            raise err
        if manifest["kind"] in self.missing_kinds:
            raise NotFound(
                f"the server could not find the requested resource ({manifest['kind']})", status=404
            )
        key = key_of(manifest)
        if key in self.objects:
            raise AlreadyExists(f"{manifest['kind']} {key[3]!r} already exists", status=409)
        stored = _copy(manifest)
        stored["metadata"]["uid"] = str(uuid.uuid4())
        stored["metadata"]["creationTimestamp"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.objects[key] = stored
        for listener in self.listeners:
            listener(stored)
        return _copy(stored)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj:
        self.calls.append(("get", kind, name))
        await self._pause()
        if (err := self.fail("get", None)) is not None:
            raise err
        key = (api_version.split("/", 1)[0] if "/" in api_version else "", kind, namespace, name)
        if key not in self.objects:
            raise NotFound(f"{kind} {name!r} not found", status=404)
        return _copy(self.objects[key])


def _copy(obj: Obj) -> dict[str, Any]:
    """A deep copy, as a round trip through the apiserver makes one: through JSON (orjson, ten
    times faster than ``copy.deepcopy``), or ``deepcopy`` for what orjson refuses."""
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    except TypeError:
        return copy.deepcopy(dict(obj))
    return copied


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
        except AlreadyExists:
            existing = await api.get(
                record["apiVersion"], record["kind"], meta["namespace"], meta["name"]
            )
            followed = records.read_record(existing, decision.gang.key)
            if followed is not None and followed.zone != decision.zone:
                results.append(EffectResult(record["kind"], meta["name"], "followed"))
                return Applied(tuple(results), followed=followed)
            results.append(EffectResult(record["kind"], meta["name"], "exists"))
    warnings: list[str] = []
    policy = decision.policy
    if policy is not None:
        meta = policy["metadata"]
        try:
            await api.create(policy)
            results.append(EffectResult(policy["kind"], meta["name"], "created"))
        except AlreadyExists:
            results.append(EffectResult(policy["kind"], meta["name"], "exists"))
        except NotFound:
            results.append(EffectResult(policy["kind"], meta["name"], "skipped-crd-missing"))
            warnings.append(
                f"podium could not create {policy['kind']} {meta['name']}: the {policy['kind']} "
                "resource is not installed; the pod is pinned but no allow policy exists"
            )
    return Applied(tuple(results), warnings=tuple(warnings))


async def with_budget(seconds: float, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call`` within the admission's time budget; a timeout becomes an ``ApiError``."""
    try:
        return await asyncio.wait_for(call(), timeout=seconds)
    except TimeoutError as err:
        raise ApiError(f"the Kubernetes API did not answer within {seconds:g}s") from err


def describe(manifest: Manifest) -> dict[str, Any]:
    meta = manifest["metadata"]
    return {"kind": manifest["kind"], "name": meta["name"], "namespace": meta["namespace"]}
