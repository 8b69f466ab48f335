"""The calls beyond create/get that the reconciler, leader election and ``podium doctor`` make:
list, guarded replace, merge patch and guarded delete — real (``KubeObjects``) and twin
(``InMemoryObjects``).

Every write is guarded by the object's ``resourceVersion`` (replace and patch carry it in the
body; delete sends it as a precondition), so a write based on a stale read fails with
``Conflict`` instead of undoing somebody else's change.

Exception tree (extends ``effects``)::

    effects.ApiError
    ├── effects.AlreadyExists   409 on create
    ├── effects.NotFound        404: the object or its resource type is not there
    └── Conflict                409 on replace/patch/delete: the resourceVersion moved on
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson
import urllib3
from kubernetes import client as k8s

from webhook.core.objects import Obj, group_of
from webhook.core.policies import Manifest
from webhook.kube import kubeapi
from webhook.serve import effects

MERGE_PATCH = "application/merge-patch+json"


class Conflict(effects.ApiError):
    pass


class Objects(effects.Api, Protocol):
    """``effects.Api`` plus what keeping objects right needs. Raises ``effects.ApiError`` only."""

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


def collection_path(api_version: str, kind: str, namespace: str | None) -> str:
    """The collection's path: one namespace, or across all of them when ``namespace`` is None."""
    if namespace is not None:
        return kubeapi.namespaced_path(api_version, kind, namespace)
    prefix = f"/apis/{api_version}" if group_of(api_version) else f"/api/{api_version}"
    return f"{prefix}/{kubeapi.plural_of(api_version, kind)}"


class KubeObjects(kubeapi.KubeApi):
    """``Objects`` over the real apiserver, raw JSON in and out like ``kubeapi.KubeApi``."""

    def __init__(self, api_client: k8s.ApiClient, *, timeout: float = 10.0) -> None:
        super().__init__(api_client, timeout=timeout)
        self._client = api_client

    async def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        query = {"labelSelector": label_selector} if label_selector else {}
        items: list[Obj] = []
        token: str | None = None
        while True:
            page_query = {**query, "limit": "500", **({"continue": token} if token else {})}
            doc = await self._send(
                "GET", collection_path(api_version, kind, namespace), query=page_query
            )
            for item in doc.get("items") or []:
                if isinstance(item, dict):
                    items.append({**item, "apiVersion": api_version, "kind": kind})
            token = (doc.get("metadata") or {}).get("continue") or None
            if not token:
                return items

    async def replace(self, manifest: Manifest) -> Obj:
        meta = manifest.get("metadata") or {}
        path = kubeapi.namespaced_path(
            str(manifest["apiVersion"]), str(manifest["kind"]), str(meta["namespace"]), meta["name"]
        )
        return await self._send("PUT", path, body=manifest, conflict=True)

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: Manifest
    ) -> Obj:
        path = kubeapi.namespaced_path(api_version, kind, namespace, name)
        return await self._send("PATCH", path, body=patch, content_type=MERGE_PATCH, conflict=True)

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
        path = kubeapi.namespaced_path(api_version, kind, namespace, name)
        await self._send("DELETE", path, body=body, conflict=True)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Manifest | None = None,
        content_type: str = "application/json",
        conflict: bool = False,
    ) -> Obj:
        try:
            status, data = await asyncio.to_thread(
                self._request, method, path, query, body, content_type
            )
        except Exception as err:  # the promise: ApiError and nothing else
            raise effects.ApiError(f"{method} {path}: {type(err).__name__}: {err}") from err
        if not 200 <= status <= 299:
            message = f"{method} {path}: {kubeapi._message(status, data)}"
            if status == 409:
                raise (Conflict if conflict else effects.AlreadyExists)(message, status=409)
            if status == 404:
                raise effects.NotFound(message, status=404)
            raise effects.ApiError(message, status=status)
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as err:
            raise effects.ApiError(f"{method} {path}: the answer is not JSON") from err
        if not isinstance(doc, dict):
            raise effects.ApiError(f"{method} {path}: the answer is not an object")
        return doc

    def _request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Manifest | None,
        content_type: str,
    ) -> tuple[int, bytes]:
        request = self._client.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._client.call_api(*request, _request_timeout=self.timeout)
        except k8s.ApiException as err:
            raise ConnectionError(f"{err.reason or err}".strip()) from err
        raw = response.response
        try:
            return int(response.status), bytes(raw.read())
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ConnectionError(f"{type(err).__name__}: {err}") from err
        finally:
            raw.release_conn()


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


Key = tuple[str, str, str, str]


class InMemoryObjects:
    """A twin of the apiserver for ``Objects``: resourceVersions, preconditions, label selectors
    (``k=v`` terms only), optional faults through ``fail(op, key)``."""

    def __init__(self, *, missing_kinds: frozenset[str] = frozenset()) -> None:
        self.objects: dict[Key, dict[str, Any]] = {}
        self.missing_kinds = missing_kinds
        self.fail: Callable[[str, Key], effects.ApiError | None] = lambda _op, _key: None
        self.calls: list[tuple[str, str, str]] = []
        self._versions = itertools.count(1)

    @staticmethod
    def _key(api_version: str, kind: str, namespace: str, name: str) -> Key:
        return group_of(api_version), kind, namespace, name

    def _check(self, op: str, key: Key) -> None:
        self.calls.append((op, key[1], key[3]))
        if (err := self.fail(op, key)) is not None:
            raise err
        if key[1] in self.missing_kinds:
            raise effects.NotFound(f"the server could not find the resource ({key[1]})", status=404)

    def _stored(self, key: Key) -> dict[str, Any]:
        if key not in self.objects:
            raise effects.NotFound(f"{key[1]} {key[3]!r} not found", status=404)
        return self.objects[key]

    def _guard(self, key: Key, resource_version: str | None) -> dict[str, Any]:
        stored = self._stored(key)
        if resource_version and stored["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(f"{key[1]} {key[3]!r} was modified", status=409)
        return stored

    def _save(self, key: Key, obj: dict[str, Any]) -> Obj:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def put(self, manifest: Manifest) -> Obj:
        """Store an object as if someone else created it (no faults, no call recorded)."""
        meta = manifest["metadata"]
        key = self._key(
            manifest["apiVersion"], manifest["kind"], meta.get("namespace", ""), meta["name"]
        )
        obj = copy.deepcopy(manifest)
        obj["metadata"].setdefault("uid", str(uuid.uuid4()))
        obj["metadata"].setdefault(
            "creationTimestamp", datetime.now(UTC).isoformat(timespec="seconds")
        )
        return self._save(key, obj)

    async def create(self, manifest: Manifest) -> Obj:
        meta = manifest["metadata"]
        key = self._key(
            manifest["apiVersion"], manifest["kind"], meta.get("namespace", ""), meta["name"]
        )
        self._check("create", key)
        if key in self.objects:
            raise effects.AlreadyExists(f"{key[1]} {key[3]!r} already exists", status=409)
        obj = copy.deepcopy(manifest)
        obj["metadata"].pop("resourceVersion", None)
        return self.put(obj)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj:
        key = self._key(api_version, kind, namespace, name)
        self._check("get", key)
        return copy.deepcopy(self._stored(key))

    async def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Obj]:
        key = self._key(api_version, kind, namespace or "", "")
        self._check("list", key)
        wanted = dict(term.split("=", 1) for term in (label_selector or "").split(",") if term)
        return [
            copy.deepcopy(obj)
            for (group, k, ns, _), obj in sorted(self.objects.items())
            if (group, k) == key[:2]
            and (namespace is None or ns == namespace)
            and all(
                (obj["metadata"].get("labels") or {}).get(lk) == lv for lk, lv in wanted.items()
            )
        ]

    async def replace(self, manifest: Manifest) -> Obj:
        meta = manifest["metadata"]
        key = self._key(
            manifest["apiVersion"], manifest["kind"], meta.get("namespace", ""), meta["name"]
        )
        self._check("replace", key)
        stored = self._guard(key, meta.get("resourceVersion"))
        obj = copy.deepcopy(manifest)
        obj["metadata"]["uid"] = stored["metadata"]["uid"]
        obj["metadata"]["creationTimestamp"] = stored["metadata"].get("creationTimestamp")
        return self._save(key, obj)

    async def merge_patch(
        self, api_version: str, kind: str, namespace: str, name: str, patch: Manifest
    ) -> Obj:
        key = self._key(api_version, kind, namespace, name)
        self._check("patch", key)
        stored = self._guard(key, (patch.get("metadata") or {}).get("resourceVersion"))
        merged = _merge(stored, patch)
        return self._save(key, merged)

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
        key = self._key(api_version, kind, namespace, name)
        self._check("delete", key)
        stored = self._guard(key, resource_version)
        if uid and stored["metadata"]["uid"] != uid:
            raise Conflict(f"{key[1]} {key[3]!r} has another uid", status=409)
        del self.objects[key]
