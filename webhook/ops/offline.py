"""``podium review``: one admission decided offline against a snapshot file, through the same
code path as the server (the API is an in-memory twin seeded with the snapshot)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook.core import reviews
from webhook.core.objects import Obj, key_of
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import twins
from webhook.serve import admission, audit


class InputError(ValueError):
    """An input or snapshot file podium cannot use; the message is one line for stderr."""


def load_documents(path: Path) -> list[Any]:
    """JSON, or YAML with one or more documents ('-' reads stdin)."""
    try:
        text = Path("/dev/stdin").read_text() if str(path) == "-" else path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read {path}: {err}") from err
    try:
        return [orjson.loads(text)]
    except orjson.JSONDecodeError:
        pass
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"{path} is neither JSON nor YAML: {first}") from err


def load_review(path: Path) -> dict[str, Any]:
    docs = load_documents(path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise InputError(f"{path} must hold one AdmissionReview or one Pod")
    doc = docs[0]
    if doc.get("kind") == "Pod" and doc.get("apiVersion") == "v1":
        return reviews.review_for_pod(doc)
    if doc.get("kind") == reviews.KIND:
        return doc
    raise InputError(
        f"{path} holds {doc.get('apiVersion')!r} {doc.get('kind')!r}, "
        "not an admission.k8s.io/v1 AdmissionReview or a v1 Pod"
    )


def load_snapshot_objects(path: Path) -> list[Obj]:
    """The objects of a v1 List (or any ``*List``), several documents, or a JSON array."""
    objects: list[Obj] = []
    for doc in load_documents(path):
        objects.extend(_flatten(doc, path))
    for obj in objects:
        if not isinstance(obj.get("metadata"), Mapping) or not (obj["metadata"]).get("name"):
            raise InputError(f"{path}: an object of kind {obj.get('kind')!r} has no metadata.name")
    return objects


def _flatten(doc: Any, path: Path) -> Iterable[Obj]:
    if isinstance(doc, list):
        for item in doc:
            yield from _flatten(item, path)
        return
    if not isinstance(doc, Mapping) or "kind" not in doc or "apiVersion" not in doc:
        raise InputError(f"{path}: every document must be a Kubernetes object or a List")
    if str(doc["kind"]).endswith("List") and isinstance(doc.get("items"), list):
        list_kind = str(doc["kind"])[: -len("List")]
        for item in doc["items"]:
            if not isinstance(item, Mapping):
                raise InputError(f"{path}: a List item is not an object")
            # `kubectl get pods -o yaml` items carry kind; typed lists from the API may not.
            if "kind" not in item and list_kind:
                yield from _flatten(
                    {"kind": list_kind, "apiVersion": doc["apiVersion"], **item}, path
                )
            else:
                yield from _flatten(item, path)
        return
    yield doc


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    response: dict[str, Any]
    patched: Obj | None
    side_effects: list[dict[str, Any]]
    record: audit.AuditRecord | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "response": self.response,
            "patchedObject": self.patched,
            "sideEffects": self.side_effects,
            "audit": self.record,
        }


async def review(
    review_doc: Mapping[str, Any], objects: Iterable[Obj], settings: Settings
) -> Result:
    """Decide one review against ``objects`` exactly as ``podium serve`` would."""
    objects = list(objects)
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label)
    api = twins.InMemoryApi()
    for obj in objects:
        api.objects[key_of(obj)] = obj
    sink = audit.MemorySink()
    admitter = admission.Admitter(view=lambda: view, api=api, settings=settings, sink=sink)
    answer = await admitter.admit(orjson.dumps(review_doc))
    if answer.status != 200:
        raise InputError(str(answer.body.get("error", "the review was rejected")))
    decision = answer.decision
    created = {
        (e["kind"], e["name"])
        for e in (answer.record["effects"] if answer.record else [])
        if e.get("outcome") == "created"
    }
    side_effects = [
        m
        for m in (decision.effects if decision else ())
        if (m["kind"], m["metadata"]["name"]) in created
    ]
    response = {**dict(review_doc), **answer.body}
    original = (review_doc.get("request") or {}).get("object")
    patched = decision.patched if decision and "patch" in answer.body["response"] else original
    return Result(response, patched, side_effects, answer.record)
