"""The watch cache: LIST then WATCH every resource podium reads, and keep a ClusterView current.

One worker thread per resource talks to the apiserver through a ``Lister`` (the real one is
``kubeapi.KubeLister``; ``InMemoryLister`` is its twin for tests). Events are handed to the
asyncio loop with ``call_soon_threadsafe``, so the ClusterView is only ever mutated on the loop
thread, in the order the apiserver sent them.

Per resource::

    LIST (paged) ──► WATCH from the list's resourceVersion (bookmarks on, server timeout) ──┐
      ▲   ▲                                                                                │
      │   └── 410 Gone (HTTP status or ERROR event): re-list, delete what the list lacks ◄─┤
      │                                                                                    │
      └── 404 on LIST (CRD not installed): retry every ``missing_retry`` s, not blocking   │
          readiness; connection errors: exponential backoff, capped; WATCH ends: re-watch ─┘

Exception tree of the ``Lister`` interface::

    ListerError        the call failed; retry with backoff (``status`` is the HTTP code, if any)
    ├── Gone           410: the resourceVersion is too old; re-list
    └── Missing        404: the resource type does not exist (a CRD that is not installed)
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import itertools
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol

from webhook.core.objects import EventType, Obj, group_of
from webhook.core.view import ClusterView

log = logging.getLogger("podium.cache")

MANAGED = "app.kubernetes.io/managed-by=podium"

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """One collection to list and watch across all namespaces."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    label_selector: str | None = None

    @property
    def group(self) -> str:
        return group_of(self.api_version)

    @property
    def name(self) -> str:
        """``pods``, ``pytorchjobs.kubeflow.org/v1``: how logs and readiness name it."""
        if not self.group:
            return self.plural
        return f"{self.plural}.{self.group}/{self.api_version.split('/', 1)[1]}"

    @property
    def path(self) -> str:
        """The collection's URL path across all namespaces."""
        prefix = f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"
        return f"{prefix}/{self.plural}"


#: Everything a decision reads: the cluster's shape, the jobs that own training pods, and
#: podium's own records and policies.
WATCHED: tuple[Resource, ...] = (
    Resource("v1", "Namespace", "namespaces", namespaced=False),
    Resource("v1", "Node", "nodes", namespaced=False),
    Resource("v1", "Pod", "pods"),
    *(
        Resource("kubeflow.org/v1", kind, kind.lower() + "s")
        for kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
    ),
    Resource("kubeflow.org/v2beta1", "MPIJob", "mpijobs"),
    Resource("batch/v1", "Job", "jobs"),
    Resource("apps/v1", "StatefulSet", "statefulsets"),
    Resource("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"),
    Resource("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs"),
    Resource("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets"),
    Resource("batch.volcano.sh/v1alpha1", "Job", "jobs"),
    Resource("ray.io/v1", "RayCluster", "rayclusters"),
    Resource("v1", "ConfigMap", "configmaps", label_selector=MANAGED),
    Resource(
        "cilium.io/v2", "CiliumNetworkPolicy", "ciliumnetworkpolicies", label_selector=MANAGED
    ),
    Resource("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", label_selector=MANAGED),
)


# -- the transport interface ---------------------------------------------------------------------


class ListerError(Exception):
    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Gone(ListerError):
    pass


class Missing(ListerError):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    resource_version: str
    #: The token for the next page; None on the last one.
    continue_: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str
    object: dict[str, Any]


class WatchStream(Protocol):
    """Events of one watch request; ``close`` may be called from another thread to end it."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def close(self) -> None: ...


class Lister(Protocol):
    """The two calls the cache makes. Implementations raise ``ListerError`` and nothing else."""

    def list(self, resource: Resource, *, limit: int, continue_: str | None) -> Page: ...

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> WatchStream: ...


# -- what is kept of each object -----------------------------------------------------------------

_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_POD_STATUS = ("phase", "conditions")
_NODE_STATUS = ("allocatable", "conditions")


def slim(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the snapshot keeps it: typed, without bookkeeping nobody reads.

    List items of built-in types arrive without ``apiVersion``/``kind``; the snapshot keys on
    them. A 3 KB pod kept whole costs ~20 KiB; the managed fields, the kubectl annotation and
    most of the status are the bulk of it, and of a node the image list.
    """
    obj["apiVersion"] = resource.api_version
    obj["kind"] = resource.kind
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(_LAST_APPLIED, None)
    keep = (
        {"Pod": _POD_STATUS, "Node": _NODE_STATUS}.get(resource.kind)
        if not resource.group
        else None
    )
    status = obj.get("status")
    if keep is not None and isinstance(status, dict):
        obj["status"] = {k: status[k] for k in keep if k in status}
    return obj


def _name_of(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rv_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


# -- the cache ------------------------------------------------------------------------------------

State = Literal["pending", "synced", "absent"]


@dataclasses.dataclass(slots=True)
class _Status:
    """Per resource, owned by the loop thread."""

    state: State = "pending"
    error: str | None = None
    #: (namespace, name) of what the snapshot holds for this resource: what a re-list replaces.
    names: set[tuple[str, str]] = dataclasses.field(default_factory=set)


class Backoff:
    """Exponential, capped, with jitter so many replicas do not reconnect in step."""

    def __init__(self, *, initial: float, cap: float) -> None:
        self.initial = initial
        self.cap = cap
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self._next = self.initial


class WatchCache:
    """Keeps ``snapshot`` current from ``lister``; ``ready`` once every present resource synced."""

    def __init__(
        self,
        snapshot: ClusterView,
        lister: Lister,
        *,
        resources: Sequence[Resource] = WATCHED,
        page_size: int = 500,
        watch_timeout: int = 240,
        missing_retry: float = 30.0,
        backoff_initial: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> None:
        self.snapshot = snapshot
        self.lister = lister
        self.resources = tuple(resources)
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.missing_retry = missing_retry
        self.backoff_initial = backoff_initial
        self.backoff_cap = backoff_cap
        self.ready = asyncio.Event()
        self._status = {r: _Status() for r in self.resources}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._streams: dict[Resource, WatchStream] = {}
        self._streams_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- reads (loop thread) ----------------------------------------------------------------

    def is_ready(self) -> bool:
        return self.ready.is_set()

    def pending(self) -> list[str]:
        """What readiness still waits for, e.g. ``pods: 403 forbidden``."""
        return [
            f"{r.name}: {s.error}" if s.error else r.name
            for r, s in self._status.items()
            if s.state == "pending"
        ]

    def absent(self) -> list[str]:
        """Resources whose type is not installed (404 on list); retried in the background."""
        return [r.name for r, s in self._status.items() if s.state == "absent"]

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start one worker per resource; call from the loop that serves admissions."""
        self._loop = asyncio.get_running_loop()
        self._update_ready()
        for resource in self.resources:
            thread = threading.Thread(
                target=self._run, args=(resource,), name=f"watch-{resource.name}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End every worker: open watches are closed, sleeping workers woken. Blocks up to
        ``timeout`` seconds in total; safe to call from any thread, more than once."""
        self._stopping.set()
        with self._streams_lock:
            streams = list(self._streams.values())
        for stream in streams:
            with contextlib.suppress(Exception):
                stream.close()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.warning("watch workers still running after stop: %s", ", ".join(alive))

    # -- the worker (one thread per resource) -----------------------------------------------

    def _run(self, resource: Resource) -> None:
        backoff = Backoff(initial=self.backoff_initial, cap=self.backoff_cap)
        resource_version: str | None = None
        fresh = False  # the watch starts from a version that a list has just returned
        while not self._stopping.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list(resource)
                    fresh = True
                started = time.monotonic()
                resource_version, seen = self._watch(resource, resource_version)
                fresh = False
                if seen or time.monotonic() - started > 1.0:
                    backoff.reset()
                else:  # a watch that ends at once, again and again, must not spin
                    self._stopping.wait(backoff.next())
            except Gone as err:
                log.info("%s: %s; re-listing", resource.name, err)
                resource_version = None
                if fresh:  # gone straight after a list: do not re-list in a tight loop
                    self._stopping.wait(backoff.next())
            except Missing:
                resource_version = None
                self._handoff(self._set_state, resource, "absent", None)
                self._stopping.wait(self.missing_retry)
            except ListerError as err:
                if self._stopping.is_set():
                    break
                delay = backoff.next()
                log.warning("%s: %s; retrying in %.1fs", resource.name, err, delay)
                self._handoff(self._set_error, resource, str(err))
                self._stopping.wait(delay)
            except _Stopped:
                break
            except Exception:  # a bug must not end the resource's worker for good
                delay = backoff.next()
                log.exception("%s: unexpected error; re-listing in %.1fs", resource.name, delay)
                resource_version = None
                self._stopping.wait(delay)

    def _list(self, resource: Resource) -> str:
        """List every page into the snapshot, then drop what the list no longer holds."""
        seen: set[tuple[str, str]] = set()
        continue_: str | None = None
        while True:
            page = self.lister.list(resource, limit=self.page_size, continue_=continue_)
            items = [slim(resource, item) for item in page.items]
            seen.update(_name_of(item) for item in items)
            self._handoff(self._apply_page, resource, items)
            if not page.continue_:
                break
            continue_ = page.continue_
        self._handoff(self._finish_list, resource, seen)
        log.info(
            "%s: listed %d at resourceVersion %s", resource.name, len(seen), page.resource_version
        )
        return page.resource_version

    def _watch(self, resource: Resource, resource_version: str) -> tuple[str, bool]:
        """Follow one watch request to its end; the resourceVersion to resume from, and whether
        anything arrived."""
        timeout = self.watch_timeout + random.randint(0, max(1, self.watch_timeout // 4))
        stream = self.lister.watch(
            resource, resource_version=resource_version, timeout_seconds=timeout
        )
        with self._streams_lock:
            self._streams[resource] = stream
        seen = False
        try:
            if self._stopping.is_set():
                raise _Stopped
            for event in stream:
                seen = True
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    obj = slim(resource, event.object)
                    resource_version = _rv_of(obj) or resource_version
                    self._handoff(self._apply_event, resource, event.type, obj)
                elif event.type == "BOOKMARK":
                    resource_version = _rv_of(event.object) or resource_version
                elif event.type == "ERROR":
                    raise _watch_error(event.object)
                if self._stopping.is_set():
                    raise _Stopped
        except ListerError:
            if self._stopping.is_set():
                raise _Stopped from None
            raise
        finally:
            with self._streams_lock:
                self._streams.pop(resource, None)
            with contextlib.suppress(Exception):
                stream.close()
        return resource_version, seen

    def _handoff(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError as err:  # the loop is closed: nobody is listening any more
            raise _Stopped from err

    # -- applied on the loop thread ---------------------------------------------------------

    def _apply_event(self, resource: Resource, event: EventType, obj: Obj) -> None:
        status = self._status[resource]
        if event == "DELETED":
            status.names.discard(_name_of(obj))
        else:
            status.names.add(_name_of(obj))
        self.snapshot.apply(event, obj)

    def _apply_page(self, resource: Resource, items: list[dict[str, Any]]) -> None:
        status = self._status[resource]
        for obj in items:
            status.names.add(_name_of(obj))
            self.snapshot.apply("MODIFIED", obj)

    def _finish_list(self, resource: Resource, seen: set[tuple[str, str]]) -> None:
        self._keep_only(resource, seen)
        self._set_state(resource, "synced", None)

    def _keep_only(self, resource: Resource, seen: set[tuple[str, str]]) -> None:
        """Delete from the snapshot what this resource held and a fresh list no longer has."""
        status = self._status[resource]
        for namespace, name in status.names - seen:
            meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
            gone = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}
            self.snapshot.apply("DELETED", gone)
        status.names = seen

    def _set_state(self, resource: Resource, state: State, error: str | None) -> None:
        status = self._status[resource]
        if state == "absent" and status.state != "absent":
            log.info(
                "%s: not installed (404); retrying every %gs", resource.name, self.missing_retry
            )
            self._keep_only(resource, set())  # the type went away (CRD deleted): its objects too
        status.state = state
        status.error = error
        self._update_ready()

    def _set_error(self, resource: Resource, error: str) -> None:
        self._status[resource].error = error

    def _update_ready(self) -> None:
        if all(s.state != "pending" for s in self._status.values()):
            if not self.ready.is_set():
                log.info("cache synced (%d resources absent)", len(self.absent()))
            self.ready.set()


class _Stopped(Exception):
    """The cache is stopping: the worker ends quietly."""


def _watch_error(status: Mapping[str, Any]) -> ListerError:
    code = status.get("code")
    message = str(status.get("message") or status.get("reason") or "watch error")
    if code == 410:
        return Gone(message, status=410)
    if code == 404:
        return Missing(message, status=404)
    return ListerError(message, status=code if isinstance(code, int) else None)


# -- the in-memory twin --------------------------------------------------------------------------


class _MemoryStream:
    def __init__(self, events: Iterable[WatchEvent], timeout: float) -> None:
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


class InMemoryLister:
    """A twin of the apiserver's list and watch: resourceVersions, history, compaction (410),
    missing types (404), scripted failures. Thread-safe; objects are copied on the way out."""

    def __init__(self, objects: Iterable[Obj] = (), *, resources: Sequence[Resource] = WATCHED):
        self.resources = tuple(resources)
        self._lock = threading.Lock()
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._store: dict[Resource, dict[tuple[str, str], dict[str, Any]]] = {
            r: {} for r in self.resources
        }
        self._history: dict[Resource, list[tuple[int, WatchEvent]]] = {
            r: [] for r in self.resources
        }
        #: Watches from a resourceVersion below this get an ERROR 410 event.
        self._compacted: dict[Resource, int] = dict.fromkeys(self.resources, 0)
        self._streams: dict[Resource, list[_MemoryStream]] = {r: [] for r in self.resources}
        self.missing: set[Resource] = set()
        #: Errors to raise from the next calls, per (call, resource), first first.
        self.failures: dict[tuple[str, Resource], list[ListerError]] = {}
        self.calls: list[tuple[str, str, str | None]] = []
        for obj in objects:
            self.put(obj)

    def resource_of(self, obj: Obj) -> Resource:
        for resource in self.resources:
            if (resource.api_version, resource.kind) == (obj.get("apiVersion"), obj.get("kind")):
                return resource
        raise KeyError(f"no watched resource for {obj.get('apiVersion')} {obj.get('kind')}")

    # -- changing the "cluster" ---------------------------------------------------------------

    def _stamp(self, obj: Obj) -> dict[str, Any]:
        rv = next(self._rv)
        self._last_rv = rv
        doc: dict[str, Any] = _deepcopy(obj)
        doc.setdefault("metadata", {})["resourceVersion"] = str(rv)
        return doc

    def _emit(self, resource: Resource, event: WatchEvent) -> None:
        rv = int(_rv_of(event.object) or self._last_rv)
        self._history[resource].append((rv, event))
        for stream in self._streams[resource]:
            stream.put(WatchEvent(event.type, _deepcopy(event.object)))

    def put(self, obj: Obj, *, silently: bool = False) -> None:
        """Create or update ``obj``; ``silently`` skips the watch event (as if it were lost)."""
        resource = self.resource_of(obj)
        with self._lock:
            doc = self._stamp(obj)
            key = _name_of(doc)
            event = "MODIFIED" if key in self._store[resource] else "ADDED"
            self._store[resource][key] = doc
            if not silently:
                self._emit(resource, WatchEvent(event, doc))

    def delete(self, obj: Obj, *, silently: bool = False) -> None:
        resource = self.resource_of(obj)
        with self._lock:
            key = _name_of(obj)
            old = self._store[resource].pop(key)
            doc = self._stamp(old)
            if not silently:
                self._emit(resource, WatchEvent("DELETED", doc))

    def bookmark(self, resource: Resource) -> str:
        """Send a BOOKMARK at a fresh resourceVersion to the open watches; return it."""
        with self._lock:
            rv = str(next(self._rv))
            self._last_rv = int(rv)
            event = WatchEvent(
                "BOOKMARK",
                {
                    "apiVersion": resource.api_version,
                    "kind": resource.kind,
                    "metadata": {"resourceVersion": rv},
                },
            )
            for stream in self._streams[resource]:
                stream.put(event)
            return rv

    def expire(self, resource: Resource) -> None:
        """Compact the history: open watches get an ERROR 410 event, later watches from an older
        resourceVersion too (as the apiserver answers a too-old resourceVersion)."""
        with self._lock:
            self._compacted[resource] = self._last_rv
            self._history[resource].clear()
            for stream in self._streams[resource]:
                stream.put(_gone_event())

    def end_watches(self, resource: Resource) -> None:
        """End the open watches as a server timeout would."""
        with self._lock:
            for stream in self._streams[resource]:
                stream.put(None)

    def open_watches(self, resource: Resource) -> int:
        with self._lock:
            return sum(1 for s in self._streams[resource] if not s.closed)

    # -- Lister --------------------------------------------------------------------------------

    def _fail(self, call: str, resource: Resource) -> None:
        pending = self.failures.get((call, resource))
        if pending:
            raise pending.pop(0)
        if resource in self.missing:
            raise Missing(
                f"the server could not find the requested resource ({resource.name})", status=404
            )

    def list(self, resource: Resource, *, limit: int, continue_: str | None) -> Page:
        with self._lock:
            self.calls.append(("list", resource.name, continue_))
            self._fail("list", resource)
            items = sorted(self._store[resource].items())
            start = int(continue_ or 0)
            chunk = items[start : start + limit]
            more = start + limit < len(items)
            docs = [_deepcopy(doc) for _, doc in chunk]
            for doc in docs:  # list items of built-in types carry no kind; neither do these
                if not resource.group:
                    doc.pop("kind", None)
                    doc.pop("apiVersion", None)
            return Page(docs, str(self._last_rv), str(start + limit) if more else None)

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> WatchStream:
        with self._lock:
            self.calls.append(("watch", resource.name, resource_version))
            self._fail("watch", resource)
            rv = int(resource_version or 0)
            if rv < self._compacted[resource]:
                stream = _MemoryStream([_gone_event()], timeout_seconds)
            else:
                replay = [
                    WatchEvent(e.type, _deepcopy(e.object))
                    for r, e in self._history[resource]
                    if r > rv
                ]
                stream = _MemoryStream(replay, timeout_seconds)
            self._streams[resource] = [s for s in self._streams[resource] if not s.closed]
            self._streams[resource].append(stream)
            return stream


def _gone_event() -> WatchEvent:
    return WatchEvent(
        "ERROR",
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "Expired",
            "message": "too old resource version",
            "code": 410,
        },
    )


def _deepcopy(obj: Obj) -> dict[str, Any]:
    return copy.deepcopy(dict(obj))
