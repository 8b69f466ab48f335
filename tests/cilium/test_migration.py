"""Migrating a running job to zone-scoped policies does not break it — judged by Cilium's engine.

A job admitted before podium scoped its policies to zones has pods without ``podium.dev/zone`` and
one job-wide policy. podium's reconciler (world.migration runs the real one) first labels the
running pods with their node's zone, and narrows the policy only once every one carries it. At
every step — before, between and after the passes — the job's pods in one zone reach each other
wherever the cluster allows it to podium (the *sufficient* property), and podium changes no flow
outside the job (*additive*); at the end the policies are what a job admitted today gets.
"""

from __future__ import annotations

import pytest

from tests.cilium import world
from tests.cilium.matrix import additive_violations, insufficiencies
from tests.cilium.oracle import Oracle
from tests.cilium.world import CLASSES, Mode, Placement, PolicySet

pytestmark = pytest.mark.e2e

WELL_CONFIGURED = [s for s in world.SETS if not s.misconfigured]


@pytest.mark.parametrize("placement", list(Placement))
@pytest.mark.parametrize("policy_set", WELL_CONFIGURED, ids=[s.name for s in WELL_CONFIGURED])
def test_every_step_of_a_migration_keeps_the_job_talking(
    oracle: Oracle, policy_set: PolicySet, placement: Placement
) -> None:
    steps = world.migration(placement)
    flows = world.all_flows(placement)
    for done, pods, podiums in steps:
        run = oracle.run
        base = run(
            policy_set.policies(), pods, flows, label_prefixes=policy_set.label_prefixes
        ).by_flow()
        got = run(
            [*policy_set.policies(), *podiums],
            pods,
            flows,
            label_prefixes=policy_set.label_prefixes,
        ).by_flow()
        assert insufficiencies(base, got, placement) == [], done
        assert additive_violations(base, got, placement) == [], done
    *_, (_, _, final) = steps
    assert final == world.podium_policies(placement, Mode.CILIUM)


def test_the_steps_label_first_and_narrow_after() -> None:
    """What the reconciler does, pass by pass: a pinned job's pods get their zone, then its policy
    is narrowed in place; an unpinned job's pods get their zone and each zone its policy, then the
    job-wide policy it no longer needs goes."""
    pinned = [done for done, _, _ in world.migration(Placement.CO_LOCATED)]
    assert pinned == [
        (),
        (("label", "zone-known", "Pod"),) * 3,
        (("repair", "policy-scope", "CiliumNetworkPolicy"),),
    ]
    unpinned = [done for done, _, _ in world.migration(Placement.SPLIT_UNPINNED)]
    assert unpinned == [
        (),
        (
            *(("label", "zone-known", "Pod"),) * 3,
            *(("create", "missing-policy", "CiliumNetworkPolicy"),) * 2,
        ),
        (("delete", "policy-not-needed", "CiliumNetworkPolicy"),),
    ]


def test_until_narrowed_a_split_job_keeps_its_old_cross_zone_traffic(oracle: Oracle) -> None:
    """The job-wide policy stays until every running pod carries its zone: for one pass a split
    job's cross-zone traffic is still what the old policy allowed — then the cluster decides."""
    policy_set, placement = world.SET_BY_NAME["ns-default-deny-cnp"], Placement.SPLIT_UNPINNED
    cross = world.flows(placement)[CLASSES[1]]
    outcomes = []
    for _, pods, podiums in world.migration(placement):
        got = oracle.run([*policy_set.policies(), *podiums], pods, cross).by_flow()
        outcomes.append({got[f].outcome for f in cross})
    assert outcomes == [{"allow"}, {"allow"}, {"deny"}]
