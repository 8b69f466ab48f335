"""The harness's one apiserver client: the official ``kubernetes`` client's `ApiClient`, loaded
from the cluster's kubeconfig, for plain requests and for watches (streamed responses)."""

from __future__ import annotations

import contextlib
import copy
import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s

from webhook.kube.client import load_client

__all__ = ["FIELD_MANAGER", "Api", "ApiError", "ControlPlaneError"]

FIELD_MANAGER = "podium-e2e"
_JSON = "application/json"


class ControlPlaneError(RuntimeError):
    """A component failed to start, exited, or a wait timed out."""


class ApiError(RuntimeError):
    """The apiserver answered a request with a non-2xx status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")


def _payload(body: Any, content_type: str) -> Any:
    """The body as the client serializes it: objects as JSON; text of a JSON (or YAML apply)
    content type parsed first, since the client JSON-encodes whatever it gets for those."""
    if isinstance(body, bytes):
        body = body.decode()
    if isinstance(body, str) and ("json" in content_type or "yaml" in content_type):
        return json.loads(body) if "json" in content_type else yaml.safe_load(body)
    return body


class Api:
    """Requests as the admin of one cluster (or, `unverified`, to one of its components)."""

    def __init__(self, client: k8s.ApiClient, *, verify: bool = True) -> None:
        self.client = client
        self._verify = verify
        self._discovery: dict[str, list[dict[str, Any]]] = {}

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path) -> Api:
        return cls(load_client(kubeconfig, serving=True))

    def unverified(self, port: int) -> Api:
        """The same admin credentials sent to ``https://127.0.0.1:port`` without checking its
        certificate: kube-scheduler and kube-controller-manager serve on self-signed ones made in
        memory, and authorize the admin through the apiserver (delegated authn/authz)."""
        configuration = copy.copy(self.client.configuration)
        configuration.host = f"https://127.0.0.1:{port}"
        configuration.verify_ssl = False
        return Api(k8s.ApiClient(configuration), verify=False)

    def open(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = _JSON,
        timeout: float | None = 30.0,
        accept: str = _JSON,
    ) -> urllib3.BaseHTTPResponse:
        """Send one request; the unread response after a 2xx status (a watch streams from it).

        Raises `ApiError` for another status and `ConnectionError` when there is no answer.
        """
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        with contextlib.ExitStack() as stack:
            if not self._verify:
                stack.enter_context(warnings.catch_warnings())
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            try:
                request = self.client.param_serialize(
                    method,
                    path,
                    query_params=list((query or {}).items()),
                    header_params=headers,
                    body=_payload(body, content_type),
                    auth_settings=["BearerToken"],
                )
                response = self.client.call_api(*request, _request_timeout=timeout)
            except (k8s.ApiException, urllib3.exceptions.HTTPError) as error:
                raise ConnectionError(f"{method} {path}: {error}") from error
        raw: urllib3.BaseHTTPResponse = response.response
        if not 200 <= response.status <= 299:
            try:
                text = raw.read().decode(errors="replace")
            finally:
                raw.release_conn()
            raise ApiError(method, path, response.status, text)
        return raw

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = _JSON,
        parse: bool = True,
        timeout: float = 30.0,
        accept: str = _JSON,
    ) -> Any:
        """One request; the decoded JSON answer (or its text, ``parse=False``)."""
        raw = self.open(
            method,
            path,
            body,
            query=query,
            content_type=content_type,
            timeout=timeout,
            accept=accept,
        )
        try:
            text = raw.read().decode(errors="replace")
        except urllib3.exceptions.HTTPError as error:
            raise ConnectionError(f"{method} {path}: {error}") from error
        finally:
            raw.release_conn()
        if not parse:
            return text
        return json.loads(text) if text else None

    def exists(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def apply(self, obj: Mapping[str, Any], *, subresource: str = "") -> Any:
        """Server-side apply one object (created if missing) with force; return the result."""
        path = self.object_path(obj) + (f"/{subresource}" if subresource else "")
        return self.request(
            "PATCH",
            path,
            obj,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    def object_path(self, obj: Mapping[str, Any]) -> str:
        """The REST path of ``obj``, its resource found by discovery (cached)."""
        api_version: str = obj["apiVersion"]
        kind: str = obj["kind"]
        metadata: Mapping[str, Any] = obj["metadata"]
        prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        matches = self._resources(prefix, kind, cached=True) or self._resources(prefix, kind)
        if not matches:
            raise ControlPlaneError(f"no resource for kind {kind} in {api_version}")
        resource = matches[0]
        namespace = ""
        if resource["namespaced"]:
            namespace = f"/namespaces/{metadata.get('namespace', 'default')}"
        return f"{prefix}{namespace}/{resource['name']}/{metadata['name']}"

    def _resources(self, prefix: str, kind: str, *, cached: bool = False) -> list[dict[str, Any]]:
        if not cached or prefix not in self._discovery:
            try:
                self._discovery[prefix] = self.request("GET", prefix)["resources"]
            except ApiError as error:
                if error.status != 404:
                    raise
                self._discovery[prefix] = []
        return [r for r in self._discovery[prefix] if r["kind"] == kind and "/" not in r["name"]]

    def close(self) -> None:
        self.client.close()  # type: ignore[no-untyped-call]
