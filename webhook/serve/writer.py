"""podium's one writer: every object podium creates, replaces, patches or deletes — an
admission's record, PodGroup and policy (``effects``), a release's (``releaser``), a repair or an
orphan's removal (``reconciler``) — goes through here, and what happened is one of
``audit.EffectOutcome``.

One answer to "it exists already": ``create`` keeps the object there (``EXISTS``), or, given
``same``, reads it and, when it is not the same, hands it back (``FOLLOWED``: an admission
adopts the record another admission wrote first); ``create_or_replace`` reads it and, unless it
is the ``same`` and once the caller's ``guard`` has not raised, overwrites it under the
resourceVersion read (``REPLACED``: a gang decided again). A kind the apiserver does not serve (a
CRD or an API not installed: ``NotFound`` on create) is ``KIND_MISSING`` where the caller says
the object is ``optional``. ``merge_patch`` and ``delete`` say ``GONE`` for an object gone
before them.

Any other ``kube.errors.ApiError`` (``Conflict`` when a resourceVersion or UID precondition
fails) reaches the caller, who knows what it means: the admission fails open, the releaser stops
the gang for this pass, the reconciler audits ``conflict`` or ``failed: …``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from webhook.core.audit import EffectEntry, EffectOutcome
from webhook.core.objects import Obj, metadata_of
from webhook.core.policies import Manifest
from webhook.kube import errors
from webhook.kube.protocols import Api, Objects


@dataclasses.dataclass(frozen=True, slots=True)
class Written:
    """What one write did to one object."""

    kind: str
    name: str
    namespace: str
    outcome: EffectOutcome
    #: ``FOLLOWED``: the object found there.
    existing: Obj | None = dataclasses.field(default=None, compare=False)

    @classmethod
    def of(cls, manifest: Manifest, outcome: EffectOutcome, existing: Obj | None = None) -> Written:
        meta = manifest["metadata"]
        return cls(
            str(manifest["kind"]),
            str(meta["name"]),
            str(meta.get("namespace", "")),
            outcome,
            existing,
        )

    def as_dict(self) -> EffectEntry:
        """An admission entry's ``effects`` item: kind, name and outcome, plain strings."""
        return {"kind": self.kind, "name": self.name, "outcome": self.outcome.value}

    def effect(self) -> EffectEntry:
        """The releaser's ``effects`` item: with the namespace, plain strings."""
        return {
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "outcome": self.outcome.value,
        }


async def create(
    api: Api,
    manifest: Manifest,
    *,
    optional: bool = False,
    same: Callable[[Obj], bool] | None = None,
) -> Written:
    """Create ``manifest``; one that exists already is ``EXISTS``, unread — or, given ``same``,
    read: ``EXISTS`` if ``same(existing)``, else ``FOLLOWED`` with the object there in
    ``Written.existing`` (the caller adopts it). ``optional``: a kind the apiserver does not
    serve is ``KIND_MISSING``, not an error."""
    created = await _create(api, manifest, optional=optional)
    if created is not None:
        return created
    if same is None:
        return Written.of(manifest, EffectOutcome.EXISTS)
    existing = await _read(api, manifest)
    if same(existing):
        return Written.of(manifest, EffectOutcome.EXISTS)
    return Written.of(manifest, EffectOutcome.FOLLOWED, existing)


async def create_or_replace(
    api: Objects,
    manifest: Manifest,
    *,
    optional: bool = False,
    same: Callable[[Obj], bool] | None = None,
    guard: Callable[[Obj], Awaitable[None]] | None = None,
) -> Written:
    """Create ``manifest``, or overwrite the object there (``REPLACED``) under the
    resourceVersion read — unless ``same(existing)`` (``EXISTS``), and once ``guard(existing)``
    has not raised. ``optional`` as for ``create``."""
    created = await _create(api, manifest, optional=optional)
    if created is not None:
        return created
    existing = await _read(api, manifest)
    if same is not None and same(existing):
        return Written.of(manifest, EffectOutcome.EXISTS)
    if guard is not None:
        await guard(existing)
    meta = manifest["metadata"]
    version = metadata_of(existing).get("resourceVersion")
    await api.replace({**manifest, "metadata": {**meta, "resourceVersion": version}})
    return Written.of(manifest, EffectOutcome.REPLACED)


async def replace(api: Objects, manifest: Manifest) -> Written:
    """Overwrite the object ``manifest`` names under the resourceVersion its metadata carries (the
    one the caller decided from): ``REPLACED``, or ``GONE``; ``Conflict`` when it changed since.
    For objects podium keeps but does not create (the serving Secret the chart creates empty, the
    webhook configuration whose ``caBundle`` it injects)."""
    try:
        await api.replace(manifest)
    except errors.NotFound:
        return Written.of(manifest, EffectOutcome.GONE)
    return Written.of(manifest, EffectOutcome.REPLACED)


async def _create(api: Api, manifest: Manifest, *, optional: bool) -> Written | None:
    """``CREATED``, ``KIND_MISSING`` (when ``optional``), or None: it exists already."""
    try:
        await api.create(manifest)
    except errors.AlreadyExists:
        return None
    except errors.NotFound:
        if not optional:
            raise
        return Written.of(manifest, EffectOutcome.KIND_MISSING)
    return Written.of(manifest, EffectOutcome.CREATED)


async def _read(api: Api, manifest: Manifest) -> Obj:
    meta = manifest["metadata"]
    return await api.get(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])


async def merge_patch(
    api: Objects, target: Manifest, patch: Manifest, *, done: EffectOutcome
) -> Written:
    """Send the merge ``patch`` (its own preconditions: a resourceVersion, a UID) to the object
    ``target`` names: ``done``, or ``GONE``."""
    meta = target["metadata"]
    try:
        await api.merge_patch(
            str(target["apiVersion"]),
            str(target["kind"]),
            str(meta.get("namespace", "")),
            str(meta["name"]),
            patch,
        )
    except errors.NotFound:
        return Written.of(target, EffectOutcome.GONE)
    return Written.of(target, done)


async def delete(api: Objects, target: Manifest) -> Written:
    """Delete the object ``target`` is, guarded by its UID and resourceVersion (each when it has
    one): ``DELETED``, or ``GONE``."""
    meta = target["metadata"]
    try:
        await api.delete(
            str(target["apiVersion"]),
            str(target["kind"]),
            str(meta.get("namespace", "")),
            str(meta["name"]),
            uid=str(meta.get("uid") or "") or None,
            resource_version=str(meta.get("resourceVersion") or "") or None,
        )
    except errors.NotFound:
        return Written.of(target, EffectOutcome.GONE)
    return Written.of(target, EffectOutcome.DELETED)
