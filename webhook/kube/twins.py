"""In-memory twins of the apiserver: for tests, the benchmarks and ``podium review`` (which
decides one admission offline, against objects read from a file).

One ``Store`` holds what an apiserver holds; each twin is a client of it::

    Store                 objects by (group, kind, namespace, name); one resourceVersion counter
    │                     for all of them; a history of changes per resource, for watches; the
    │                     kinds that are not installed (``missing_kinds``)
    ├── InMemoryObjects   ``protocols.Objects``, async: create, get, list, replace, merge_patch,
    │                     delete. ``InMemoryApi`` is the same class (``Objects`` extends ``Api``)
    └── InMemoryLister    ``protocols.Lister``, sync and thread-safe: list pages, watch streams

A twin made on its own gets a store of its own; pass ``store=`` to share one, so that what is
written through ``InMemoryObjects`` comes out of an ``InMemoryLister``'s watches.

What they do as the apiserver does (k8s.io/apiserver ``pkg/registry/generic/registry/store.go``
and the status reasons of k8s.io/apimachinery ``pkg/apis/meta/v1/types.go``):

* create sets uid, creationTimestamp and resourceVersion, and fails with ``AlreadyExists`` when
  the name is taken;
* replace, merge patch and delete fail with ``Conflict`` when the resourceVersion they carry (or
  delete's uid precondition) is not the stored one, and with ``NotFound`` when nothing is stored;
* every call on a kind in ``missing_kinds`` fails with ``NotFound`` (a CRD that is not installed);
* a watch replays the changes after its resourceVersion, or sends an ``ERROR`` event with code
  410 when that version is older than the last ``expire`` (compaction);
* label selectors are ``k=v`` terms joined by commas; a watch with a selector sees an object that
  stops matching as ``DELETED`` and one that starts matching as ``ADDED``;
* objects are copied on the way in and out, as a round trip through JSON would.

They differ where no test needs more: an object is listed and watched only at the apiVersion it
was written with; a list's continue token is an offset; selectors know no set operators.

Faults: a twin's ``fail(op, key)`` returns the error to raise instead of answering, or None.
``op`` is ``create``, ``get``, ``list``, ``replace``, ``patch``, ``delete`` or ``watch``; ``key``
is (group, kind, namespace, name), with an empty namespace and name for list and watch.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import jsonpointer
import orjson

from webhook.core import mergepatch
from webhook.core.objects import Obj, ObjectKey, group_of, key_of, metadata_of
from webhook.core.policies import Manifest
from webhook.kube import errors
from webhook.kube.protocols import JsonPatch, Page, Resource, WatchEvent, WatchStream

Fault = Callable[[str, ObjectKey], errors.ApiError | None]


def no_fault(_op: str, _key: ObjectKey) -> errors.ApiError | None:
    return None


def _copy(obj: Obj) -> dict[str, Any]:
    """A deep copy, as a round trip through the apiserver makes one: through JSON (orjson, ten
    times faster than ``copy.deepcopy``), or ``deepcopy`` for what orjson refuses."""
    try:
        copied: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    except TypeError:
        return copy.deepcopy(dict(obj))
    return copied


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _selected(obj: Obj, selector: str | None, fields: str | None = None) -> bool:
    """Whether ``obj``'s labels match ``selector`` (``k=v`` terms, all of them), and its
    metadata the field selector ``fields`` (``metadata.name=…``, ``metadata.namespace=…``)."""
    meta = metadata_of(obj)
    for term in (fields or "").split(",") if fields else ():
        path, sep, value = term.partition("=")
        field = path.strip().removeprefix("metadata.")
        if not sep or field not in ("name", "namespace") or path.strip() == field:
            raise ValueError(f"the twin understands metadata.name/namespace=v only, not {term!r}")
        if str(meta.get(field) or "") != value.removeprefix("=").strip():
            return False
    if not selector:
        return True
    have = meta.get("labels") or {}
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if not sep or key.endswith("!"):
            raise ValueError(f"the twin understands k=v selector terms only, not {term!r}")
        if have.get(key.strip()) != value.removeprefix("=").strip():
            return False
    return True


@dataclasses.dataclass(frozen=True, slots=True)
class _Change:
    resource_version: int
    type: str  # ADDED, MODIFIED or DELETED
    old: Obj | None
    new: Obj

    def seen_by(self, selector: str | None, fields: str | None = None) -> str | None:
        """The event type a watch with ``selector`` (and ``fields``) sees for this change."""
        now = _selected(self.new, selector, fields)
        if self.type != "MODIFIED":
            return self.type if now else None
        was = self.old is not None and _selected(self.old, selector, fields)
        if was and now:
            return "MODIFIED"
        if now:
            return "ADDED"
        return "DELETED" if was else None


def _gone_event() -> WatchEvent:
    """What the apiserver sends on a watch from a compacted resourceVersion."""
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410}
    return WatchEvent(
        "ERROR", {**status, "reason": "Expired", "message": "too old resource version"}
    )


class _Stream:
    """One watch: events queued by the store, read until the timeout, ``None`` or ``close``."""

    def __init__(self, resource: Resource, events: Iterable[WatchEvent], timeout: float) -> None:
        self.resource = resource
        self._queue: queue.Queue[WatchEvent | None] = queue.Queue()
        for event in events:
            self._queue.put(event)
        self._deadline = time.monotonic() + timeout
        self.closed = False

    def put(self, event: WatchEvent | None) -> None:
        self._queue.put(event)

    def __iter__(self) -> Iterator[WatchEvent]:
        while not self.closed:
            left = self._deadline - time.monotonic()
            if left <= 0:
                return
            try:
                event = self._queue.get(timeout=min(left, 0.05))
            except queue.Empty:
                continue
            if event is None:
                return
            yield event

    def close(self) -> None:
        self.closed = True
        self._queue.put(None)


def _stream_key(resource: Resource) -> tuple[str, str]:
    return resource.api_version, resource.kind


def _fields(resource: Resource) -> str | None:
    """The field selector a watch of ``resource`` filters by: its own, and its namespace's (a
    namespaced collection sees that namespace's objects only)."""
    terms = [
        resource.field_selector,
        resource.namespace and f"metadata.namespace={resource.namespace}",
    ]
    return ",".join(t for t in terms if t) or None


def _type_of(obj: Obj) -> tuple[str, str]:
    return str(obj.get("apiVersion", "")), str(obj.get("kind", ""))


class Store:
    """What an apiserver holds. Thread-safe; every method takes the lock for its whole work."""

    def __init__(self, objects: Iterable[Obj] = (), *, missing_kinds: Iterable[str] = ()) -> None:
        #: Stored objects by (group, kind, namespace, name); tests may read and edit them.
        self.objects: dict[ObjectKey, Obj] = {}
        #: Kinds whose resource type is not installed: every call on them answers 404.
        self.missing_kinds: set[str] = set(missing_kinds)
        #: The last resourceVersion handed out (one counter for all objects, as etcd's).
        self.resource_version = 0
        self.lock = threading.RLock()
        self._versions = itertools.count(1)
        self._history: dict[tuple[str, str], list[_Change]] = {}
        #: Watches from a resourceVersion below this get an ERROR 410 event.
        self._compacted: dict[tuple[str, str], int] = {}
        self._streams: list[_Stream] = []
        for obj in objects:
            self.put(obj)

    # -- writes, as the apiserver does them ------------------------------------------------------

    def _next_version(self) -> str:
        self.resource_version = next(self._versions)
        return str(self.resource_version)

    def _write(self, key: ObjectKey, doc: dict[str, Any], *, silently: bool = False) -> Obj:
        with self.lock:
            old = self.objects.get(key)
            doc["metadata"]["resourceVersion"] = self._next_version()
            self.objects[key] = doc
            if not silently:
                kind = "MODIFIED" if old is not None else "ADDED"
                self._append_change(_Change(self.resource_version, kind, old, doc))
            return _copy(doc)

    def put(self, obj: Obj, *, silently: bool = False) -> Obj:
        """Create or update ``obj`` as someone else would: no faults, no call recorded.
        ``silently`` skips the watch event, as if it were lost."""
        doc = _copy(obj)
        meta = doc.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        return self._write(key_of(doc), doc, silently=silently)

    def remove(self, key: ObjectKey, *, silently: bool = False) -> None:
        """Delete the object at ``key``; ``silently`` skips the watch event."""
        with self.lock:
            old = self.objects.pop(key)
            gone = _copy(old)
            gone.setdefault("metadata", {})["resourceVersion"] = self._next_version()
            if not silently:
                self._append_change(_Change(self.resource_version, "DELETED", old, gone))

    def check_installed(self, key: ObjectKey) -> None:
        if key[1] in self.missing_kinds:
            raise errors.NotFound(f"the server could not find the requested resource ({key[1]})")

    def _stored(self, key: ObjectKey) -> Obj:
        if key not in self.objects:
            raise errors.NotFound(f'{key[1]} "{key[3]}" not found')
        return self.objects[key]

    def _guard(self, key: ObjectKey, resource_version: str | None) -> Obj:
        stored = self._stored(key)
        if resource_version and stored["metadata"].get("resourceVersion") != resource_version:
            raise errors.Conflict(
                f'Operation cannot be fulfilled on {key[1]} "{key[3]}": the object has been '
                "modified; please apply your changes to the latest version and try again"
            )
        return stored

    def create(self, manifest: Manifest) -> Obj:
        key = key_of(manifest)
        with self.lock:
            if key in self.objects:
                raise errors.AlreadyExists(f'{key[1]} "{key[3]}" already exists')
            doc = _copy(manifest)
            meta = doc.setdefault("metadata", {})
            meta.pop("resourceVersion", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            return self._write(key, doc)

    def get(self, key: ObjectKey) -> Obj:
        with self.lock:
            return _copy(self._stored(key))

    def select(
        self, group: str, kind: str, *, namespace: str | None, label_selector: str | None
    ) -> list[Obj]:
        with self.lock:
            return [
                _copy(obj)
                for (g, k, ns, _), obj in sorted(self.objects.items())
                if (g, k) == (group, kind)
                and (namespace is None or ns == namespace)
                and _selected(obj, label_selector)
            ]

    def replace(self, manifest: Manifest) -> Obj:
        key = key_of(manifest)
        with self.lock:
            stored = self._guard(key, metadata_of(manifest).get("resourceVersion"))
            doc = _copy(manifest)
            doc["metadata"]["uid"] = stored["metadata"].get("uid")
            doc["metadata"]["creationTimestamp"] = stored["metadata"].get("creationTimestamp")
            return self._write(key, doc)

    def merge_patch(self, key: ObjectKey, patch: Manifest) -> Obj:
        with self.lock:
            stored = self._guard(key, metadata_of(patch).get("resourceVersion"))
            return self._write(key, _copy(mergepatch.apply(stored, patch)))

    def json_patch(self, key: ObjectKey, patch: JsonPatch) -> Obj:
        with self.lock:
            stored = self._stored(key)
            try:
                patched = jsonpatch.apply_patch(stored, patch)
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as err:
                raise errors.ApiError(f'{key[1]} "{key[3]}" is invalid: {err}') from err
            return self._write(key, _copy(patched))

    def delete(self, key: ObjectKey, *, uid: str | None, resource_version: str | None) -> None:
        with self.lock:
            stored = self._guard(key, resource_version)
            if uid and stored["metadata"].get("uid") != uid:
                raise errors.Conflict(
                    f"Precondition failed: UID in precondition: {uid}, "
                    f"UID in object meta: {stored['metadata'].get('uid')}"
                )
            self.remove(key)

    # -- watches ---------------------------------------------------------------------------------

    def _append_change(self, change: _Change) -> None:
        which = _type_of(change.new)
        self._history.setdefault(which, []).append(change)
        for stream in self._streams:
            if stream.closed or _stream_key(stream.resource) != which:
                continue
            seen = change.seen_by(stream.resource.label_selector, _fields(stream.resource))
            if seen is not None:
                stream.put(WatchEvent(seen, _copy(change.new)))

    def items(self, resource: Resource) -> list[dict[str, Any]]:
        """Copies of what a list of ``resource`` holds (at its apiVersion only), in name order."""
        selected = self.select(
            resource.group,
            resource.kind,
            namespace=resource.namespace,
            label_selector=resource.label_selector,
        )
        return [
            dict(obj)
            for obj in selected
            if obj.get("apiVersion") == resource.api_version
            and _selected(obj, None, resource.field_selector)
        ]

    def watch(self, resource: Resource, resource_version: str, timeout: float) -> _Stream:
        with self.lock:
            which = _stream_key(resource)
            since = int(resource_version or 0)
            if since < self._compacted.get(which, 0):
                stream = _Stream(resource, [_gone_event()], timeout)
            else:
                replay = []
                for change in self._history.get(which, ()):
                    seen = change.seen_by(resource.label_selector, _fields(resource))
                    if change.resource_version > since and seen is not None:
                        replay.append(WatchEvent(seen, _copy(change.new)))
                stream = _Stream(resource, replay, timeout)
            self._streams = [s for s in self._streams if not s.closed]
            self._streams.append(stream)
            return stream

    def send(self, resource: Resource, event: WatchEvent | None) -> None:
        """Put ``event`` on the open watches of ``resource``; ``None`` ends them."""
        with self.lock:
            for stream in self._streams:
                if not stream.closed and stream.resource == resource:
                    stream.put(event)

    def open_watches(self, resource: Resource) -> int:
        with self.lock:
            return sum(1 for s in self._streams if not s.closed and s.resource == resource)

    def bookmark(self, resource: Resource) -> str:
        """Send a BOOKMARK at a fresh resourceVersion to the open watches; return it."""
        with self.lock:
            rv = self._next_version()
            meta = {"resourceVersion": rv}
            doc = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}
            self.send(resource, WatchEvent("BOOKMARK", doc))
            return rv

    def expire(self, resource: Resource) -> None:
        """Compact the history: open watches get an ERROR 410 event, later watches from an older
        resourceVersion too (as the apiserver answers a too-old resourceVersion)."""
        with self.lock:
            which = _stream_key(resource)
            self._compacted[which] = self.resource_version
            self._history.pop(which, None)
            self.send(resource, _gone_event())


class InMemoryObjects:
    """``protocols.Objects`` over a ``Store``: optional ``delay`` per call, faults (``fail``),
    the calls made (``calls``: op, kind, name) and ``listeners`` told of every object created."""

    def __init__(
        self,
        *,
        store: Store | None = None,
        delay: float = 0.0,
        missing_kinds: Iterable[str] = (),
    ) -> None:
        self.store = store if store is not None else Store()
        self.store.missing_kinds.update(missing_kinds)
        self.delay = delay
        self.fail: Fault = no_fault
        self.calls: list[tuple[str, str, str]] = []
        self.listeners: list[Callable[[Obj], None]] = []

    @property
    def objects(self) -> dict[ObjectKey, Obj]:
        return self.store.objects

    @property
    def missing_kinds(self) -> set[str]:
        return self.store.missing_kinds

    def put(self, manifest: Manifest) -> Obj:
        """Store an object as if someone else created it (no faults, no call recorded)."""
        return self.store.put(manifest)

    async def _enter(self, op: str, key: ObjectKey) -> None:
        self.calls.append((op, key[1], key[3]))
        await asyncio.sleep(self.delay)
        if (err := self.fail(op, key)) is not None:
            raise err
        self.store.check_installed(key)

    async def _enter_at(
        self, op: str, api_version: str, kind: str, namespace: str, name: str
    ) -> ObjectKey:
        """``_enter`` for the object these arguments name; its key."""
        key = (group_of(api_version), kind, namespace, name)
        await self._enter(op, key)
        return key

    async def create(self, manifest: Manifest) -> Obj:
        await self._enter("create", key_of(manifest))
        created = self.store.create(manifest)
        for listener in self.listeners:
            listener(created)
        return created

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj:
        return self.store.get(await self._enter_at("get", api_version, kind, namespace, name))

    async def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        group = group_of(api_version)
        await self._enter("list", (group, kind, namespace or "", ""))
        return self.store.select(group, kind, namespace=namespace, label_selector=label_selector)

    async def replace(self, manifest: Manifest) -> Obj:
        await self._enter("replace", key_of(manifest))
        return self.store.replace(manifest)

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: Manifest
    ) -> Obj:
        key = await self._enter_at("patch", api_version, kind, namespace, name)
        return self.store.merge_patch(key, patch)

    async def json_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: JsonPatch
    ) -> Obj:
        key = await self._enter_at("patch", api_version, kind, namespace, name)
        return self.store.json_patch(key, patch)

    async def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        key = await self._enter_at("delete", api_version, kind, namespace, name)
        self.store.delete(key, uid=uid, resource_version=resource_version)


#: The twin of ``protocols.Api``: the ``Objects`` twin, of which admissions use create and get.
InMemoryApi = InMemoryObjects


class InMemoryLister:
    """``protocols.Lister`` over a ``Store``, seeded with ``objects``; faults (``fail``) and the
    calls made (``calls``: op, resource name, continue token or resourceVersion). The methods
    after the two calls change the "cluster" and its watches, as tests need."""

    def __init__(self, objects: Iterable[Obj] = (), *, store: Store | None = None) -> None:
        self.store = store if store is not None else Store()
        self.fail: Fault = no_fault
        self.calls: list[tuple[str, str, str | None]] = []
        for obj in objects:
            self.store.put(obj)

    @property
    def missing_kinds(self) -> set[str]:
        return self.store.missing_kinds

    def _enter(self, op: str, resource: Resource, detail: str | None) -> None:
        self.calls.append((op, resource.name, detail))
        key = (resource.group, resource.kind, "", "")
        if (err := self.fail(op, key)) is not None:
            raise err
        self.store.check_installed(key)

    def list(self, resource: Resource, *, limit: int, continue_: str | None) -> Page:
        with self.store.lock:
            self._enter("list", resource, continue_)
            items = self.store.items(resource)
            start = int(continue_ or 0)
            more = start + limit < len(items)
            page = items[start : start + limit]
            if not resource.group:  # list items of built-in types carry no kind; neither do these
                for doc in page:
                    doc.pop("kind", None)
                    doc.pop("apiVersion", None)
            token = str(start + limit) if more else None
            return Page(page, str(self.store.resource_version), token)

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> WatchStream:
        self._enter("watch", resource, resource_version)
        return self.store.watch(resource, resource_version, timeout_seconds)

    # -- changing the "cluster" ------------------------------------------------------------------

    def put(self, obj: Obj, *, silently: bool = False) -> None:
        """Create or update ``obj``; ``silently`` skips the watch event (as if it were lost)."""
        self.store.put(obj, silently=silently)

    def delete(self, obj: Obj, *, silently: bool = False) -> None:
        self.store.remove(key_of(obj), silently=silently)

    def bookmark(self, resource: Resource) -> str:
        return self.store.bookmark(resource)

    def expire(self, resource: Resource) -> None:
        self.store.expire(resource)

    def send(self, resource: Resource, event: WatchEvent) -> None:
        """Put ``event`` (e.g. an ``ERROR`` Status) on the open watches of ``resource``."""
        self.store.send(resource, event)

    def end_watches(self, resource: Resource) -> None:
        """End the open watches as a server timeout would."""
        self.store.send(resource, None)

    def open_watches(self, resource: Resource) -> int:
        return self.store.open_watches(resource)
