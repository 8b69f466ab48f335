"""The gate guard (issue 29, item 4): the ValidatingAdmissionPolicy and binding by which only
podium's own ServiceAccount removes podium's gate. The chart renders the same objects as
manifests/base (tests/test_chart.py); here: the policy names podium's gate and exactly the
ServiceAccount the install runs podium as, the binding guards the namespaces podium enforces in,
the values toggle removes both, and a canary guards its own namespaces as its own user. The
apiserver's refusal itself is tests/e2e/test_gate_guard.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.test_chart import chart, helm_binary
from tests.test_manifests import base_objects, by_key
from webhook.core import labels

Obj = dict[str, Any]
POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def guard(objects: dict[tuple[str, str, str], Obj], name: str = "podium") -> tuple[Obj, Obj]:
    return objects[(POLICY, "", f"{name}-gate")], objects[(BINDING, "", f"{name}-gate")]


def account(objects: dict[tuple[str, str, str], Obj]) -> str:
    ((_, namespace, name),) = [k for k in objects if k[0] == "ServiceAccount"]
    return f"system:serviceaccount:{namespace}:{name}"


def test_the_base_guards_podiums_gate_for_podiums_service_account() -> None:
    objects = by_key(base_objects())
    policy, binding = guard(objects)
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"].count(f"'{labels.HOLD_GATE}'") == 2  # was there, is gone
    (validation,) = policy["spec"]["validations"]
    assert validation["expression"] == f"request.userInfo.username == '{account(objects)}'"
    assert "podium release " in validation["messageExpression"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods"], ["UPDATE"])
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_binding_guards_the_namespaces_the_webhook_enforces_in() -> None:
    objects = by_key(base_objects())
    _, binding = guard(objects)
    (webhook,) = objects[("MutatingWebhookConfiguration", "", "podium")]["webhooks"]
    opted_in = webhook["namespaceSelector"]["matchExpressions"][0]
    (selected,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selected == {**opted_in, "values": [opted_in["values"][0]]}  # not the shadow value


def test_the_toggle_removes_the_policy_and_its_binding(helm: str) -> None:
    assert POLICY in {k[0] for k in chart(helm)}
    kinds = {k[0] for k in chart(helm, "--set", "gateGuard.enabled=false")}
    assert not {POLICY, BINDING} & kinds


def test_a_canary_guards_its_own_namespaces_as_its_own_user(helm: str) -> None:
    objects = chart(
        helm,
        "--namespace",
        "podium-canary",
        "--set",
        "namespaceLabel.value=canary",
        release="podium-canary",
    )
    policy, binding = guard(objects, "podium-canary")
    (validation,) = policy["spec"]["validations"]
    assert account(objects) == "system:serviceaccount:podium-canary:podium-canary"
    assert f"'{account(objects)}'" in validation["expression"]
    (selected,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selected["values"] == ["canary"]
