"""The verdict matrix, asserted against Cilium's own engine, and issue 13's properties.

Every row: a cluster policy set (tests/cilium/policies/) × a placement of the job × podium's
policies (what podium's engine and reconciler write in that mode) → one compact cell per class
of flows (see matrix.py for the notation: ``allow``, ``deny`` = default deny, ``DENY`` = an
explicit deny rule; ⚠ = podium's policy widens the cluster's boundary, ▼ = it narrows it).

The properties (matrix.py): **additive** (cilium mode leaves every flow that is not between two of
the job's pods as it was), **never widens** (no flow denied without podium is allowed with it,
unless between two of the job's pods in one zone), **sufficient** (the job's pods in one zone reach
each other unless an explicit deny forbids it), and what an **old Cilium** (v1.15, no
``enableDefaultDeny``) does: podium writes no CiliumNetworkPolicy there, so nothing changes.

podium's policies are scoped to job and zone (the default): a job that ends up split across zones
(``split-unpinned``) keeps the cluster's verdict on its cross-zone traffic. ``policy-scope: job``
(``cilium-job-scope``) is the documented trade-off: one job-wide policy, which opens exactly that
cross-zone traffic where the cluster denies it (``JOB_SCOPE_WIDENS``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.cilium import world
from tests.cilium.matrix import (
    MODES,
    Matrix,
    additive_violations,
    cells,
    insufficiencies,
    widenings,
)
from tests.cilium.oracle import Flow, Oracle
from tests.cilium.world import CLASSES, Line, Mode, Placement, PolicySet

pytestmark = pytest.mark.e2e

#: Placement → one line per (policy set, podium mode): the cells of CLASSES, in order.
EXPECTED = {
    Placement.CO_LOCATED: """
        none | none | allow | n/a | allow | allow | allow | allow
        none | cilium | allow | n/a | allow | allow | allow | allow
        none | kubernetes | allow | n/a | deny ▼ | deny ▼ | deny ▼ | deny ▼
        none | cilium-job-scope | allow | n/a | allow | allow | allow | allow
        ns-default-deny-cnp | none | deny | n/a | deny | deny | deny | deny
        ns-default-deny-cnp | cilium | allow | n/a | deny | deny | deny | deny
        ns-default-deny-cnp | kubernetes | allow | n/a | deny | deny | deny | deny
        ns-default-deny-cnp | cilium-job-scope | allow | n/a | deny | deny | deny | deny
        ns-default-deny-netpol | none | deny | n/a | deny | deny | deny | deny
        ns-default-deny-netpol | cilium | allow | n/a | deny | deny | deny | deny
        ns-default-deny-netpol | kubernetes | allow | n/a | deny | deny | deny | deny
        ns-default-deny-netpol | cilium-job-scope | allow | n/a | deny | deny | deny | deny
        zone-allowlist | none | allow | n/a | allow | allow | allow | allow
        zone-allowlist | cilium | allow | n/a | allow | allow | allow | allow
        zone-allowlist | kubernetes | allow | n/a | allow | allow | allow | allow
        zone-allowlist | cilium-job-scope | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology | none | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology | cilium | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology | kubernetes | allow | n/a | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-allowlist-topology | cilium-job-scope | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology+labels | none | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology+labels | kubernetes | allow | n/a | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium-job-scope | allow | n/a | allow | allow | allow | allow
        ns-default-deny-cnp+zone-labels-only | none | deny | n/a | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium | deny | n/a | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | kubernetes | deny | n/a | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium-job-scope | deny | n/a | deny | deny | deny | deny
        zone-deny | none | deny | n/a | deny | deny | deny | deny
        zone-deny | cilium | allow | n/a | deny | deny | deny | deny
        zone-deny | kubernetes | allow | n/a | deny | deny | deny | deny
        zone-deny | cilium-job-scope | allow | n/a | deny | deny | deny | deny
        zone-deny-additive | none | allow | n/a | allow | allow | allow | allow
        zone-deny-additive | cilium | allow | n/a | allow | allow | allow | allow
        zone-deny-additive | kubernetes | allow | n/a | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-deny-additive | cilium-job-scope | allow | n/a | allow | allow | allow | allow
        port-range-deny | none | allow; DENY 30000 | n/a | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | cilium | allow; DENY 30000 | n/a | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | kubernetes | allow; DENY 30000 | n/a | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny ▼ | deny; DENY 30000 ▼
        port-range-deny | cilium-job-scope | allow; DENY 30000 | n/a | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        cluster-default-deny-dns | none | deny | n/a | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium | allow | n/a | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | kubernetes | allow | n/a | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium-job-scope | allow | n/a | deny | deny | allow; deny TCP | deny
        zone-nodes | none | allow | n/a | allow | allow | allow | allow
        zone-nodes | cilium | allow | n/a | allow | allow | allow | allow
        zone-nodes | kubernetes | allow | n/a | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-nodes | cilium-job-scope | allow | n/a | allow | allow | allow | allow
    """,  # noqa: E501
    Placement.SPLIT_UNPINNED: """
        none | none | allow | allow | allow | allow | allow | allow
        none | cilium | allow | allow | allow | allow | allow | allow
        none | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
        none | cilium-job-scope | allow | allow | allow | allow | allow | allow
        ns-default-deny-cnp | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp | cilium | allow | deny | deny | deny | deny | deny
        ns-default-deny-cnp | kubernetes | allow | deny | deny | deny | deny | deny
        ns-default-deny-cnp | cilium-job-scope | allow | allow ⚠ | deny | deny | deny | deny
        ns-default-deny-netpol | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-netpol | cilium | allow | deny | deny | deny | deny | deny
        ns-default-deny-netpol | kubernetes | allow | deny | deny | deny | deny | deny
        ns-default-deny-netpol | cilium-job-scope | allow | allow ⚠ | deny | deny | deny | deny
        zone-allowlist | none | allow | allow | deny | deny | allow | deny
        zone-allowlist | cilium | allow | deny | allow | allow | allow | allow
        zone-allowlist | kubernetes | allow | deny | allow | allow | allow | allow
        zone-allowlist | cilium-job-scope | allow | allow | deny | deny | allow | deny
        zone-allowlist-topology | none | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology | cilium | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-allowlist-topology | cilium-job-scope | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology+labels | none | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | kubernetes | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium-job-scope | allow | allow ⚠ | allow | allow | allow | allow
        ns-default-deny-cnp+zone-labels-only | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | kubernetes | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium-job-scope | deny | deny | deny | deny | deny | deny
        zone-deny | none | allow | allow | deny | deny | deny | deny
        zone-deny | cilium | allow | DENY | deny | deny | deny | deny
        zone-deny | kubernetes | allow | DENY | deny | deny | deny | deny
        zone-deny | cilium-job-scope | allow | allow | deny | deny | deny | deny
        zone-deny-additive | none | allow | allow | allow | allow | allow | allow
        zone-deny-additive | cilium | allow | DENY | allow | allow | allow | allow
        zone-deny-additive | kubernetes | allow | DENY | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-deny-additive | cilium-job-scope | allow | allow | allow | allow | allow | allow
        port-range-deny | none | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | cilium | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | kubernetes | allow; DENY 30000 | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny ▼ | deny; DENY 30000 ▼
        port-range-deny | cilium-job-scope | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        cluster-default-deny-dns | none | deny | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium | allow | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | kubernetes | allow | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium-job-scope | allow | allow ⚠ | deny | deny | allow; deny TCP | deny
        zone-nodes | none | allow | allow | allow | allow | allow | allow
        zone-nodes | cilium | allow | allow | allow | allow | allow | allow
        zone-nodes | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-nodes | cilium-job-scope | allow | allow | allow | allow | allow | allow
    """,  # noqa: E501
    Placement.SPLIT_FAIL_OPEN: """
        none | none | allow | allow | allow | allow | allow | allow
        none | cilium | allow | allow | allow | allow | allow | allow
        none | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
        none | cilium-job-scope | allow | allow | allow | allow | allow | allow
        ns-default-deny-cnp | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp | cilium | allow | deny | deny | deny | deny | deny
        ns-default-deny-cnp | kubernetes | allow | deny | deny | deny | deny | deny
        ns-default-deny-cnp | cilium-job-scope | allow | allow ⚠ | deny | deny | deny | deny
        ns-default-deny-netpol | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-netpol | cilium | allow | deny | deny | deny | deny | deny
        ns-default-deny-netpol | kubernetes | allow | deny | deny | deny | deny | deny
        ns-default-deny-netpol | cilium-job-scope | allow | allow ⚠ | deny | deny | deny | deny
        zone-allowlist | none | allow | deny | allow | allow | allow | allow
        zone-allowlist | cilium | allow | deny | allow | allow | allow | allow
        zone-allowlist | kubernetes | allow | deny | allow | allow | allow | allow
        zone-allowlist | cilium-job-scope | allow | allow ⚠ | allow | allow | allow | allow
        zone-allowlist-topology | none | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology | cilium | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-allowlist-topology | cilium-job-scope | allow | allow | allow | allow | allow | allow
        zone-allowlist-topology+labels | none | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | kubernetes | allow | deny | allow | allow | allow | allow
        zone-allowlist-topology+labels | cilium-job-scope | allow | allow ⚠ | allow | allow | allow | allow
        ns-default-deny-cnp+zone-labels-only | none | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | kubernetes | deny | deny | deny | deny | deny | deny
        ns-default-deny-cnp+zone-labels-only | cilium-job-scope | deny | deny | deny | deny | deny | deny
        zone-deny | none | deny | DENY | deny | deny | deny | deny
        zone-deny | cilium | allow | DENY | deny | deny | deny | deny
        zone-deny | kubernetes | allow | DENY | deny | deny | deny | deny
        zone-deny | cilium-job-scope | allow | DENY | deny | deny | deny | deny
        zone-deny-additive | none | allow | DENY | allow | allow | allow | allow
        zone-deny-additive | cilium | allow | DENY | allow | allow | allow | allow
        zone-deny-additive | kubernetes | allow | DENY | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-deny-additive | cilium-job-scope | allow | DENY | allow | allow | allow | allow
        port-range-deny | none | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | cilium | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        port-range-deny | kubernetes | allow; DENY 30000 | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny; DENY 30000 ▼ | deny ▼ | deny; DENY 30000 ▼
        port-range-deny | cilium-job-scope | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow; DENY 30000 | allow | allow; DENY 30000
        cluster-default-deny-dns | none | deny | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium | allow | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | kubernetes | allow | deny | deny | deny | allow; deny TCP | deny
        cluster-default-deny-dns | cilium-job-scope | allow | allow ⚠ | deny | deny | allow; deny TCP | deny
        zone-nodes | none | allow | allow | allow | allow | allow | allow
        zone-nodes | cilium | allow | allow | allow | allow | allow | allow
        zone-nodes | kubernetes | allow | deny ▼ | deny ▼ | deny ▼ | deny ▼ | deny ▼
        zone-nodes | cilium-job-scope | allow | allow | allow | allow | allow | allow
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
    assert rows == {(p, s.name, str(m)) for p in Placement for s in world.SETS for m in MODES}
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
@pytest.mark.parametrize("mode", [Mode.CILIUM, Mode.KUBERNETES, Mode.CILIUM_JOB_SCOPE])
def test_the_policies_under_test_are_the_builders(placement: Placement, mode: Mode) -> None:
    world.check_builder(placement, mode)


def test_a_split_job_gets_one_policy_per_zone_from_the_reconciler() -> None:
    """Unpinned, the job's zone is unknown at admission: no policy then; once the pods are bound
    the reconciler labels them with their node's zone and creates each zone's policy."""
    admitted = world.admit(Placement.SPLIT_UNPINNED, Mode.CILIUM)
    assert admitted.record_zone is None
    assert [
        p["spec"]["endpointSelector"]["matchLabels"][world.PODIUM_ZONE] for p in admitted.policies
    ] == [
        "zone-a",
        "zone-b",
    ]
    assert admitted.reconciled == (
        (
            *[("label", "zone-known", "Pod")] * 3,
            *[("create", "missing-policy", "CiliumNetworkPolicy")] * 2,
        ),
    )
    pinned = world.admit(Placement.CO_LOCATED, Mode.CILIUM)
    assert (pinned.reconciled, len(pinned.policies)) == ((), 1)  # admission did it all


# -- the properties --------------------------------------------------------------------------

#: Sets where podium can work at all: its label is identity-relevant.
WELL_CONFIGURED = [s for s in world.SETS if not s.misconfigured]

#: What ``policy-scope: job`` widens (the trade-off that setting documents): a job split across
#: zones gets cross-zone traffic that the cluster denies by default (namespace or cluster default
#: deny) or by allow-listing its zones on a label its pods carry (the topology label; podium's
#: zone label is on no pod of an unpinned job in job scope). Deny-based isolation is not widened
#: (a deny wins), nor is a cluster that allows the traffic. A pod podium failed open on is one of
#: the job's too once it runs: the reconciler adopts it (``core.running``: the job's label and its
#: node's zone, policy-mode cilium), so the job-wide policy selects it like the others — and, its
#: zone label now podium's, the zone allow-list lets its cross-zone traffic through as well.
JOB_SCOPE_WIDENS = {
    (set_name, Placement.SPLIT_UNPINNED)
    for set_name in (
        "ns-default-deny-cnp",
        "ns-default-deny-netpol",
        "zone-allowlist-topology+labels",
        "cluster-default-deny-dns",
    )
} | {
    (set_name, Placement.SPLIT_FAIL_OPEN)
    for set_name in (
        "ns-default-deny-cnp",
        "ns-default-deny-netpol",
        "zone-allowlist",
        "zone-allowlist-topology+labels",
        "cluster-default-deny-dns",
    )
}


def cases(modes: list[Mode], sets: list[PolicySet]) -> list[Any]:
    return [
        pytest.param(s, p, m, id=f"{s.name}-{p}-{m}")
        for s in sets
        for p in Placement
        for m in modes
    ]


def base_and_got(
    m: Matrix, policy_set: PolicySet, placement: Placement, mode: Mode
) -> tuple[dict[Flow, Any], dict[Flow, Any]]:
    return m.baseline(policy_set, placement, mode), m.verdicts(policy_set, placement, mode)


@pytest.mark.parametrize(
    ("policy_set", "placement", "mode"),
    cases([Mode.CILIUM, Mode.CILIUM_JOB_SCOPE], list(world.SETS)),
)
def test_additive(matrix: Matrix, policy_set: PolicySet, placement: Placement, mode: Mode) -> None:
    """podium's Cilium policy changes no verdict but those between the job's own pods."""
    assert additive_violations(*base_and_got(matrix, policy_set, placement, mode), placement) == []


@pytest.mark.parametrize(
    ("policy_set", "placement", "mode"),
    cases([Mode.CILIUM, Mode.KUBERNETES], list(world.SETS)),
)
def test_never_widens(
    matrix: Matrix, policy_set: PolicySet, placement: Placement, mode: Mode
) -> None:
    """No flow the cluster denies is allowed with podium's policies, unless it is between two of
    the job's pods in one zone — in every set, placement and policy mode, split jobs included."""
    assert widenings(*base_and_got(matrix, policy_set, placement, mode), placement) == []


@pytest.mark.parametrize(
    ("policy_set", "placement", "mode"),
    cases([Mode.CILIUM, Mode.KUBERNETES, Mode.CILIUM_JOB_SCOPE], WELL_CONFIGURED),
)
def test_sufficient(
    matrix: Matrix, policy_set: PolicySet, placement: Placement, mode: Mode
) -> None:
    """The job's pods in one zone reach each other on every port, unless a deny rule forbids it."""
    assert insufficiencies(*base_and_got(matrix, policy_set, placement, mode), placement) == []


@pytest.mark.parametrize(
    ("policy_set", "placement"),
    [pytest.param(s, p, id=f"{s.name}-{p}") for s in world.SETS for p in Placement],
)
def test_job_scope_widens_exactly_the_cross_zone_traffic_of_a_split_job(
    matrix: Matrix, policy_set: PolicySet, placement: Placement
) -> None:
    """The trade-off ``policy-scope: job`` documents: every port of the job's cross-zone
    traffic, where the cluster denies it, and nothing else."""
    base, got = base_and_got(matrix, policy_set, placement, Mode.CILIUM_JOB_SCOPE)
    widened = widenings(base, got, placement)
    if (policy_set.name, placement) in JOB_SCOPE_WIDENS:
        assert widened == sorted(world.flows(placement)[CLASSES[1]])
    else:
        assert widened == []


def test_zone_scope_closes_exactly_that_hole(matrix: Matrix) -> None:
    """Scoped to job and zone, the policies leave the cross-zone flows as the cluster decides,
    and still let the job's pods in one zone talk."""
    for set_name, placement in sorted(JOB_SCOPE_WIDENS):
        policy_set = world.SET_BY_NAME[set_name]
        base, scoped = base_and_got(matrix, policy_set, placement, Mode.CILIUM)
        for flow in world.flows(placement)[CLASSES[1]]:
            assert scoped[flow].outcome == base[flow].outcome == "deny"
        for flow in world.flows(placement)[CLASSES[0]]:
            assert scoped[flow].allowed


def test_a_label_whitelist_without_podium_job_makes_the_policy_a_silent_no_op(
    matrix: Matrix,
) -> None:
    """cilium-config `labels` with an include (here only the zone key) drops podium.dev/job from
    identities: podium's policy then selects nothing, and nothing says so (but podium doctor)."""
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
    another policy that selects them allows more — and, scoped to zones, only those in their
    own zone."""
    none = world.SET_BY_NAME["none"]
    placement = Placement.CO_LOCATED
    base, got = base_and_got(matrix, none, placement, Mode.KUBERNETES)
    assert additive_violations(base, got, placement) == sorted(
        f for c in CLASSES[2:] for f in world.flows(placement)[c]
    )
    split = Placement.SPLIT_UNPINNED
    got = matrix.verdicts(none, split, Mode.KUBERNETES)
    assert {got[f].outcome for f in world.flows(split)[CLASSES[1]]} == {"deny"}


# -- the property checks catch a wrong policy ------------------------------------------------


def wrong(
    oracle: Oracle, policy_set: PolicySet, placement: Placement, change: Any
) -> dict[Flow, Any]:
    """Verdicts with podium's real Cilium policies changed by ``change`` (a deliberate mistake)."""
    broken = copy.deepcopy(world.podium_policies(placement, Mode.CILIUM))
    for policy in broken:
        change(policy["spec"])
    return oracle.run(
        [*policy_set.policies(), *broken],
        world.pods(placement),
        world.all_flows(placement),
        label_prefixes=policy_set.label_prefixes,
    ).by_flow()


def test_additive_catches_a_policy_that_leaves_default_deny_on(
    oracle: Oracle, matrix: Matrix
) -> None:
    none, placement = world.SET_BY_NAME["none"], Placement.CO_LOCATED
    got = wrong(oracle, none, placement, lambda spec: spec.pop("enableDefaultDeny"))
    broken = additive_violations(matrix.baseline(none, placement, Mode.CILIUM), got, placement)
    assert {world.class_of(placement, f) for f in broken} == set(CLASSES[2:])


def test_never_widens_catches_a_policy_that_lets_the_cluster_in(
    oracle: Oracle, matrix: Matrix
) -> None:
    def from_cluster(spec: dict[str, Any]) -> None:
        spec["ingress"].append({"fromEntities": ["cluster"]})

    policy_set, placement = world.SET_BY_NAME["ns-default-deny-cnp"], Placement.CO_LOCATED
    got = wrong(oracle, policy_set, placement, from_cluster)
    base = matrix.baseline(policy_set, placement, Mode.CILIUM)
    assert {world.class_of(placement, f) for f in widenings(base, got, placement)} == {
        "monitoring→job"
    }


def test_never_widens_catches_peers_that_forget_the_zone(oracle: Oracle, matrix: Matrix) -> None:
    """A zone-scoped policy whose peers select the whole job again (selector still scoped): the
    job's pods in each zone accept — and send — traffic from and to the other zone."""

    def job_wide_peers(spec: dict[str, Any]) -> None:
        peers = {
            "matchLabels": {
                world.labels.JOB: spec["endpointSelector"]["matchLabels"][world.labels.JOB]
            }
        }
        spec["ingress"] = [{"fromEndpoints": [peers]}]
        spec["egress"] = [{"toEndpoints": [peers]}]

    policy_set, placement = world.SET_BY_NAME["zone-allowlist"], Placement.SPLIT_UNPINNED
    got = wrong(oracle, policy_set, placement, job_wide_peers)
    base = matrix.baseline(policy_set, placement, Mode.CILIUM)
    assert widenings(base, got, placement) == sorted(world.flows(placement)[CLASSES[1]])


def test_sufficient_catches_a_policy_limited_to_one_port(oracle: Oracle, matrix: Matrix) -> None:
    def one_port(spec: dict[str, Any]) -> None:
        ports = [{"ports": [{"port": "29500", "protocol": "TCP"}]}]
        spec["ingress"][0]["toPorts"] = ports
        spec["egress"][0]["toPorts"] = ports

    policy_set, placement = world.SET_BY_NAME["ns-default-deny-cnp"], Placement.CO_LOCATED
    got = wrong(oracle, policy_set, placement, one_port)
    base = matrix.baseline(policy_set, placement, Mode.CILIUM)
    assert insufficiencies(base, got, placement) == sorted(
        f for f in world.flows(placement)[CLASSES[0]] if (f.proto, f.port) != ("TCP", 29500)
    )


# -- old Cilium ------------------------------------------------------------------------------


def test_on_old_cilium_podium_writes_no_cilium_policy(old_matrix: Matrix) -> None:
    """The engine sees Cilium 1.15's CRD: no enableDefaultDeny, so no CiliumNetworkPolicy (and a
    warning on every pod); the kubernetes mode does not depend on it."""
    for placement in Placement:
        assert world.podium_policies(placement, Mode.CILIUM, Line.OLD) == []
        assert world.podium_policies(placement, Mode.KUBERNETES, Line.OLD) != []
    assert not world.policies.knows_default_deny(world.cilium_crd(Line.OLD))
    assert world.policies.knows_default_deny(world.cilium_crd(Line.CURRENT))


@pytest.mark.parametrize("placement", list(Placement))
def test_old_cilium_additive(old_matrix: Matrix, placement: Placement) -> None:
    """On Cilium v1.15, podium writes no policy that changes a flow outside the job."""
    none = world.SET_BY_NAME["none"]
    base, got = base_and_got(old_matrix, none, placement, Mode.CILIUM)
    assert additive_violations(base, got, placement) == []


def test_old_cilium_prunes_enable_default_deny_from_a_policy_written_anyway(
    old_matrix: Matrix,
) -> None:
    result = old_matrix.result(
        world.SET_BY_NAME["none"], Placement.CO_LOCATED, Mode.CILIUM_CREATE_POLICY
    )
    assert result.cilium.startswith("v1.15.")
    (policy,) = world.podium_policies(Placement.CO_LOCATED, Mode.CILIUM_CREATE_POLICY, Line.OLD)
    name = policy["metadata"]["name"]
    assert result.pruned == (
        f'CiliumNetworkPolicy team-a/{name}: unknown field "spec.enableDefaultDeny"',
    )


def test_old_cilium_additive_fails_for_a_policy_written_anyway(old_matrix: Matrix) -> None:
    """What the guard prevents (and what ``old-cilium: create-policy`` accepts): without
    enableDefaultDeny, podium's allow rules put the job's pods into default deny both ways —
    other pods, DNS and monitoring are cut off. The additive property catches it."""
    placement, none = Placement.CO_LOCATED, world.SET_BY_NAME["none"]
    base, got = base_and_got(old_matrix, none, placement, Mode.CILIUM_CREATE_POLICY)
    by_class = {c: {got[f].outcome for f in fs} for c, fs in world.flows(placement).items()}
    assert by_class == {
        CLASSES[0]: {"allow"},
        CLASSES[1]: set(),
        CLASSES[2]: {"deny"},
        CLASSES[3]: {"deny"},
        CLASSES[4]: {"deny"},
        CLASSES[5]: {"deny"},
    }
    assert {world.class_of(placement, f) for f in additive_violations(base, got, placement)} == set(
        CLASSES[2:]
    )


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
