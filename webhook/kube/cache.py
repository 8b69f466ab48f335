"""The watch cache: LIST then WATCH every resource podium reads, and keep a ClusterView current.

One worker thread per resource talks to the apiserver through a ``protocols.Lister`` (the real
one is ``client.KubeLister``; ``twins.InMemoryLister`` is its twin for tests). Events are handed
to the asyncio loop with ``call_soon_threadsafe``, so the ClusterView is only ever mutated on the
loop thread, in the order the apiserver sent them.

Per resource::

    LIST (paged) ──► WATCH from the list's resourceVersion (bookmarks on, server timeout) ──┐
      ▲   ▲                                                                                │
      │   └── 410 Gone (HTTP status or ERROR event): re-list, delete what the list lacks ◄─┤
      │                                                                                    │
      └── 404 on LIST (CRD not installed): retry every ``missing_retry`` s, not blocking   │
          readiness; connection errors: exponential backoff, capped; WATCH ends: re-watch ─┘

What the lister raises (``errors``): ``Gone`` → re-list; ``NotFound`` → the resource type does
not exist (a CRD that is not installed); any other ``ApiError`` → retry with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal

from webhook.core import adapters, buffers, policies
from webhook.core.objects import EventType, Obj, group_of, metadata_of
from webhook.core.view import ClusterView
from webhook.kube import errors
from webhook.kube.protocols import Lister, Resource, WatchStream

log = logging.getLogger("podium.cache")

MANAGED = "app.kubernetes.io/managed-by=podium"

#: The installed CiliumNetworkPolicy CRD, one object (kept slim: ``policies.slim_crd``): whether
#: its schema knows ``enableDefaultDeny`` decides whether podium may write its policy at all.
#: Optional: a cluster without Cilium, or RBAC without the rule, must not hold readiness back.
CILIUM_CRD = Resource(
    policies.CRD_API_VERSION,
    policies.CRD_KIND,
    "customresourcedefinitions",
    namespaced=False,
    field_selector=f"metadata.name={policies.CILIUM_CRD}",
    optional=True,
)

#: podium's CapacityBuffers (``capacity-buffers: on``, ``core.buffers``). Optional: a cluster
#: without the CRD (no Karpenter, no Cluster Autoscaler that serves it) holds nothing back.
BUFFERS = Resource(
    buffers.API_VERSION, buffers.KIND, "capacitybuffers", label_selector=MANAGED, optional=True
)

#: Everything a decision reads: the cluster's shape, what the framework adapters read (the jobs
#: that own training pods and the objects between; each adapter declares its own), and
#: podium's own records and policies.
WATCHED: tuple[Resource, ...] = (
    Resource("v1", "Namespace", "namespaces", namespaced=False),
    Resource("v1", "Node", "nodes", namespaced=False),
    Resource("v1", "Pod", "pods"),
    *(Resource(k.api_version, k.kind, k.plural, namespaced=k.namespaced) for k in adapters.KINDS),
    Resource("v1", "ConfigMap", "configmaps", label_selector=MANAGED),
    Resource(
        "cilium.io/v2", "CiliumNetworkPolicy", "ciliumnetworkpolicies", label_selector=MANAGED
    ),
    Resource("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", label_selector=MANAGED),
    CILIUM_CRD,
    BUFFERS,
)

#: podium's own objects among ``WATCHED``: its records, policies and CapacityBuffers, which it
#: reads where it writes them (the chart's ClusterRole podium-writer).
OWN: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "ConfigMap"),
        ("cilium.io", "CiliumNetworkPolicy"),
        ("networking.k8s.io", "NetworkPolicy"),
        (group_of(buffers.API_VERSION), buffers.KIND),
    }
)


def watched(writable_namespaces: Collection[str] = ()) -> tuple[Resource, ...]:
    """``WATCHED``; with ``writable_namespaces`` (the chart's ``rbac.scope: namespaced``, where
    podium may read and write its own objects in those namespaces only) each of podium's own
    kinds is watched in each of those namespaces instead of across all of them."""
    if not writable_namespaces:
        return WATCHED
    out: list[Resource] = []
    for resource in WATCHED:
        if (resource.group, resource.kind) in OWN:
            out += [
                dataclasses.replace(resource, namespace=ns) for ns in sorted(writable_namespaces)
            ]
        else:
            out.append(resource)
    return tuple(out)


# -- what is kept of each object -----------------------------------------------------------------

_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_POD_STATUS = ("phase", "conditions")
_NODE_STATUS = ("allocatable", "conditions")


def slim(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the view keeps it: typed, without bookkeeping nobody reads.

    List items of built-in types arrive without ``apiVersion``/``kind``; the view keys on
    them. A 3 KB pod kept whole costs ~20 KiB; the managed fields, the kubectl annotation and
    most of the status are the bulk of it, and of a node the image list.
    """
    obj["apiVersion"] = resource.api_version
    obj["kind"] = resource.kind
    if resource.kind == policies.CRD_KIND:
        return policies.slim_crd(obj)
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
    meta = metadata_of(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rv_of(obj: Obj) -> str:
    return str(metadata_of(obj).get("resourceVersion") or "")


# -- the cache ------------------------------------------------------------------------------------

#: Watched kinds that are not a pod's owner of interest: a read-through never fetches these.
_NOT_OWNERS = frozenset({("", "Namespace"), ("", "Node"), ("", "Pod")})

State = Literal["pending", "synced", "absent"]


@dataclasses.dataclass(slots=True)
class _Status:
    """Per resource, owned by the loop thread."""

    state: State = "pending"
    error: str | None = None
    #: (namespace, name) of what the view holds for this resource: what a re-list replaces.
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
    """Keeps ``view`` current from ``lister``; ``ready`` once every present resource synced."""

    def __init__(
        self,
        view: ClusterView,
        lister: Lister,
        *,
        resources: Sequence[Resource] = WATCHED,
        page_size: int = 500,
        watch_timeout: int = 240,
        missing_retry: float = 30.0,
        backoff_initial: float = 0.5,
        backoff_cap: float = 30.0,
    ) -> None:
        self.view = view
        self.lister = lister
        self.resources = tuple(resources)
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.missing_retry = missing_retry
        self.backoff_initial = backoff_initial
        self.backoff_cap = backoff_cap
        self.ready = asyncio.Event()
        #: Called with each watch event once the view holds it (on the loop thread); a
        #: listener must be quick. One that raises is logged, and the others still run.
        self.listeners: list[Callable[[EventType, Obj], None]] = []
        self._status = {r: _Status() for r in self.resources}
        # What a read-through may fetch: the kinds between a pod and its job, watched whole.
        self._owners = {
            (r.api_version, r.kind): r
            for r in self.resources
            if (r.group, r.kind) not in _NOT_OWNERS and not (r.label_selector or r.field_selector)
        }
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
            if s.state == "pending" and not r.optional
        ]

    def absent(self) -> list[str]:
        """Resources whose type is not installed (404 on list); retried in the background."""
        return [r.name for r, s in self._status.items() if s.state == "absent"]

    def owner_resource(self, api_version: str, kind: str) -> Resource | None:
        """The watched resource of a kind that owns training pods (a job, or an object between a
        job and its pods), unfiltered: what a read-through may fetch and keep."""
        return self._owners.get((api_version, kind))

    def remember(self, resource: Resource, obj: dict[str, Any]) -> None:
        """Keep an object read outside the watch (a read-through after a miss) as a watch event
        would; the watch's own event for it replaces it when it comes."""
        self._apply_event(resource, "ADDED", slim(resource, obj))

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
            except errors.Gone as err:
                log.info("%s: %s; re-listing", resource.name, err)
                resource_version = None
                if fresh:  # gone straight after a list: do not re-list in a tight loop
                    self._stopping.wait(backoff.next())
            except errors.NotFound:
                resource_version = None
                self._handoff(self._set_state, resource, "absent", None)
                self._stopping.wait(self.missing_retry)
            except errors.ApiError as err:
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
        """List every page into the view, then drop what the list no longer holds."""
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
        except errors.ApiError:
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
        self.view.apply(event, obj)
        for listener in self.listeners:
            try:
                listener(event, obj)
            except Exception:
                log.exception("a listener of the %s watch failed", resource.name)

    def _apply_page(self, resource: Resource, items: list[dict[str, Any]]) -> None:
        status = self._status[resource]
        for obj in items:
            status.names.add(_name_of(obj))
            self.view.apply("MODIFIED", obj)

    def _finish_list(self, resource: Resource, seen: set[tuple[str, str]]) -> None:
        self._keep_only(resource, seen)
        self._set_state(resource, "synced", None)

    def _keep_only(self, resource: Resource, seen: set[tuple[str, str]]) -> None:
        """Delete from the view what this resource held and a fresh list no longer has."""
        status = self._status[resource]
        for namespace, name in status.names - seen:
            meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
            gone = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}
            self.view.apply("DELETED", gone)
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
        if all(s.state != "pending" or r.optional for r, s in self._status.items()):
            if not self.ready.is_set():
                log.info("cache synced (%d resources absent)", len(self.absent()))
            self.ready.set()


class _Stopped(Exception):
    """The cache is stopping: the worker ends quietly."""


def _watch_error(status: Mapping[str, Any]) -> errors.ApiError:
    """The error an ``ERROR`` watch event's Status stands for (410: the resourceVersion expired)."""
    code = status.get("code")
    message = str(status.get("message") or status.get("reason") or "watch error")
    return errors.error_for(code if isinstance(code, int) else None, message)
