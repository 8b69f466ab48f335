"""``topology-levels`` made visible: the release and wait audit entries carry the domain and why
(and nothing new without it: ``tests/audit_entries.golden``), and the GangReleased Event names
the domain."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from webhook.core import audit
from webhook.serve import events

DOMAIN = "topology.k8s.aws/network-node-layer-2=nn-a,topology.k8s.aws/network-node-layer-3=b2"
JOB: Any = {"kind": "PyTorchJob", "name": "llama", "uid": "u1", "gang": "u1"}


def released(now: datetime, **kw: str) -> audit.AuditEntry:
    return audit.released(
        time=now,
        namespace="team-a",
        job=JOB,
        zone="zone-a",
        user="podium",
        reason="best-fit",
        detail="zone-a has room",
        effects=[],
        pods=["llama-master-0"],
        waited_seconds=1.0,
        latency_ms=1.0,
        error=None,
        **kw,
    )


def test_a_release_into_a_domain_says_which_and_why(now: datetime) -> None:
    entry = released(now, domain=DOMAIN, topology="the tightest of 2")
    assert (entry["domain"], entry["topology"]) == (DOMAIN, "the tightest of 2")
    assert list(entry)[-2:] == ["domain", "topology"]  # after the keys releases always wrote
    (event,) = events.build(entry, instance="podium-0", now=now)
    assert f"into zone zone-a, domain {DOMAIN} after" in event["note"]


def test_without_a_domain_the_entry_and_event_are_as_before(now: datetime) -> None:
    entry = released(now)
    assert "domain" not in entry and "topology" not in entry
    (event,) = events.build(entry, instance="podium-0", now=now)
    assert "domain" not in event["note"]


def test_a_required_level_that_waits_says_why(now: datetime) -> None:
    why = "requires one topology.k8s.aws/network-node-layer-3 domain with 32 nvidia.com/gpu free"
    entry = audit.held(
        time=now,
        namespace="team-a",
        job=JOB,
        reason="held",
        detail=why + "; 1st in line",
        result="position 1",
        pods=["llama-master-0"],
        waited_seconds=3.0,
        topology=why,
    )
    assert entry["topology"] == why and "domain" not in entry
    (event,) = events.build(entry, instance="podium-0", now=now)
    assert why in event["note"]
