"""The cluster policy library is valid against the real schemas (Go-free: runs in `make unit`).

Cilium CRDs of testbed/crds (v1.19.4), made strict: a field the real schema would prune
is an error here, so a fixture cannot silently mean less than it says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cilium import world
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


@pytest.mark.parametrize("mode", [world.Mode.CILIUM, world.Mode.KUBERNETES])
def test_podiums_zone_scoped_policies_of_a_split_job_are_valid(mode: world.Mode) -> None:
    """The policies podium's engine and reconciler write for a job split across zones: one per
    zone, each valid against the real schema."""
    written = world.podium_policies(world.Placement.SPLIT_UNPINNED, mode)
    assert [p["metadata"]["labels"][world.PODIUM_ZONE] for p in written] == ["zone-a", "zone-b"]
    for policy in written:
        assert errors(policy) == []
