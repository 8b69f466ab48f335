"""What the Kubernetes edge offers the rest of podium: the interfaces and what they carry.

* ``Api`` — the two calls an admission makes (create, get); ``Objects`` adds what keeping
  objects right needs (list, guarded replace, merge patch, guarded delete). Async.
* ``Lister`` — the two calls the watch cache makes from its worker threads: a ``Page`` of a
  ``Resource``'s list, and a ``WatchStream`` of ``WatchEvent`` s. Sync.

The real implementations are in ``client`` (the only module that imports the ``kubernetes``
client), the in-memory twins in ``twins``. Every implementation raises ``errors.ApiError`` (or a
subclass) and nothing else. Nothing here does I/O or imports a client library, so the decision
path and ``podium review`` can use the interfaces without loading one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Protocol

from webhook.core.objects import Obj, group_of
from webhook.core.policies import Manifest

#: A JSON Patch (RFC 6902): a list of operations.
JsonPatch = list[dict[str, Any]]


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """One collection to list and watch: across all namespaces, or in ``namespace`` only."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    label_selector: str | None = None
    #: e.g. ``metadata.name=x``: one object of a kind whose other objects podium does not need.
    field_selector: str | None = None
    #: Readiness does not wait for it (a failing list is retried, but admissions go on).
    optional: bool = False
    #: One namespace's collection (RBAC that grants the kind there only, ``rbac.scope``
    #: namespaced); None: every namespace's.
    namespace: str | None = None

    @property
    def group(self) -> str:
        return group_of(self.api_version)

    @property
    def name(self) -> str:
        """``pods``, ``pytorchjobs.kubeflow.org/v1``: how logs and readiness name it."""
        name = (
            f"{self.plural}.{self.group}/{self.api_version.split('/', 1)[1]}"
            if self.group
            else self.plural
        )
        return f"{name} in {self.namespace}" if self.namespace else name


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: str
    #: The token for the next page; None on the last one.
    continue_: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class WatchEvent:
    #: ``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK``, or ``ERROR`` with a Status as object.
    type: str
    object: dict[str, Any]


class WatchStream(Protocol):
    """Events of one watch request; ``close`` may be called from another thread to end it."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


class Lister(Protocol):
    """The two calls the watch cache makes. Implementations raise ``errors.ApiError`` only."""

    def list(self, resource: Resource, *, limit: int, continue_: str | None) -> Page: ...

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> WatchStream: ...


class Api(Protocol):
    """The two calls an admission makes. Implementations raise ``errors.ApiError`` only."""

    async def create(self, manifest: Manifest) -> Obj: ...

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj: ...


class Objects(Api, Protocol):
    """``Api`` plus what keeping objects right needs (the reconciler, leader election, ``podium
    doctor``). Every write is guarded by the object's resourceVersion — replace and patch carry
    it in the body, delete as a precondition — so a write based on a stale read fails with
    ``errors.Conflict`` instead of undoing somebody else's change."""

    async def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]: ...

    async def replace(self, manifest: Manifest) -> Obj: ...

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: Manifest
    ) -> Obj: ...

    async def json_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: JsonPatch
    ) -> Obj:
        """A JSON Patch (RFC 6902); its ``test`` operations are its guard."""
        ...

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None: ...
