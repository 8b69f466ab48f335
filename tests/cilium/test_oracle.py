"""The verdict oracle itself: strict parsing, identities and the label filter, and the Cilium
semantics the matrix rests on (cilium `pkg/policy/api/rule.go` EnableDefaultDeny, docs.cilium.io
"Deny Policies" and "Limiting Identity-Relevant Labels"), each asked of Cilium's own engine."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cilium.oracle import Flow, Oracle, OracleError, Pod

pytestmark = pytest.mark.e2e

NS_LABELS = {"podium.dev/enabled": "true"}
A = Pod("a", "team-a", {"app": "a", "podium.dev/zone": "zone-a"}, NS_LABELS)
B = Pod("b", "team-a", {"app": "b", "podium.dev/zone": "zone-b"}, NS_LABELS)
MON = Pod("mon", "monitoring", {"app.kubernetes.io/name": "prometheus"})
PODS = [A, B, MON]
A_TO_B = Flow("a", "b", "TCP", 8080)
B_TO_A = Flow("b", "a", "TCP", 8080)
MON_TO_A = Flow("mon", "a", "TCP", 9090)
FLOWS = [A_TO_B, B_TO_A, MON_TO_A]


def cnp(spec: dict[str, Any], name: str = "p", namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def ccnp(spec: dict[str, Any], name: str = "c") -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumClusterwideNetworkPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def app(value: str) -> dict[str, Any]:
    return {"matchLabels": {"app": value}}


def outcomes(oracle: Oracle, policies: list[dict[str, Any]], **kw: Any) -> dict[Flow, str]:
    return {v.flow: v.outcome for v in oracle.run(policies, PODS, FLOWS, **kw).verdicts}


@pytest.fixture(params=["oracle", "oracle115"])
def any_oracle(request: pytest.FixtureRequest) -> Oracle:
    """Each Cilium line, for the semantics both share (v1.15 computes the verdict from the policy
    map it distills, looked up in its datapath's order: oracle115/main.go)."""
    oracle: Oracle = request.getfixturevalue(request.param)
    return oracle


# -- input handling --------------------------------------------------------------------------


def test_no_policy_allows_everything(any_oracle: Oracle) -> None:
    result = any_oracle.run([], PODS, FLOWS)
    assert all(
        v.allowed and v.egress.by == v.ingress.by == "default-allow" for v in result.verdicts
    )


def test_a_misspelled_field_is_an_error_not_a_silent_no_op(oracle: Oracle) -> None:
    spec = {"endpointSelector": app("a"), "enableDefaultDenyy": {"ingress": False}}
    with pytest.raises(OracleError, match=r'unknown field "spec.enableDefaultDenyy"'):
        oracle.run([cnp(spec)], PODS, FLOWS)


def test_a_misspelled_selector_field_is_an_error(oracle: Oracle) -> None:
    # api.EndpointSelector decodes itself leniently: "matchLabel" would select every pod.
    spec = {"endpointSelector": {"matchLabel": {"app": "a"}}, "ingress": [{}]}
    with pytest.raises(OracleError, match=r'spec.endpointSelector: unknown field "matchLabel"'):
        oracle.run([cnp(spec)], PODS, FLOWS)
    peer = {"endpointSelector": app("a"), "ingress": [{"fromEndpoints": [{"matchLabelz": {}}]}]}
    with pytest.raises(OracleError, match=r"spec.ingress\[0\].fromEndpoints\[0\]: unknown field"):
        oracle.run([cnp(peer)], PODS, FLOWS)


def test_a_misspelled_networkpolicy_field_is_an_error(oracle: Oracle) -> None:
    np = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "np", "namespace": "team-a"},
        "spec": {"podSelector": {}, "policyType": ["Ingress"]},
    }
    with pytest.raises(OracleError, match=r'unknown field "spec.policyType"'):
        oracle.run([np], PODS, FLOWS)


def test_prune_drops_unknown_fields_and_says_which(oracle: Oracle) -> None:
    spec = {"endpointSelector": app("a"), "ingress": [{}], "future": True}
    result = oracle.run([cnp(spec)], PODS, FLOWS, unknown_fields="prune")
    assert result.pruned == ('CiliumNetworkPolicy team-a/p: unknown field "spec.future"',)
    assert result.verdict(B_TO_A).outcome == "deny"


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (cnp({"endpointSelector": {}}, namespace=""), "metadata.namespace is required"),
        ({**ccnp({"endpointSelector": {}}), "apiVersion": "cilium.io/v1"}, "unsupported"),
        (
            cnp({"nodeSelector": {}, "ingress": [{}]}),
            "CiliumNetworkPolicy spec: rule cannot have NodeSelector",
        ),
    ],
)
def test_policies_the_agent_would_refuse_are_refused(
    oracle: Oracle, policy: dict[str, Any], message: str
) -> None:
    with pytest.raises(OracleError, match=message):
        oracle.run([policy], PODS, FLOWS)


def test_a_flow_between_unknown_pods_is_an_error(oracle: Oracle) -> None:
    with pytest.raises(OracleError, match='unknown identity "ghost"'):
        oracle.run([], PODS, [Flow("ghost", "a", "TCP", 1)])


# -- identities and the label filter ---------------------------------------------------------


def test_identities_are_built_as_the_agent_builds_them(oracle: Oracle) -> None:
    pod = Pod("p", "team-a", {"app": "x", "topology.kubernetes.io/zone": "zone-a"}, NS_LABELS)
    labels = oracle.run([], [pod], []).identity_labels("p")
    assert labels == (
        "k8s:app=x",
        "k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=team-a",
        "k8s:io.cilium.k8s.namespace.labels.podium.dev/enabled=true",
        "k8s:io.cilium.k8s.policy.cluster=default",
        "k8s:io.cilium.k8s.policy.serviceaccount=default",
        "k8s:io.kubernetes.pod.namespace=team-a",
    ), "the default label filter drops topology.kubernetes.io/*"


def test_pods_with_the_same_relevant_labels_share_one_identity(oracle: Oracle) -> None:
    one = Pod("one", "team-a", {"app": "x", "statefulset.kubernetes.io/pod-name": "x-0"})
    two = Pod("two", "team-a", {"app": "x", "statefulset.kubernetes.io/pod-name": "x-1"})
    ids = oracle.run([], [one, two], []).identities
    assert ids["one"] == ids["two"]


def test_any_include_switches_the_filter_to_whitelist_mode(oracle: Oracle) -> None:
    """cilium-config `labels: k8s:topology.kubernetes.io/zone` keeps the zone and drops every
    label not listed: podium.dev/job among them."""
    pod = Pod(
        "p",
        "team-a",
        {"podium.dev/job": "uid", "topology.kubernetes.io/zone": "zone-a", "app": "x"},
    )
    default = oracle.run([], [pod], []).identity_labels("p")
    listed = oracle.run(
        [], [pod], [], label_prefixes=["k8s:topology.kubernetes.io/zone"]
    ).identity_labels("p")
    both = oracle.run(
        [], [pod], [], label_prefixes=["k8s:topology.kubernetes.io/zone", "k8s:podium.dev/"]
    ).identity_labels("p")
    assert "k8s:podium.dev/job=uid" in default
    assert "k8s:topology.kubernetes.io/zone=zone-a" not in default
    assert "k8s:topology.kubernetes.io/zone=zone-a" in listed
    assert "k8s:podium.dev/job=uid" not in listed
    assert "k8s:app=x" not in listed
    assert {"k8s:podium.dev/job=uid", "k8s:topology.kubernetes.io/zone=zone-a"} <= set(both)


# -- semantics (Cilium's docs and pkg/policy) ------------------------------------------------


def test_an_additive_policy_alone_changes_no_verdict(oracle: Oracle) -> None:
    spec = {
        "endpointSelector": app("a"),
        "enableDefaultDeny": {"ingress": False, "egress": False},
        "ingress": [{"fromEndpoints": [app("b")]}],
        "egress": [{"toEndpoints": [app("b")]}],
    }
    assert outcomes(oracle, [cnp(spec)]) == outcomes(oracle, [])
    verdict = oracle.run([cnp(spec)], PODS, FLOWS).verdict(B_TO_A)
    assert verdict.ingress.by == "allow-rule"
    assert verdict.ingress.rules == ("CiliumNetworkPolicy/team-a/p",)


def test_an_allow_rule_puts_the_pods_into_default_deny(any_oracle: Oracle) -> None:
    spec = {"endpointSelector": app("a"), "ingress": [{"fromEndpoints": [app("b")]}]}
    got = outcomes(any_oracle, [cnp(spec)])
    assert got == {A_TO_B: "allow", B_TO_A: "allow", MON_TO_A: "deny"}


def test_one_default_deny_policy_wins_over_an_additive_one(oracle: Oracle) -> None:
    additive = {
        "endpointSelector": app("a"),
        "enableDefaultDeny": {"ingress": False, "egress": False},
        "ingress": [{"fromEndpoints": [app("b")]}],
    }
    strict = {"endpointSelector": app("a"), "ingress": [{"fromEndpoints": [app("b")]}]}
    got = outcomes(oracle, [cnp(additive, "additive"), cnp(strict, "strict")])
    assert got[MON_TO_A] == "deny"


def test_a_deny_wins_over_any_allow_and_says_so(oracle: Oracle) -> None:
    allow = {"endpointSelector": app("a"), "ingress": [{"fromEndpoints": [app("b")]}]}
    deny = {
        "endpointSelector": app("a"),
        "enableDefaultDeny": {"ingress": False},
        "ingressDeny": [{"fromEndpoints": [app("b")]}],
    }
    verdict = oracle.run([cnp(allow, "allow"), cnp(deny, "deny")], PODS, FLOWS).verdict(B_TO_A)
    assert (verdict.outcome, verdict.by) == ("DENY", "deny-rule")
    assert verdict.ingress.by == "deny-rule"
    assert verdict.ingress.rules == ("CiliumNetworkPolicy/team-a/deny",)
    assert verdict.egress.by == "default-allow"


def test_egress_and_ingress_are_told_apart(oracle: Oracle) -> None:
    deny = {
        "endpointSelector": app("a"),
        "enableDefaultDeny": {"egress": False},
        "egressDeny": [{"toEndpoints": [app("b")]}],
    }
    verdict = oracle.run([cnp(deny)], PODS, FLOWS).verdict(A_TO_B)
    assert (verdict.egress.by, verdict.ingress.by) == ("deny-rule", "default-allow")


def test_a_deny_only_policy_without_enable_default_deny_denies_everything_else(
    any_oracle: Oracle,
) -> None:
    deny = {"endpointSelector": app("a"), "ingressDeny": [{"fromEndpoints": [app("b")]}]}
    got = outcomes(any_oracle, [cnp(deny)])
    assert got == {A_TO_B: "allow", B_TO_A: "DENY", MON_TO_A: "deny"}


def test_not_in_also_matches_pods_without_the_label(oracle: Oracle) -> None:
    def zone_deny(*expressions: dict[str, Any]) -> dict[str, Any]:
        return ccnp(
            {
                "endpointSelector": {"matchLabels": {"podium.dev/zone": "zone-a"}},
                "enableDefaultDeny": {"ingress": False, "egress": False},
                "ingressDeny": [{"fromEndpoints": [{"matchExpressions": list(expressions)}]}],
            }
        )

    not_in = {"key": "podium.dev/zone", "operator": "NotIn", "values": ["zone-a"]}
    exists = {"key": "podium.dev/zone", "operator": "Exists"}
    assert outcomes(oracle, [zone_deny(not_in)])[MON_TO_A] == "DENY"
    assert outcomes(oracle, [zone_deny(not_in, exists)])[MON_TO_A] == "allow"
    assert outcomes(oracle, [zone_deny(not_in, exists)])[B_TO_A] == "DENY"


def test_a_namespaced_policy_selects_only_its_own_namespace(any_oracle: Oracle) -> None:
    spec = {"endpointSelector": {}, "ingress": [{}]}
    got = outcomes(any_oracle, [cnp(spec, namespace="monitoring")])
    assert got == {A_TO_B: "allow", B_TO_A: "allow", MON_TO_A: "allow"}
    assert any_oracle.run([cnp(spec, namespace="team-a")], PODS, FLOWS).verdict(MON_TO_A).by == (
        "default-deny"
    )


def test_a_networkpolicy_is_default_deny_for_its_policy_types(any_oracle: Oracle) -> None:
    np = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "np", "namespace": "team-a"},
        "spec": {
            "podSelector": app("a"),
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": app("b")}]}],
        },
    }
    result = any_oracle.run([np], PODS, FLOWS)
    assert result.verdict(B_TO_A).ingress.rules == ("NetworkPolicy/team-a/np",)
    assert {v.flow: v.outcome for v in result.verdicts} == {
        A_TO_B: "allow",
        B_TO_A: "allow",
        MON_TO_A: "deny",
    }


def test_a_port_range_covers_its_ends_only(oracle: Oracle) -> None:
    deny = ccnp(
        {
            "endpointSelector": {},
            "enableDefaultDeny": {"ingress": False, "egress": False},
            "ingressDeny": [
                {
                    "fromEntities": ["all"],
                    "toPorts": [
                        {"ports": [{"port": "29501", "endPort": 34768, "protocol": "ANY"}]}
                    ],
                }
            ],
        }
    )
    ports = [29500, 29501, 34768, 34769]
    flows = [Flow("b", "a", proto, port) for proto in ("TCP", "UDP") for port in ports]
    got = {(v.flow.proto, v.flow.port): v.outcome for v in oracle.run([deny], PODS, flows).verdicts}
    assert got == {
        (proto, port): "DENY" if port in (29501, 34768) else "allow"
        for proto in ("TCP", "UDP")
        for port in ports
    }


def test_a_deny_on_a_peer_wins_over_a_port_allowed_to_everyone(any_oracle: Oracle) -> None:
    """An L4-only allow (everyone on 8080) and an L3-only deny (b on every port): the deny wins.
    In v1.15's datapath the L4-only entry is looked up before the L3-only one; the agent's map
    state puts a port-specific deny for b first (denyPreferredInsert)."""
    allow = {
        "endpointSelector": app("a"),
        "ingress": [{"toPorts": [{"ports": [{"port": "8080", "protocol": "TCP"}]}]}],
    }
    deny = {"endpointSelector": app("a"), "ingressDeny": [{"fromEndpoints": [app("b")]}]}
    flows = [B_TO_A, Flow("mon", "a", "TCP", 8080), Flow("mon", "a", "TCP", 8081)]
    result = any_oracle.run([cnp(allow, "allow"), cnp(deny, "deny")], PODS, flows)
    assert [v.outcome for v in result.verdicts] == ["DENY", "allow", "deny"]
    assert result.verdicts[0].ingress.rules == ("CiliumNetworkPolicy/team-a/deny",)


def test_the_oracles_are_the_pinned_versions(oracle: Oracle, oracle115: Oracle) -> None:
    assert oracle.run([], PODS, []).cilium == "v1.20.2"
    assert oracle115.run([], PODS, []).cilium == "v1.15.19"
