"""AdmissionReview in and out, as k8s.io/api ``admission/v1/types.go`` defines it
(AdmissionRequest, AdmissionResponse: ``patchType`` with ``patch``, ``warnings``,
``auditAnnotations``, ``status``)."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import PodBuilder
from webhook.core import reviews


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def review(**request: Any) -> dict[str, Any]:
    doc = reviews.review_for_pod(PodBuilder("team-a", name="p").obj(), uid="u-1")
    doc["request"].update(request)
    return doc


def test_a_pod_creation_parses_into_a_request() -> None:
    pod = PodBuilder("team-a", name="p").label("a", "b").obj()
    request = reviews.parse(body(reviews.review_for_pod(pod, uid="u-1", dry_run=True)))
    assert request == reviews.Request(
        uid="u-1",
        kind={"group": "", "version": "v1", "kind": "Pod"},
        resource={"group": "", "version": "v1", "resource": "pods"},
        sub_resource="",
        namespace="team-a",
        name="p",
        operation="CREATE",
        user={"username": "podium-review"},
        object=pod,
        old_object=None,
        dry_run=True,
    )
    assert request.is_pod


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{", "body is not JSON"),
        (body([]), "body must be a JSON object"),
        (body({**review(), "apiVersion": "admission.k8s.io/v1beta1"}), "expected apiVersion"),
        (body({**review(), "request": None}), "no request object"),
        (body(review(uid="")), "request.uid must be a non-empty string"),
        (body(review(operation="PATCH")), "request.operation 'PATCH' is not one of"),
        (body(review(object=[])), "request.object must be an object or null"),
        (body(review(oldObject="x")), "request.oldObject must be an object or null"),
        (body(review(dryRun="yes")), "request.dryRun must be a boolean"),
        (body(review(kind="Pod")), "request.kind must be an object"),
        (body(review(object={"metadata": []})), "request.object.metadata must be an object"),
    ],
)
def test_an_unusable_review_is_refused_with_the_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(reviews.ReviewError, match=reason):
        reviews.parse(raw)


@given(st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_parse_raises_nothing_but_review_errors(raw: bytes) -> None:
    with contextlib.suppress(reviews.ReviewError):
        reviews.parse(raw)


def test_the_request_uid_is_read_even_from_an_unusable_review() -> None:
    assert reviews.request_uid(body(review(operation="PATCH"))) == "u-1"
    assert reviews.request_uid(b"not json") == ""


def test_a_response_carries_its_patch_with_the_patch_type() -> None:
    patch = [{"op": "add", "path": "/metadata/labels/a", "value": "b"}]
    answer = reviews.response(
        uid="u-1", patch=patch, warnings=["w" * 300], audit_annotations={"zone": "a"}
    )
    resp = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert (resp["uid"], resp["allowed"], resp["patchType"]) == ("u-1", True, "JSONPatch")
    assert json.loads(base64.b64decode(resp["patch"])) == patch
    assert len(resp["warnings"][0]) == reviews.MAX_WARNING
    assert resp["auditAnnotations"] == {"zone": "a"}
    assert "status" not in resp


def test_a_denial_says_why() -> None:
    resp = reviews.response(uid="u", allowed=False, message="no", code=403)["response"]
    assert resp == {"uid": "u", "allowed": False, "status": {"message": "no", "code": 403}}
