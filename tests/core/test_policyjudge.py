"""Cilium's policy semantics as ``podium doctor`` judges them (webhook/core/policyjudge.py): the
selectors, identities and label filter, ports, and a job's traffic. That they agree with Cilium's
own engine is tests/cilium/test_doctor_agrees.py (it needs the oracle)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import PodBuilder, namespace
from tests.scenarios import NS
from webhook.core import policyjudge as pj

SELECTORS = [
    ({}, {"app": "x"}, True),
    ({"matchLabels": {"app": "x"}}, {"app": "x"}, True),
    ({"matchLabels": {"k8s:app": "x"}}, {"app": "x"}, True),
    ({"matchLabels": {"any:app": "x"}}, {"app": "y"}, False),
    ({"matchLabels": {"reserved:host": ""}}, {"app": "x"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}, {"app": "x"}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, {"app": "x"}, False),
    (
        {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
        {"app": "x"},
        False,
    ),
    (None, {"app": "x"}, False),
]


@pytest.mark.parametrize(("selector", "endpoint", "expected"), SELECTORS)
def test_selector(selector: Any, endpoint: dict[str, str], expected: bool) -> None:
    assert pj.selector(selector)(endpoint) is expected


def test_a_namespaced_selector_requires_the_namespace() -> None:
    select = pj.selector({}, namespace="a")
    assert select({pj.NS_LABEL: "a"}) and not select({pj.NS_LABEL: "b"})


def test_identity_carries_namespace_name_labels_service_account_and_cluster() -> None:
    pod = PodBuilder(NS, name="p").label("app", "x").label("topology.kubernetes.io/zone", "a")
    got = pj.identity(pod.obj(), namespace(NS), pj.LabelFilter())
    assert got[pj.NS_LABEL] == NS
    assert got[pj.NS_LABELS_PREFIX + "podium.dev/enabled"] == "true"
    assert got[pj.SA_LABEL] == "default"
    assert got[pj.CLUSTER_LABEL] == "default"
    assert got["app"] == "x"
    assert "topology.kubernetes.io/zone" not in got  # Cilium's default filter drops it


@pytest.mark.parametrize(
    ("value", "key", "kept"),
    [
        (None, "podium.dev/job", True),
        (None, "topology.kubernetes.io/zone", False),
        (None, "controller-uid", False),
        (None, "statefulset.kubernetes.io/pod-name", False),
        ("k8s:topology.kubernetes.io/zone", "topology.kubernetes.io/zone", True),
        ("k8s:topology.kubernetes.io/zone", "podium.dev/job", False),  # a whitelist now
        ("k8s:topology.kubernetes.io/zone", pj.NS_LABEL, True),  # the defaults still count
        ("k8s:topology.kubernetes.io/zone", "app.kubernetes.io/name", True),
        ("k8s:podium.dev/", "podium.dev/zone", True),
        ("k8s:!podium.dev/job", "podium.dev/job", False),
        ("k8s:!podium.dev/job", "podium.dev/zone", True),  # excludes alone: no whitelist
        ("k8s:!podium k8s:podium.dev/job", "podium.dev/job", True),  # the longer match wins
        ("k8s:!io.kubernetes.pod", pj.NS_LABEL, True),  # ... so the namespace stays
        ("!k8s:controller-uid", "podium.dev/job", False),  # source "!k8s": a whitelist
        ("app", "app", True),  # no source: any
    ],
)
def test_the_label_filter_is_ciliums(value: str | None, key: str, kept: bool) -> None:
    assert pj.LabelFilter(value).keeps(key) is kept


def test_ports() -> None:
    ports = pj._ports(
        [{"port": "29501", "endPort": 34768, "protocol": "ANY"}, {"port": "53", "protocol": "UDP"}],
        default_proto="ANY",
    )
    assert ports == {"TCP": [(29501, 34768)], "UDP": [(53, 53), (29501, 34768)]}
    assert pj._ports([{"port": "http"}], default_proto="TCP") == {}  # named: not resolved
    assert pj._ports([{"protocol": "UDP"}], default_proto="TCP") == {"UDP": [(1, 65535)]}
    left = pj._minus(pj.ALL, ports)
    assert pj.describe(left) == "TCP 1-29500, 34769-65535; UDP 1-52, 54-29500, 34769-65535"


def member(name: str, **labels: str) -> tuple[str, dict[str, str]]:
    return name, {pj.NS_LABEL: NS, **labels}


def cnp(spec: dict[str, Any], kind: str = pj.CNP) -> dict[str, Any]:
    meta = {"name": "p", **({"namespace": NS} if kind == pj.CNP else {})}
    return {"apiVersion": "cilium.io/v2", "kind": kind, "metadata": meta, "spec": spec}


def cuts(policies: list[dict[str, Any]], members: list[Any]) -> list[tuple[str, str, str]]:
    parsed = pj.Policies.parse(policies, {})
    return [(c.direction, c.by, pj.describe(c.ports)) for c in pj.job_cuts(parsed, members)]


def test_a_job_cut_by_a_port_range_deny_and_default_deny() -> None:
    members = [member("a", job="j"), member("b", job="j")]
    deny = cnp(
        {
            "endpointSelector": {},
            "enableDefaultDeny": {"ingress": False},
            "ingressDeny": [
                {"toPorts": [{"ports": [{"port": "30000", "endPort": 30010, "protocol": "TCP"}]}]}
            ],
        }
    )
    assert cuts([deny], members) == [("ingress", "deny-rule", "TCP 30000-30010")]
    default_deny = cnp({"endpointSelector": {}, "egress": [{}]})
    assert cuts([default_deny], members) == [
        ("egress", "default-deny", "TCP all ports; UDP all ports")
    ]
    allow = cnp(
        {"endpointSelector": {}, "egress": [{"toEndpoints": [{"matchLabels": {"job": "j"}}]}]}
    )
    assert cuts([default_deny, allow], members) == []


def test_a_pod_is_not_its_own_peer_and_alike_pods_are_judged_once() -> None:
    only = cnp({"endpointSelector": {}, "ingressDeny": [{"fromEndpoints": [{}]}]})
    assert cuts([only], [member("a", job="j")]) == []
    many = [member(f"w{i}", job="j", index=str(i)) for i in range(300)]
    (cut,) = pj.job_cuts(pj.Policies.parse([only], {}), many)
    assert len(cut.pods) == 300 and cut.sources == ("CiliumNetworkPolicy p",)
