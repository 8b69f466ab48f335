"""The cluster policy library is valid against the real schemas (Go-free: runs in `make unit`).

Cilium CRDs of shared/fixtures/crds (v1.19.4), made strict: a field the real schema would prune
is an error here, so a fixture cannot silently mean less than it says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cilium import world, zone_scoped
from tests.schemas import crd_errors, kubernetes_errors

FIXTURES = sorted((Path(__file__).resolve().parent / "policies").glob("*.yaml"))
CRDS = {
    "CiliumNetworkPolicy": "cilium.io_ciliumnetworkpolicies.yaml",
    "CiliumClusterwideNetworkPolicy": "cilium.io_ciliumclusterwidenetworkpolicies.yaml",
}


def errors(obj: dict[str, Any]) -> list[str]:
    if obj["kind"] in CRDS:
        return crd_errors(CRDS[obj["kind"]], "v2", obj)
    return kubernetes_errors(obj)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_fixture_is_valid(path: Path) -> None:
    docs = world.load_fixture(path.name)
    assert docs
    for doc in docs:
        assert errors(doc) == [], f"{path.name}: {doc['metadata']['name']}"


def test_every_fixture_is_in_a_policy_set() -> None:
    used = {f for s in world.SETS for f in s.files}
    assert used == {p.name for p in FIXTURES}


def test_the_zone_scoped_demonstration_is_a_valid_policy() -> None:
    placement = world.Placement.SPLIT_UNPINNED
    (policy,) = world.podium_policies(placement, world.Mode.CILIUM_ZONE_SCOPED)
    assert errors(policy) == []
    assert [
        s["endpointSelector"]["matchLabels"][zone_scoped.ZONE_LABEL] for s in policy["specs"]
    ] == [
        "zone-a",
        "zone-b",
    ]
