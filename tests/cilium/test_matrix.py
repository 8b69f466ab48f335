"""The verdict matrix, asserted against Cilium's own engine, and issue 13's properties.

Every row: a cluster policy set (tests/cilium/policies/) × a placement of the job × podium's
policy (none, or what podium's engine asks for in ``cilium`` / ``kubernetes`` mode) → one compact
cell per class of flows (see matrix.py for the notation: ``allow``, ``deny`` = default deny,
``DENY`` = an explicit deny rule; ⚠ = podium's policy widens the cluster's boundary, ▼ = it
narrows it).

The properties (matrix.py): **additive** (cilium mode leaves every flow that is not between two of
the job's pods as it was), **never widens** (no flow denied without podium is allowed with it,
unless between two of the job's pods in one zone), **sufficient** (the job's pods in one zone reach
each other unless an explicit deny forbids it), and what an **old Cilium** (v1.15, no
``enableDefaultDeny``) does with podium's policy.

Today podium's policy is job-wide: when a job ends up split across zones (``split-unpinned``), it
opens cross-zone traffic between the job's pods that a cluster denies — "never widens" fails
there, and those cases are marked ``xfail(strict=True)``. Phase 2 of issue 13 scopes the policy to
job and zone; the demonstration in zone_scoped.py shows that form keeps the property. When the
builder changes, the expected rows below for ``split-unpinned`` and the xfail marks change with it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.cilium import world
from tests.cilium.matrix import Matrix, additive_violations, cells, insufficiencies, widenings
from tests.cilium.oracle import Flow, Oracle
from tests.cilium.world import CLASSES, Mode, Placement, PolicySet

pytestmark = pytest.mark.e2e

REAL_MODES = (Mode.NONE, Mode.CILIUM, Mode.KUBERNETES)

#: Placement → one line per (policy set, podium mode): the cells of CLASSES, in order.
EXPECTED = {
    Placement.CO_LOCATED: """
        none | none | allow | n/a | allow | allow | allow | allow
        none | cilium | allow | n/a | allow | allow | allow | allow
        none | kubernetes | allow | n/a | deny ▼ | deny ▼ | deny ▼ | deny ▼
        ns-default-deny-cnp | none | deny | n/a | deny | deny | deny | deny
        ns-default-deny-cnp | cilium | allow | n/a | deny | deny | deny | deny
        ns-default-deny-cnp | kubernetes | allow | n/a | deny | deny | deny | deny
        ns-default-deny-netpol | none | deny | n/a | deny | deny | deny | deny
        ns-default-deny-netpol | cilium | allow | n/a | deny | deny | deny | deny
        ns-default-deny-netpol | kubernetes | allow | n/a | deny | deny | deny | deny
        zone-allowlist | none | allow | n/a | allow | allow | allow | allow
        zone-allowlist | cilium | allow | n/a | allow | allow | allow | allow
        zone-allowlist | kubernetes | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology | none | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology | cilium | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology | kubernetes | allow | n/a | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-allowlist-topology+labels | none | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology+labels | kubernetes | allow | n/a | allow | allow | allow | allow
        ns-default-deny-cnp+zone-labels-only | none | deny | n/a | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium | deny | n/a | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | kubernetes | deny | n/a | deny | deny | deny | deny
        zone-deny | none | deny | n/a | deny | deny | deny | deny
        zone-deny | cilium | allow | n/a | deny | deny | deny | deny
        zone-deny | kubernetes | allow | n/a | deny | deny | deny | deny
        zone-deny-additive | none | allow | n/a | allow | allow | allow | allow
        zone-deny-additive | cilium | allow | n/a | allow | allow | allow | allow
        zone-deny-additive | kubernetes | allow | n/a | deny ▼ | deny ▼ | deny ▼ | deny ▼
        port-range-deny | none | allow; DENY 30000 | n/a | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | cilium | allow; DENY 30000 | n/a | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | kubernetes | allow; DENY 30000 | n/a | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny ▼ | deny; DENY 30000 ▼
        cluster-default-deny-dns | none | deny | n/a | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium | allow | n/a | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | kubernetes | allow | n/a | deny | deny | allow; deny TCP | deny
        zone-nodes | none | allow | n/a | allow | allow | allow | allow
        zone-nodes | cilium | allow | n/a | allow | allow | allow | allow
        zone-nodes | kubernetes | allow | n/a | deny ▼ | deny ▼ | deny ▼ | deny ▼
    """,  # noqa: E501
    Placement.SPLIT_UNPINNED: """
        none | none | allow | allow | allow | allow | allow | allow
        none | cilium | allow | allow | allow | allow | allow | allow
        none | kubernetes | allow | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼
        ns-default-deny-cnp | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp | cilium | allow | allow ⚠ | deny | deny | deny | deny
        ns-default-deny-cnp | kubernetes | allow | allow ⚠ | deny | deny | deny | deny
        ns-default-deny-netpol | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-netpol | cilium | allow | allow ⚠ | deny | deny | deny | deny
        ns-default-deny-netpol | kubernetes | allow | allow ⚠ | deny | deny | deny | deny
        zone-allowlist | none | allow | deny | allow | allow | allow | allow
        zone-allowlist | cilium | allow | allow ⚠ | allow | allow | allow | allow
        zone-allowlist | kubernetes | allow | allow ⚠ | allow | allow | allow | allow
        zone-allowlist-topology | none | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology | cilium | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology | kubernetes | allow | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-allowlist-topology+labels | none | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium | allow | allow ⚠ | allow | allow | allow | allow
        zone-allowlist-topology+labels | kubernetes | allow | allow ⚠ | allow | allow | allow | allow
        ns-default-deny-cnp+zone-labels-only | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | kubernetes | deny | deny | deny | deny | deny | deny
        zone-deny | none | deny | DENY | deny | deny | deny | deny
        zone-deny | cilium | allow | DENY | deny | deny | deny | deny
        zone-deny | kubernetes | allow | DENY | deny | deny | deny | deny
        zone-deny-additive | none | allow | DENY | allow | allow | allow | allow
        zone-deny-additive | cilium | allow | DENY | allow | allow | allow | allow
        zone-deny-additive | kubernetes | allow | DENY | deny ▼ | deny ▼ | deny ▼ | deny ▼
        port-range-deny | none | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | cilium | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | kubernetes | allow; DENY 30000 | allow; DENY 30000 | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny ▼ | deny; DENY 30000 ▼
        cluster-default-deny-dns | none | deny | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium | allow | allow ⚠ | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | kubernetes | allow | allow ⚠ | deny | deny | allow; deny TCP | deny
        zone-nodes | none | allow | allow | allow | allow | allow | allow
        zone-nodes | cilium | allow | allow | allow | allow | allow | allow
        zone-nodes | kubernetes | allow | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼
    """,  # noqa: E501
    Placement.SPLIT_FAIL_OPEN: """
        none | none | allow | allow | allow | allow | allow | allow
        none | cilium | allow | allow | allow | allow | allow | allow
        none | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
        ns-default-deny-cnp | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp | cilium | allow | deny | deny | deny | deny | deny
        ns-default-deny-cnp | kubernetes | allow | deny | deny | deny | deny | deny
        ns-default-deny-netpol | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-netpol | cilium | allow | deny | deny | deny | deny | deny
        ns-default-deny-netpol | kubernetes | allow | deny | deny | deny | deny | deny
        zone-allowlist | none | allow | deny | allow | allow | allow | allow
        zone-allowlist | cilium | allow | deny | allow | allow | allow | allow
        zone-allowlist | kubernetes | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology | none | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology | cilium | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-allowlist-topology+labels | none | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | kubernetes | allow | deny | allow | allow | allow | allow
        ns-default-deny-cnp+zone-labels-only | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | kubernetes | deny | deny | deny | deny | deny | deny
        zone-deny | none | deny | DENY | deny | deny | deny | deny
        zone-deny | cilium | allow | DENY | deny | deny | deny | deny
        zone-deny | kubernetes | allow | DENY | deny | deny | deny | deny
        zone-deny-additive | none | allow | DENY | allow | allow | allow | allow
        zone-deny-additive | cilium | allow | DENY | allow | allow | allow | allow
        zone-deny-additive | kubernetes | allow | DENY | deny ▼ | deny ▼ | deny ▼ | deny ▼
        port-range-deny | none | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | cilium | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | kubernetes | allow; DENY 30000 | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny ▼ | deny; DENY 30000 ▼
        cluster-default-deny-dns | none | deny | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium | allow | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | kubernetes | allow | deny | deny | deny | allow; deny TCP | deny
        zone-nodes | none | allow | allow | allow | allow | allow | allow
        zone-nodes | cilium | allow | allow | allow | allow | allow | allow
        zone-nodes | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
    """,  # noqa: E501
}


def expected_rows() -> list[tuple[Placement, str, str, list[str]]]:
    out = []
    for placement, text in EXPECTED.items():
        for line in text.strip().splitlines():
            set_name, mode, *cells = (c.strip() for c in line.split("|"))
            out.append((placement, set_name, mode, cells))
    return out


def test_the_expected_table_covers_every_row() -> None:
    rows = {(p, s, m) for p, s, m, _ in expected_rows()}
    assert rows == {(p, s.name, str(m)) for p in Placement for s in world.SETS for m in REAL_MODES}
    assert all(len(cells) == len(CLASSES) for *_, cells in expected_rows())


@pytest.mark.parametrize(
    ("placement", "set_name", "mode", "row"),
    expected_rows(),
    ids=[f"{p}-{s}-{m}" for p, s, m, _ in expected_rows()],
)
def test_matrix_row(
    matrix: Matrix, placement: Placement, set_name: str, mode: str, row: list[str]
) -> None:
    got = cells(matrix, world.SET_BY_NAME[set_name], placement, Mode(mode))
    assert dict(zip(CLASSES, got, strict=True)) == dict(zip(CLASSES, row, strict=True))


@pytest.mark.parametrize("placement", list(Placement))
@pytest.mark.parametrize("mode", [Mode.CILIUM, Mode.KUBERNETES])
def test_the_policy_under_test_is_the_builders(placement: Placement, mode: Mode) -> None:
    world.check_builder(placement, mode)


# -- the properties --------------------------------------------------------------------------

#: Sets where podium can work at all: its label is identity-relevant.
WELL_CONFIGURED = [s for s in world.SETS if not s.misconfigured]

#: What today's job-wide policy widens: a job split across zones gets cross-zone traffic that the
#: cluster denies by default (namespace or cluster default deny) or by allow-listing its zones.
#: Deny-based isolation is not widened (a deny wins), nor is a cluster that allows the traffic.
WIDENED_TODAY = {
    (set_name, Placement.SPLIT_UNPINNED, mode)
    for set_name in (
        "ns-default-deny-cnp",
        "ns-default-deny-netpol",
        "zone-allowlist",
        "zone-allowlist-topology+labels",
        "cluster-default-deny-dns",
    )
    for mode in (Mode.CILIUM, Mode.KUBERNETES)
}
WIDENING = (
    "issue 13: podium's policy is job-wide, so a job split across zones (noFit: unpinned) gets "
    "cross-zone traffic between its pods that the cluster denies (for allow-list zone isolation: "
    "a hole in the admin's zone boundary); phase 2 scopes the policy to job and zone"
)


def cases(modes: list[Mode], sets: list[PolicySet], *, xfail: set[Any] = frozenset()) -> list[Any]:
    out = []
    for policy_set in sets:
        for placement in Placement:
            for mode in modes:
                marks = (
                    [pytest.mark.xfail(strict=True, reason=WIDENING)]
                    if (policy_set.name, placement, mode) in xfail
                    else []
                )
                out.append(
                    pytest.param(
                        policy_set,
                        placement,
                        mode,
                        marks=marks,
                        id=f"{policy_set.name}-{placement}-{mode}",
                    )
                )
    return out


def base_and_got(
    m: Matrix, policy_set: PolicySet, placement: Placement, mode: Mode
) -> tuple[dict[Flow, Any], dict[Flow, Any]]:
    return m.verdicts(policy_set, placement, Mode.NONE), m.verdicts(policy_set, placement, mode)


@pytest.mark.parametrize(
    ("policy_set", "placement", "mode"),
    cases([Mode.CILIUM, Mode.CILIUM_ZONE_SCOPED], list(world.SETS)),
)
def test_additive(matrix: Matrix, policy_set: PolicySet, placement: Placement, mode: Mode) -> None:
    """podium's Cilium policy changes no verdict but those between the job's own pods."""
    assert additive_violations(*base_and_got(matrix, policy_set, placement, mode), placement) == []


@pytest.mark.parametrize(
    ("policy_set", "placement", "mode"),
    cases(
        [Mode.CILIUM, Mode.KUBERNETES, Mode.CILIUM_ZONE_SCOPED],
        list(world.SETS),
        xfail=WIDENED_TODAY,
    ),
)
def test_never_widens(
    matrix: Matrix, policy_set: PolicySet, placement: Placement, mode: Mode
) -> None:
    """No flow the cluster denies is allowed with podium's policy, unless it is between two of
    the job's pods in one zone."""
    assert widenings(*base_and_got(matrix, policy_set, placement, mode), placement) == []


@pytest.mark.parametrize(
    ("policy_set", "placement", "mode"),
    cases([Mode.CILIUM, Mode.KUBERNETES, Mode.CILIUM_ZONE_SCOPED], WELL_CONFIGURED),
)
def test_sufficient(
    matrix: Matrix, policy_set: PolicySet, placement: Placement, mode: Mode
) -> None:
    """The job's pods in one zone reach each other on every port, unless a deny rule forbids it."""
    assert insufficiencies(*base_and_got(matrix, policy_set, placement, mode), placement) == []


def test_the_widening_is_cross_zone_job_traffic_only(matrix: Matrix) -> None:
    """What the xfail cases widen: exactly the job's cross-zone flows, every port."""
    for set_name, placement, mode in sorted(WIDENED_TODAY):
        base, got = base_and_got(matrix, world.SET_BY_NAME[set_name], placement, mode)
        assert widenings(base, got, placement) == sorted(world.flows(placement)[CLASSES[1]])


def test_the_zone_scoped_form_closes_exactly_that_hole(matrix: Matrix) -> None:
    """DEMONSTRATION (zone_scoped.py, not podium's builder yet): scoped to job and zone, the
    policy leaves the cross-zone flows as the cluster decides, and still lets the job's pods in
    one zone talk."""
    for set_name, placement, _ in sorted(WIDENED_TODAY):
        policy_set = world.SET_BY_NAME[set_name]
        base = matrix.verdicts(policy_set, placement, Mode.NONE)
        scoped = matrix.verdicts(policy_set, placement, Mode.CILIUM_ZONE_SCOPED)
        for flow in world.flows(placement)[CLASSES[1]]:
            assert scoped[flow].outcome == base[flow].outcome
        for flow in world.flows(placement)[CLASSES[0]]:
            assert scoped[flow].allowed


def test_a_label_whitelist_without_podium_job_makes_the_policy_a_silent_no_op(
    matrix: Matrix,
) -> None:
    """cilium-config `labels` with an include (here only the zone key) drops podium.dev/job from
    identities: podium's policy then selects nothing, and nothing says so."""
    policy_set = world.SET_BY_NAME["ns-default-deny-cnp+zone-labels-only"]
    placement = Placement.CO_LOCATED
    result = matrix.result(policy_set, placement, Mode.CILIUM)
    assert not any(
        label.startswith("k8s:podium.dev/job=") for label in result.identity_labels("j1")
    )
    same_zone = world.flows(placement)[CLASSES[0]]
    assert {result.verdict(f).by for f in same_zone} == {"default-deny"}
    base, got = base_and_got(matrix, policy_set, placement, Mode.CILIUM)
    assert insufficiencies(base, got, placement) == sorted(same_zone)


def test_kubernetes_mode_isolates_the_job_by_design(matrix: Matrix) -> None:
    """A NetworkPolicy is default deny for its policy types: in kubernetes mode the job's pods
    reach only each other (not additive, as settings.PolicyMode.KUBERNETES documents) — unless
    another policy that selects them allows more."""
    none = world.SET_BY_NAME["none"]
    placement = Placement.CO_LOCATED
    base, got = base_and_got(matrix, none, placement, Mode.KUBERNETES)
    assert additive_violations(base, got, placement) == sorted(
        f for c in CLASSES[2:] for f in world.flows(placement)[c]
    )


# -- the property checks catch a wrong policy ------------------------------------------------


def wrong(oracle: Oracle, policy_set: PolicySet, placement: Placement, change: Any) -> Any:
    """Verdicts with podium's real Cilium policy changed by ``change`` (a deliberate mistake)."""
    policy = copy.deepcopy(world.podium_policies(placement, Mode.CILIUM)[0])
    change(policy["spec"])
    return oracle.run(
        [*policy_set.policies(), policy],
        world.pods(placement),
        world.all_flows(placement),
        label_prefixes=policy_set.label_prefixes,
    ).by_flow()


def test_additive_catches_a_policy_that_leaves_default_deny_on(
    oracle: Oracle, matrix: Matrix
) -> None:
    none, placement = world.SET_BY_NAME["none"], Placement.CO_LOCATED
    got = wrong(oracle, none, placement, lambda spec: spec.pop("enableDefaultDeny"))
    broken = additive_violations(matrix.verdicts(none, placement, Mode.NONE), got, placement)
    assert {world.class_of(placement, f) for f in broken} == set(CLASSES[2:])


def test_never_widens_catches_a_policy_that_lets_the_cluster_in(
    oracle: Oracle, matrix: Matrix
) -> None:
    def from_cluster(spec: dict[str, Any]) -> None:
        spec["ingress"].append({"fromEntities": ["cluster"]})

    policy_set, placement = world.SET_BY_NAME["ns-default-deny-cnp"], Placement.CO_LOCATED
    got = wrong(oracle, policy_set, placement, from_cluster)
    base = matrix.verdicts(policy_set, placement, Mode.NONE)
    assert {world.class_of(placement, f) for f in widenings(base, got, placement)} == {
        "monitoring→job"
    }


def test_sufficient_catches_a_policy_limited_to_one_port(oracle: Oracle, matrix: Matrix) -> None:
    def one_port(spec: dict[str, Any]) -> None:
        ports = [{"ports": [{"port": "29500", "protocol": "TCP"}]}]
        spec["ingress"][0]["toPorts"] = ports
        spec["egress"][0]["toPorts"] = ports

    policy_set, placement = world.SET_BY_NAME["ns-default-deny-cnp"], Placement.CO_LOCATED
    got = wrong(oracle, policy_set, placement, one_port)
    base = matrix.verdicts(policy_set, placement, Mode.NONE)
    assert insufficiencies(base, got, placement) == sorted(
        f for f in world.flows(placement)[CLASSES[0]] if (f.proto, f.port) != ("TCP", 29500)
    )


# -- old Cilium ------------------------------------------------------------------------------


def test_old_cilium_prunes_enable_default_deny_from_podiums_policy(old_matrix: Matrix) -> None:
    result = old_matrix.result(world.SET_BY_NAME["none"], Placement.CO_LOCATED, Mode.CILIUM)
    assert result.cilium.startswith("v1.15.")
    name = world.podium_policies(Placement.CO_LOCATED, Mode.CILIUM)[0]["metadata"]["name"]
    assert result.pruned == (
        f'CiliumNetworkPolicy team-a/{name}: unknown field "spec.enableDefaultDeny"',
    )


def test_on_old_cilium_podiums_policy_puts_the_job_into_default_deny(old_matrix: Matrix) -> None:
    """Without enableDefaultDeny, podium's allow rules put the job's pods into default deny both
    ways: other pods, DNS and monitoring are cut off. What issue 13 (phase 2, item 5) guards
    against by not writing the policy when the installed CRD lacks the field."""
    placement = Placement.CO_LOCATED
    got = old_matrix.verdicts(world.SET_BY_NAME["none"], placement, Mode.CILIUM)
    by_class = {c: {got[f].outcome for f in fs} for c, fs in world.flows(placement).items()}
    assert by_class == {
        CLASSES[0]: {"allow"},
        CLASSES[1]: set(),
        CLASSES[2]: {"deny"},
        CLASSES[3]: {"deny"},
        CLASSES[4]: {"deny"},
        CLASSES[5]: {"deny"},
    }


@pytest.mark.xfail(
    strict=True,
    reason="issue 13 phase 2 item 5: podium still writes its CiliumNetworkPolicy when the "
    "installed CRD has no enableDefaultDeny (Cilium < 1.16), and there it is not additive",
)
@pytest.mark.parametrize("placement", list(Placement))
def test_old_cilium_additive(old_matrix: Matrix, placement: Placement) -> None:
    """On Cilium v1.15, podium writes no policy that changes a flow outside the job."""
    none = world.SET_BY_NAME["none"]
    base, got = base_and_got(old_matrix, none, placement, Mode.CILIUM)
    assert additive_violations(base, got, placement) == []


def test_old_cilium_reads_a_port_range_as_its_first_port(old_matrix: Matrix) -> None:
    """The cluster's own port-range deny means something else on v1.15: endPort is pruned (the
    deny covers 29501 only) and so is enableDefaultDeny (the deny-only policy puts every pod
    into ingress default deny)."""
    policy_set, placement = world.SET_BY_NAME["port-range-deny"], Placement.CO_LOCATED
    result = old_matrix.result(policy_set, placement, Mode.NONE)
    assert any('"spec.ingressDeny[0].toPorts[0].ports[0].endPort"' in p for p in result.pruned)
    flows = [Flow("notebook", "j1", "TCP", port) for port in (29501, 30000)]
    got = {
        v.flow.port: v.outcome
        for v in old_matrix.oracle.run(
            policy_set.policies(), world.pods(placement), flows, unknown_fields="prune"
        ).verdicts
    }
    assert got == {29501: "DENY", 30000: "deny"}
