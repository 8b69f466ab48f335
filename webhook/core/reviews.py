"""AdmissionReview in and out: parse a request strictly, build a response that the apiserver takes.

Parsing raises ``ReviewError`` with a reason a person can act on; nothing else escapes.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from webhook.core.objects import Obj, is_mapping, metadata_of

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
#: The apiserver truncates longer warnings; keep each one readable in full.
MAX_WARNING = 240
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


class ReviewError(ValueError):
    """The body is not a usable admission.k8s.io/v1 AdmissionReview request."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    uid: str
    kind: Mapping[str, str]
    resource: Mapping[str, str]
    sub_resource: str
    namespace: str
    name: str
    operation: str
    user: Mapping[str, Any]
    object: Obj | None
    old_object: Obj | None
    dry_run: bool

    @property
    def is_pod(self) -> bool:
        return self.kind.get("group", "") == "" and self.kind.get("kind") == "Pod"


def _strings(value: Mapping[str, Any]) -> Mapping[str, str]:
    """``value`` with every value a string (as the apiserver sends it: then ``value`` itself)."""
    for v in value.values():  # a loop, not all(genexpr): this runs twice at every admission
        if type(v) is not str:
            return {k: str(v) for k, v in value.items()}
    return value


def _str(value: Any, what: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ReviewError(
            f"request.{what} must be a non-empty string"
            if required
            else f"request.{what} must be a string"
        )
    return value


def _map(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not is_mapping(value):
        raise ReviewError(f"request.{what} must be an object")
    return value


def parse(body: bytes) -> Request:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise ReviewError(f"body is not JSON: {err}") from err
    return from_document(doc)


def from_document(doc: Any) -> Request:
    if not is_mapping(doc):
        raise ReviewError("body must be a JSON object")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise ReviewError(
            f"expected apiVersion {API_VERSION} kind {KIND}, got "
            f"{doc.get('apiVersion')!r} {doc.get('kind')!r}"
        )
    req = doc.get("request")
    if not is_mapping(req):
        raise ReviewError("the review has no request object")
    operation = _str(req.get("operation"), "operation", required=True)
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation {operation!r} is not one of {sorted(OPERATIONS)}")
    obj = req.get("object")
    if obj is not None and not is_mapping(obj):
        raise ReviewError("request.object must be an object or null")
    if obj is not None:
        _check_object(obj)
    old = req.get("oldObject")
    if old is not None and not is_mapping(old):
        raise ReviewError("request.oldObject must be an object or null")
    dry_run = req.get("dryRun", False)
    if dry_run is None:
        dry_run = False
    if not isinstance(dry_run, bool):
        raise ReviewError("request.dryRun must be a boolean")
    return Request(
        uid=_str(req.get("uid"), "uid", required=True),
        kind=_strings(_map(req.get("kind"), "kind")),
        resource=_strings(_map(req.get("resource"), "resource")),
        sub_resource=_str(req.get("subResource"), "subResource"),
        namespace=_str(req.get("namespace"), "namespace"),
        name=_str(req.get("name"), "name"),
        operation=operation,
        user=_map(req.get("userInfo"), "userInfo"),
        object=obj,
        old_object=old,
        dry_run=dry_run,
    )


def _check_object(obj: Mapping[str, Any]) -> None:
    """The shapes every later step relies on. The apiserver always sends them right; a hand-made
    review that does not gets a 400 that names the field, rather than a fail-open."""
    meta = obj.get("metadata", {})
    if not is_mapping(meta):
        raise ReviewError("request.object.metadata must be an object")
    for field in ("labels", "annotations"):
        if not _string_map(meta.get(field) or {}):
            raise ReviewError(f"request.object.metadata.{field} must map strings to strings")
    refs = meta.get("ownerReferences") or []
    if not isinstance(refs, list) or not all(is_mapping(r) for r in refs):
        raise ReviewError("request.object.metadata.ownerReferences must be a list of objects")
    spec = obj.get("spec", {})
    if not is_mapping(spec):
        raise ReviewError("request.object.spec must be an object")
    for field in ("containers", "initContainers"):
        _check_containers(spec.get(field), f"request.object.spec.{field}")


def _string_map(values: object) -> bool:
    if not is_mapping(values):
        return False
    for k, v in values.items():  # noqa: SIM110 - a loop, not all(genexpr): at every admission
        if type(k) is not str or type(v) is not str:
            return False
    return True


def _check_containers(containers: Any, what: str) -> None:
    """A pod's containers as resource sums read them: a list of objects, each with its
    ``resources`` (if any) an object of ``limits`` and ``requests`` objects."""
    if containers is None:
        return
    # Loops, not all(genexpr): this runs at every admission.
    if not isinstance(containers, list):
        raise ReviewError(f"{what} must be a list of objects (containers)")
    for container in containers:
        if not is_mapping(container):
            raise ReviewError(f"{what} must be a list of objects (containers)")
    for index, container in enumerate(containers):
        res = container.get("resources")
        if res is None:
            continue
        if (
            not is_mapping(res)
            or not is_mapping(res.get("limits") or {})
            or not is_mapping(res.get("requests") or {})
        ):
            raise ReviewError(
                f"{what}[{index}].resources must be an object with limits and requests objects"
            )


def request_uid(body: bytes) -> str:
    """The request uid if it can be read at all, so even an error answer can echo it."""
    try:
        doc = orjson.loads(body)
        uid = doc["request"]["uid"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""
    return uid if isinstance(uid, str) else ""


def response(
    *,
    uid: str,
    patch: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[str] = (),
    audit_annotations: Mapping[str, str] | None = None,
    allowed: bool = True,
    message: str | None = None,
    code: int | None = None,
) -> dict[str, Any]:
    """A complete AdmissionReview answer; a patch always goes with its patchType."""
    resp: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode()
    if warnings:
        resp["warnings"] = [
            w if len(w) <= MAX_WARNING else w[: MAX_WARNING - 1] + "…" for w in warnings
        ]
    if audit_annotations:
        resp["auditAnnotations"] = dict(audit_annotations)
    if message is not None or code is not None:
        status: dict[str, Any] = {}
        if message is not None:
            status["message"] = message
        if code is not None:
            status["code"] = code
        resp["status"] = status
    return {"apiVersion": API_VERSION, "kind": KIND, "response": resp}


def review_for_pod(
    pod: Obj, *, uid: str = "offline-review", dry_run: bool = False
) -> dict[str, Any]:
    """An AdmissionReview that creates ``pod`` in its namespace, as the apiserver would send it."""
    meta = metadata_of(pod)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta.get("name") or "",
            "namespace": meta.get("namespace") or "default",
            "operation": "CREATE",
            "userInfo": {"username": "podium-review"},
            "object": dict(pod),
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
