"""The real Kubernetes API, over one transport: ``KubeObjects`` (``protocols.Objects``, which
admissions use as ``protocols.Api``) and ``KubeLister`` (``protocols.Lister``, the watch cache's).

Both go through the ``kubernetes`` client's ``ApiClient`` (its configuration, auth and TLS) with
raw JSON in and out: objects stay the camelCase dicts the apiserver sent (parsed with orjson),
never client model classes. The client is synchronous; the object calls run it in a worker thread
with a request timeout, so a hung apiserver cannot hold a thread past the caller's budget.

Errors are mapped once, in ``_Transport``, through ``errors.error_for``, and nothing else escapes:
a status becomes ``NotFound``/``AlreadyExists``/``Conflict``/``Gone``/``ApiError``; a connection
error, a timeout or a body that is not JSON becomes an ``ApiError`` without a status. Every
message starts with the request (``GET /api/v1/pods: 403: pods is forbidden``).

This is the only module of podium that imports ``kubernetes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Required, TypedDict, Unpack
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.watch.watch import iter_resp_lines

from webhook.core.objects import Obj, group_of, metadata_of
from webhook.core.policies import Manifest
from webhook.kube import cache, errors
from webhook.kube.protocols import JsonPatch, Page, Resource, WatchEvent, WatchStream

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# -- where objects live -------------------------------------------------------------------------

#: (group, kind) → plural of the kinds podium creates or reads; no discovery on the hot path.
PLURALS: Mapping[tuple[str, str], str] = {
    ("", "ConfigMap"): "configmaps",
    ("", "Pod"): "pods",
    ("", "Service"): "services",
    ("", "Event"): "events",
    ("cilium.io", "CiliumNetworkPolicy"): "ciliumnetworkpolicies",
    ("networking.k8s.io", "NetworkPolicy"): "networkpolicies",
    ("batch", "Job"): "jobs",
    ("apps", "StatefulSet"): "statefulsets",
    **{(r.group, r.kind): r.plural for r in cache.WATCHED},
}


def plural_of(api_version: str, kind: str) -> str:
    """The resource name of a kind: known ones from ``PLURALS``, others by the rule CRDs follow
    unless they say otherwise (lower case, plus ``s``/``es``/``ies``)."""
    known = PLURALS.get((group_of(api_version), kind))
    if known:
        return known
    lower = kind.lower()
    if lower.endswith(("s", "x", "z", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    return lower + "s"


def path(
    api_version: str,
    kind: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    plural: str | None = None,
) -> str:
    """The URL path of a collection or an object::

        /api/v1/pods                          every namespace's (or a cluster-scoped kind's)
        /api/v1/namespaces/ns/pods            one namespace's
        /api/v1/namespaces/ns/pods/p          one object
        /api/v1/nodes/n                       one cluster-scoped object (no namespace)
        /apis/cilium.io/v2/namespaces/ns/ciliumnetworkpolicies/p

    ``plural`` when the caller knows it (a ``Resource``), else ``plural_of``."""
    prefix = f"/apis/{api_version}" if group_of(api_version) else f"/api/{api_version}"
    if namespace:
        prefix = f"{prefix}/namespaces/{quote(namespace, safe='')}"
    collection = f"{prefix}/{plural or plural_of(api_version, kind)}"
    return f"{collection}/{quote(name, safe='')}" if name is not None else collection


def path_of_resource(resource: Resource) -> str:
    """The path a ``Resource`` is listed and watched at: across all namespaces, or in its own."""
    return path(
        resource.api_version, resource.kind, namespace=resource.namespace, plural=resource.plural
    )


# -- the configuration --------------------------------------------------------------------------


class ClientConfigError(RuntimeError):
    """No usable kubeconfig or in-cluster configuration."""


def load_client(
    kubeconfig: Path | None = None,
    context: str | None = None,
    *,
    serving: bool = True,
    watches: int = len(cache.WATCHED),
) -> k8s.ApiClient:
    """In a pod (and neither a kubeconfig nor a context named) its service account, else the
    kubeconfig (``kubeconfig``, ``$KUBECONFIG`` or ``~/.kube/config``) at ``context`` or its
    current context. ``serving``: sized for ``podium serve``'s watches; otherwise (a command
    run by hand) connection errors are not retried, so the command says so at once."""
    configuration = k8s.Configuration()
    if kubeconfig is not None and not kubeconfig.exists():
        # The client's own words would be "Invalid kube-config file", which sends people looking
        # for a syntax error in a file that is not there.
        raise ClientConfigError(f"kubeconfig {kubeconfig} not found")
    in_cluster = (
        kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST")
    )
    from_env = _kubeconfig_from_env() if kubeconfig is None and not in_cluster else None
    try:
        if in_cluster:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig else from_env,
                context=context,
                client_configuration=configuration,
            )
    except (k8s_config.ConfigException, OSError, ValueError, TypeError) as err:
        where = str(kubeconfig) if kubeconfig else "$KUBECONFIG or ~/.kube/config"
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ClientConfigError(
            f"cannot load a Kubernetes configuration from {where}: {detail}"
        ) from err
    if serving:
        # One connection per open watch (``watches``: more with writable-namespaces, three per
        # namespace), plus admissions' calls: the default pool (5 per CPU) is smaller than the
        # number of watches and would churn connections.
        configuration.connection_pool_maxsize = max(
            configuration.connection_pool_maxsize or 0, watches + 32
        )
    else:
        configuration.retries = 0
    return k8s.ApiClient(configuration)


def _kubeconfig_from_env() -> str | None:
    """``$KUBECONFIG`` as kubectl reads it, now (the client reads it once, when imported): a
    list of files, merged, of which only those that exist count; none existing is an error
    that names them, as for ``--kubeconfig``."""
    value = os.environ.get("KUBECONFIG")
    if not value:
        return None
    paths = [p for p in value.split(os.pathsep) if p]
    if paths and not any(Path(p).expanduser().exists() for p in paths):
        raise ClientConfigError(f"kubeconfig {', '.join(paths)} (from $KUBECONFIG) not found")
    return value


# -- the transport ------------------------------------------------------------------------------


def _status_message(status: int, data: bytes) -> str:
    """The apiserver's own words from a Status body, else the start of whatever came back."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("message"):
        return f"{status}: {doc['message']}"
    text = data[:200].decode("utf-8", errors="replace").strip()
    return f"{status}: {text}" if text else f"HTTP {status}"


class _CallOptions(TypedDict, total=False):
    """What one request carries besides its method and path (``_Transport.open``)."""

    query: Mapping[str, str | int] | None
    body: Mapping[str, Any] | JsonPatch | None
    content_type: str
    guarded: bool


class _Options(_CallOptions, total=False):
    timeout: Required[float | tuple[float, float]]


class _Transport:
    """Raw JSON requests over an ``ApiClient``. Raises ``errors.ApiError`` (or a subclass) only."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Mapping[str, Any] | JsonPatch | None = None,
        content_type: str = JSON,
        timeout: float | tuple[float, float],
        guarded: bool = False,
    ) -> Any:
        """Send the request; the raw urllib3 response, unread, after a 2xx status. ``guarded``:
        the request carries a resourceVersion or preconditions (409 means ``Conflict``)."""
        where = f"{method} {path}"
        try:
            request = self.api_client.param_serialize(
                method,
                path,
                query_params=list((query or {}).items()),
                header_params={"Accept": JSON, "Content-Type": content_type},
                body=dict(body) if isinstance(body, Mapping) else body,
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(*request, _request_timeout=timeout)
        except k8s.ApiException as err:  # e.g. a TLS failure, reported with status 0
            raise errors.ApiError(f"{where}: {err.reason or err}".strip()) from err
        except Exception as err:  # connection refused or reset, a timeout: no status
            raise errors.ApiError(f"{where}: {type(err).__name__}: {err}") from err
        raw = response.response
        if not 200 <= response.status <= 299:
            try:
                data = raw.read()
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            finally:
                raw.release_conn()
            message = f"{where}: {_status_message(response.status, data)}"
            raise errors.error_for(response.status, message, guarded=guarded)
        return raw

    def request(self, method: str, path: str, **options: Unpack[_Options]) -> dict[str, Any]:
        """Send the request (``open``'s options) and parse the answer, which must be a JSON
        object."""
        raw = self.open(method, path, **options)
        where = f"{method} {path}"
        try:
            data = raw.read()
        except Exception as err:
            raise errors.ApiError(f"{where}: {type(err).__name__}: {err}") from err
        finally:
            raw.release_conn()
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as err:
            raise errors.ApiError(f"{where}: the answer is not JSON: {err}") from err
        if not isinstance(doc, dict):
            raise errors.ApiError(f"{where}: the answer is not an object")
        return doc


# -- the object calls ---------------------------------------------------------------------------


class KubeObjects:
    """``protocols.Objects`` (and so ``protocols.Api``) over the real apiserver."""

    def __init__(self, api_client: k8s.ApiClient, *, timeout: float = 10.0) -> None:
        self._transport = _Transport(api_client)
        #: Seconds one call may take, connection included (an admission passes its budget).
        self.timeout = timeout

    async def create(self, manifest: Manifest, *, dry_run: bool = False) -> Obj:
        """``dry_run``: the apiserver validates and defaults the object, drops the fields its
        feature gates do not serve, and answers with it, but stores nothing (``dryRun=All``)."""
        meta = metadata_of(manifest)
        where = path(
            str(manifest.get("apiVersion", "")),
            str(manifest.get("kind", "")),
            namespace=str(meta.get("namespace") or ""),
        )
        query = {"dryRun": "All"} if dry_run else None
        return await self._call("POST", where, body=manifest, query=query)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj:
        return await self._call("GET", path(api_version, kind, namespace=namespace, name=name))

    async def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        """Every page; items typed with ``api_version`` and ``kind`` (list items of built-in
        types come without)."""
        where = path(api_version, kind, namespace=namespace)
        query: dict[str, str | int] = {"limit": 500}
        if label_selector:
            query["labelSelector"] = label_selector
        items: list[Obj] = []
        while True:
            doc = await self._call("GET", where, query=query)
            for item in doc.get("items") or []:
                if isinstance(item, dict):
                    items.append({**item, "apiVersion": api_version, "kind": kind})
            token = metadata_of(doc).get("continue") or None
            if not token:
                return items
            query["continue"] = token

    async def replace(self, manifest: Manifest) -> Obj:
        meta = metadata_of(manifest)
        where = path(
            str(manifest["apiVersion"]),
            str(manifest["kind"]),
            namespace=str(meta["namespace"]),
            name=meta["name"],
        )
        return await self._call("PUT", where, body=manifest, guarded=True)

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: Manifest
    ) -> Obj:
        where = path(api_version, kind, namespace=namespace, name=name)
        return await self._call("PATCH", where, body=patch, content_type=MERGE_PATCH, guarded=True)

    async def json_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: JsonPatch
    ) -> Obj:
        where = path(api_version, kind, namespace=namespace, name=name)
        return await self._call("PATCH", where, body=patch, content_type=JSON_PATCH, guarded=True)

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
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
        where = path(api_version, kind, namespace=namespace, name=name)
        await self._call("DELETE", where, body=body, guarded=True)

    async def _call(
        self, method: str, where: str, **options: Unpack[_CallOptions]
    ) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(
                self._transport.request, method, where, timeout=self.timeout, **options
            )
        except errors.ApiError:
            raise
        except Exception as err:  # the promise: ApiError and nothing else
            raise errors.ApiError(f"{method} {where}: {type(err).__name__}: {err}") from err


# -- the lister ---------------------------------------------------------------------------------


class KubeLister:
    """``protocols.Lister`` over the real apiserver; called from the watch cache's threads."""

    def __init__(self, api_client: k8s.ApiClient, *, timeout: float = 30.0) -> None:
        self._transport = _Transport(api_client)
        #: Seconds one LIST page may take; a WATCH may stay silent this much past its own timeout.
        self.timeout = timeout

    def list(self, resource: Resource, *, limit: int, continue_: str | None) -> Page:
        where = path_of_resource(resource)
        query: dict[str, str | int] = {"limit": limit}
        if continue_:
            query["continue"] = continue_
        query.update(_selectors(resource))
        doc = self._transport.request("GET", where, query=query, timeout=self.timeout)
        meta = metadata_of(doc)
        items = doc.get("items")
        if not isinstance(items, list):
            raise errors.ApiError(f"GET {where}: the list has no items")
        return Page(
            items=[item for item in items if isinstance(item, dict)],
            resource_version=str(meta.get("resourceVersion") or ""),
            continue_=str(meta.get("continue") or "") or None,
        )

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> WatchStream:
        where = path_of_resource(resource)
        query: dict[str, str | int] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            **_selectors(resource),
        }
        # The server ends the watch after timeout_seconds; a read that hangs far longer than
        # that (bookmarks come about once a minute) means a dead connection.
        read_timeout = float(timeout_seconds) + self.timeout
        raw = self._transport.open("GET", where, query=query, timeout=(self.timeout, read_timeout))
        return _KubeStream(f"GET {where}", raw)


def _selectors(resource: Resource) -> dict[str, str]:
    """The query parameters of a resource's label and field selectors, where it has them."""
    named = {"labelSelector": resource.label_selector, "fieldSelector": resource.field_selector}
    return {key: value for key, value in named.items() if value}


class _KubeStream:
    """One watch response, read line by line (one JSON event per line)."""

    def __init__(self, where: str, raw: Any) -> None:
        self.where = where
        self._raw = raw
        self._closed = False

    def __iter__(self) -> Iterator[WatchEvent]:
        ended = False
        try:
            for line in iter_resp_lines(self._raw):  # type: ignore[no-untyped-call]
                if not line:
                    continue
                doc = orjson.loads(line)
                if not isinstance(doc, dict) or not isinstance(doc.get("object"), dict):
                    raise errors.ApiError(f"{self.where}: a watch event without object")
                yield WatchEvent(str(doc.get("type", "")), doc["object"])
            ended = not self._closed
        except errors.ApiError:
            raise
        except orjson.JSONDecodeError as err:
            raise errors.ApiError(f"{self.where}: a watch event is not JSON") from err
        except Exception as err:  # connection reset, read timeout, or closed by ``close``
            raise errors.ApiError(f"{self.where}: {type(err).__name__}: {err}") from err
        finally:
            self._release(reuse=ended)

    def close(self) -> None:
        """End the watch from any thread: shutting the socket down wakes a blocked read (closing
        it could wait on a lock the reading thread holds)."""
        self._closed = True
        sock = getattr(getattr(self._raw, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _release(self, *, reuse: bool) -> None:
        """A response read to its end gives its connection back to the pool; one abandoned
        midway (or shut down by ``close``) must not be reused."""
        with contextlib.suppress(Exception):
            if reuse:
                self._raw.release_conn()
            else:
                self._raw.close()
