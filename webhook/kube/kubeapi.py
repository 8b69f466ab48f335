"""The real Kubernetes API: ``effects.Api`` for admissions and ``cache.Lister`` for the watch cache.

Both go through the ``kubernetes`` client's ``ApiClient`` (its configuration, auth and TLS) with
raw JSON in and out: objects stay the camelCase dicts the apiserver sent (parsed with orjson),
never client model classes. The client is synchronous; admissions run it in a worker thread with
a request timeout, so a hung apiserver cannot hold a thread past the admission's budget.

Errors are mapped at this edge and nothing else escapes: for admissions 409 → ``AlreadyExists``,
404 → ``NotFound``, anything else (another status, a connection error, a timeout, a body that is
not JSON) → ``ApiError``; for the cache 410 → ``Gone``, 404 → ``Missing``, else ``ListerError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.watch.watch import iter_resp_lines

from webhook.core.objects import Obj, group_of
from webhook.core.policies import Manifest
from webhook.kube import cache
from webhook.serve import effects

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
    **{(r.group, r.kind): r.plural for r in cache.WATCHED if r.namespaced},
}


class ClientConfigError(RuntimeError):
    """No usable kubeconfig or in-cluster configuration."""


def load_client(kubeconfig: Path | None) -> k8s.ApiClient:
    """In-cluster configuration when no kubeconfig is given and podium runs in a pod, else the
    kubeconfig (``kubeconfig``, ``$KUBECONFIG`` or ``~/.kube/config``)."""
    configuration = k8s.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig else None,
                client_configuration=configuration,
            )
    except (k8s_config.ConfigException, OSError, ValueError, TypeError) as err:
        where = kubeconfig or "the in-cluster service account or ~/.kube/config"
        raise ClientConfigError(
            f"cannot load a Kubernetes configuration from {where}: {err}"
        ) from err
    # One connection per open watch, plus admissions' calls: the default pool (5 per CPU) is
    # smaller than the number of watches and would churn connections.
    configuration.connection_pool_maxsize = max(
        configuration.connection_pool_maxsize or 0, len(cache.WATCHED) + 32
    )
    return k8s.ApiClient(configuration)


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


def namespaced_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    prefix = f"/apis/{api_version}" if group_of(api_version) else f"/api/{api_version}"
    path = f"{prefix}/namespaces/{quote(namespace, safe='')}/{plural_of(api_version, kind)}"
    return f"{path}/{quote(name, safe='')}" if name is not None else path


def _message(status: int, data: bytes) -> str:
    """The apiserver's own words from a Status body, else the start of whatever came back."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and doc.get("message"):
        return f"{status}: {doc['message']}"
    text = data[:200].decode("utf-8", errors="replace").strip()
    return f"{status}: {text}" if text else f"HTTP {status}"


class _Transport:
    """Raw JSON requests over an ``ApiClient``. Raises only ``_HttpError`` and ``_Unreachable``."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float | tuple[float, float],
    ) -> Any:
        """Send the request; the raw urllib3 response, unread, after a 2xx status."""
        try:
            request = self.api_client.param_serialize(
                method,
                path,
                query_params=list((query or {}).items()),
                header_params={"Accept": "application/json", "Content-Type": "application/json"},
                body=dict(body) if body is not None else None,
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(*request, _request_timeout=timeout)
        except k8s.ApiException as err:  # e.g. a TLS failure, reported with status 0
            raise _Unreachable(f"{err.reason or err}".strip()) from err
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise _Unreachable(f"{type(err).__name__}: {err}") from err
        raw = response.response
        if not 200 <= response.status <= 299:
            try:
                data = raw.read()
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            finally:
                raw.release_conn()
            raise _HttpError(response.status, _message(response.status, data))
        return raw

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float | tuple[float, float],
    ) -> Any:
        """Send the request and parse the JSON answer."""
        raw = self.open(method, path, query=query, body=body, timeout=timeout)
        try:
            data = raw.read()
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise _Unreachable(f"{type(err).__name__}: {err}") from err
        finally:
            raw.release_conn()
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as err:
            raise _Unreachable(f"the answer is not JSON: {err}") from err


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Unreachable(Exception):
    pass


class KubeApi:
    """``effects.Api`` over the real apiserver."""

    def __init__(self, api_client: k8s.ApiClient, *, timeout: float = 2.0) -> None:
        self._transport = _Transport(api_client)
        #: Seconds one call may take, connection included (the admission's budget).
        self.timeout = timeout

    async def create(self, manifest: Manifest) -> Obj:
        meta = manifest.get("metadata") or {}
        path = namespaced_path(
            str(manifest.get("apiVersion", "")),
            str(manifest.get("kind", "")),
            str(meta.get("namespace") or ""),
        )
        return await self._call("POST", path, body=manifest)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj:
        return await self._call("GET", namespaced_path(api_version, kind, namespace, name))

    async def _call(self, method: str, path: str, *, body: Manifest | None = None) -> Obj:
        try:
            doc = await asyncio.to_thread(
                self._transport.request, method, path, body=body, timeout=self.timeout
            )
        except _HttpError as err:
            if err.status == 409:
                raise effects.AlreadyExists(str(err), status=409) from err
            if err.status == 404:
                raise effects.NotFound(str(err), status=404) from err
            raise effects.ApiError(str(err), status=err.status) from err
        except _Unreachable as err:
            raise effects.ApiError(f"{method} {path}: {err}") from err
        except Exception as err:  # the promise: ApiError and nothing else
            raise effects.ApiError(f"{method} {path}: {type(err).__name__}: {err}") from err
        if not isinstance(doc, dict):
            raise effects.ApiError(f"{method} {path}: the answer is not an object")
        return doc


class KubeLister:
    """``cache.Lister`` over the real apiserver."""

    def __init__(self, api_client: k8s.ApiClient, *, timeout: float = 30.0) -> None:
        self._transport = _Transport(api_client)
        #: Seconds one LIST page may take; a WATCH may stay silent this much past its own timeout.
        self.timeout = timeout

    def list(self, resource: cache.Resource, *, limit: int, continue_: str | None) -> cache.Page:
        query: dict[str, str | int] = {"limit": limit}
        if continue_:
            query["continue"] = continue_
        if resource.label_selector:
            query["labelSelector"] = resource.label_selector
        doc = self._call(resource, query=query, timeout=self.timeout)
        meta = doc.get("metadata") or {} if isinstance(doc, dict) else {}
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise cache.ListerError(f"{resource.name}: the list has no items")
        return cache.Page(
            items=[item for item in items if isinstance(item, dict)],
            resource_version=str(meta.get("resourceVersion") or ""),
            continue_=str(meta.get("continue") or "") or None,
        )

    def watch(
        self, resource: cache.Resource, *, resource_version: str, timeout_seconds: int
    ) -> cache.WatchStream:
        query: dict[str, str | int] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
        }
        if resource.label_selector:
            query["labelSelector"] = resource.label_selector
        # The server ends the watch after timeout_seconds; a read that hangs far longer than
        # that (bookmarks come about once a minute) means a dead connection.
        read_timeout = float(timeout_seconds) + self.timeout
        raw = self._call(resource, query=query, timeout=(self.timeout, read_timeout), stream=True)
        return _KubeStream(resource, raw)

    def _call(
        self,
        resource: cache.Resource,
        *,
        query: Mapping[str, str | int],
        timeout: float | tuple[float, float],
        stream: bool = False,
    ) -> Any:
        try:
            if stream:
                return self._transport.open("GET", resource.path, query=query, timeout=timeout)
            return self._transport.request("GET", resource.path, query=query, timeout=timeout)
        except _HttpError as err:
            message = f"{resource.name}: {err}"
            if err.status == 410:
                raise cache.Gone(message, status=410) from err
            if err.status == 404:
                raise cache.Missing(message, status=404) from err
            raise cache.ListerError(message, status=err.status) from err
        except _Unreachable as err:
            raise cache.ListerError(f"{resource.name}: {err}") from err
        except Exception as err:
            raise cache.ListerError(f"{resource.name}: {type(err).__name__}: {err}") from err


class _KubeStream:
    """One watch response, read line by line (one JSON event per line)."""

    def __init__(self, resource: cache.Resource, raw: Any) -> None:
        self.resource = resource
        self._raw = raw
        self._closed = False

    def __iter__(self) -> Iterator[cache.WatchEvent]:
        ended = False
        try:
            for line in iter_resp_lines(self._raw):  # type: ignore[no-untyped-call]
                if not line:
                    continue
                doc = orjson.loads(line)
                if not isinstance(doc, dict) or not isinstance(doc.get("object"), dict):
                    raise cache.ListerError(f"{self.resource.name}: a watch event without object")
                yield cache.WatchEvent(str(doc.get("type", "")), doc["object"])
            ended = not self._closed
        except cache.ListerError:
            raise
        except orjson.JSONDecodeError as err:
            raise cache.ListerError(f"{self.resource.name}: a watch event is not JSON") from err
        except Exception as err:  # connection reset, read timeout, or closed by ``close``
            raise cache.ListerError(f"{self.resource.name}: {type(err).__name__}: {err}") from err
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
