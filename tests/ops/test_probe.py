"""``podium probe`` (webhook/ops/probe.py), the chart's `helm test` command: against podium's own
app over HTTP in-process for the answer, against a fake server for what can go wrong, and any
JSON answer is judged without a traceback. Over TLS against a real podium:
tests/e2e/test_chart_probe.py."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.kube.apiserver import FakeApiServer, FakeHandler, closed_port, running
from webhook.core import reviews
from webhook.ops import probe
from webhook.ops.cli import app


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with running() as fake:
        yield fake


def answering(server: FakeApiServer, make: Any) -> list[dict[str, Any]]:
    """Route POST /mutate to ``make(review) -> (status, body)``; the reviews received."""
    received: list[dict[str, Any]] = []

    def route(h: FakeHandler, _p: str, _q: dict[str, list[str]], body: bytes) -> None:
        review = json.loads(body)
        received.append(review)
        status, answer = make(review)
        h.reply(status, answer, raw=answer if isinstance(answer, bytes) else None)

    server.routes[("POST", "/mutate")] = route
    return received


def uid_of(review: dict[str, Any]) -> str:
    return str(review["request"]["uid"])


def test_a_good_answer_passes_and_the_review_is_a_dry_run(server: FakeApiServer) -> None:
    patch = base64.b64encode(b'[{"op": "add", "path": "/x", "value": 1}]').decode()
    received = answering(
        server,
        lambda r: (
            200,
            {
                **reviews.response(uid=uid_of(r), warnings=["w"]),
                "response": {
                    "uid": uid_of(r),
                    "allowed": True,
                    "patchType": "JSONPatch",
                    "patch": patch,
                    "warnings": ["held"],
                },
            },
        ),
    )
    answer = probe.probe(f"{server.url}/mutate", namespace="ml")
    assert answer.patch_operations == 1 and answer.warnings == ("held",)
    (review,) = received
    request = review["request"]
    assert request["dryRun"] is True
    assert request["operation"] == "CREATE"
    assert request["namespace"] == "ml" and request["object"]["metadata"]["namespace"] == "ml"
    assert answer.uid == request["uid"]
    # podium's own parser accepts what the probe sends
    assert reviews.from_document(review).dry_run is True


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda r: (200, reviews.response(uid="other")), "not "),
        (lambda r: (200, reviews.response(uid=uid_of(r), allowed=False, message="no")), "refused"),
        (lambda r: (500, {"detail": "boom"}), "HTTP 500"),
        (lambda r: (200, b"<html>"), "not JSON"),
        (lambda r: (200, {"apiVersion": "v1", "kind": "Status"}), "is not an admission.k8s.io/v1"),
        (
            lambda r: (200, {**reviews.response(uid=uid_of(r)), "response": None}),
            "has no response",
        ),
        (
            lambda r: (
                200,
                {
                    **reviews.response(uid=uid_of(r)),
                    "response": {"uid": uid_of(r), "allowed": True, "patch": "!!"},
                },
            ),
            "patchType",
        ),
    ],
    ids=["wrong-uid", "refused", "http-500", "not-json", "not-a-review", "no-response", "patch"],
)
def test_a_wrong_answer_fails_with_words(server: FakeApiServer, make: Any, says: str) -> None:
    answering(server, make)
    with pytest.raises(probe.ProbeError) as failed:
        probe.probe(f"{server.url}/mutate")
    assert says in str(failed.value)


def test_the_command_exits_1_with_one_line_and_0_on_success(server: FakeApiServer) -> None:
    runner = CliRunner()
    with closed_port() as port:
        result = runner.invoke(app, ["probe", f"http://127.0.0.1:{port}/mutate"])
    assert result.exit_code == 1
    assert "cannot reach podium" in result.output and "Connection refused" in result.output
    assert "Errno" not in result.output and "Traceback" not in result.output
    answering(server, lambda r: (200, reviews.response(uid=uid_of(r))))
    result = runner.invoke(app, ["probe", f"{server.url}/mutate"])
    assert result.exit_code == 0, result.output
    assert "allowed the dry-run review" in result.output and "(no patch)" in result.output


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


PATCH = st.builds(lambda doc: base64.b64encode(json.dumps(doc).encode()).decode(), JSON)


@given(
    response=st.fixed_dictionaries(
        {},
        optional={
            "uid": st.just("u") | JSON,
            "allowed": st.just(True) | JSON,
            "patchType": st.just("JSONPatch") | JSON,
            "patch": PATCH | JSON,
            "warnings": JSON,
            "status": JSON,
        },
    ),
    top=st.dictionaries(st.text(), JSON, max_size=3),
)
def test_any_answer_is_judged_without_a_traceback(response: dict[str, Any], top: Any) -> None:
    doc = {**top, "apiVersion": reviews.API_VERSION, "kind": reviews.KIND, "response": response}
    for candidate in (doc, top, response.get("uid"), [doc]):
        try:
            operations, warnings = probe.check(candidate, "u")
        except probe.ProbeError:
            continue
        assert operations >= 0 and all(isinstance(w, str) for w in warnings)
