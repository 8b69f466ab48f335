"""``podium doctor`` and ``podium review`` with ``topology-levels``: a job bound inside the domain
its release said gets a note naming the domain; one whose bound pods run outside it is
``split-domains``; the review's releaser section names the domain it would choose."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.ops.test_doctor import Cluster
from tests.ops.test_offline import held_pods, hogs
from tests.scenarios import base_cluster, pytorchjob
from webhook.core import labels
from webhook.core.settings import Settings, ZoneChooser
from webhook.ops import doctor, offline

L2 = "topology.k8s.aws/network-node-layer-2"
L3 = "topology.k8s.aws/network-node-layer-3"
DOMAIN = f"{L2}=nn-a,{L3}=b1"


def blocks(objects: list[dict[str, Any]], where: dict[str, str]) -> list[dict[str, Any]]:
    """The objects with nodes labelled into layer-3 blocks (node name → block) under nn-a."""
    for obj in objects:
        name = obj["metadata"].get("name")
        if obj["kind"] == "Node" and name in where:
            obj["metadata"]["labels"].update({L2: "nn-a", L3: where[name]})
    return objects


def released_into_domain() -> Cluster:
    cluster = Cluster()
    for pod in cluster.pods:
        pod["metadata"]["annotations"][labels.TOPOLOGY] = DOMAIN
    return cluster


def test_a_job_inside_its_domain_is_ok_with_a_note() -> None:
    cluster = released_into_domain()
    objects = blocks(cluster.objects(), {"c-0": "b1", "c-1": "b1"})
    (verdict,) = doctor.diagnose(objects, cluster.settings).jobs
    assert verdict.ok, verdict.findings
    assert verdict.note == f"released into {DOMAIN}: all 2 bound pod(s) run there, on 2 node(s)"


def test_a_job_whose_pods_span_more_domains_than_its_release_said_is_flagged() -> None:
    cluster = released_into_domain()
    objects = blocks(cluster.objects(), {"c-0": "b1", "c-1": "b2"})
    (verdict,) = doctor.diagnose(objects, cluster.settings).jobs
    (finding,) = verdict.findings
    assert finding.check == "split-domains"
    assert finding.pods == ("llama-worker-0",)
    assert finding.detail == (
        f"released into {DOMAIN}, but 1 bound pod(s) run on 1 node(s) outside it (c-1): its "
        f"pods span 2 {L3} domains (b1, b2)"
    )
    assert "podium.dev/topology" in finding.fix


def test_a_job_released_into_several_blocks_is_ok_inside_any_of_them() -> None:
    """A gang no block fitted was released into the fewest that hold it (``L3=b1,b3``): pods on
    b1 and b3 are inside; one on b2 is not."""
    spread = f"{L2}=nn-a,{L3}=b1,b3"
    cluster = Cluster()
    for pod in cluster.pods:
        pod["metadata"]["annotations"][labels.TOPOLOGY] = spread
    inside = blocks(cluster.objects(), {"c-0": "b1", "c-1": "b3"})
    (verdict,) = doctor.diagnose(inside, cluster.settings).jobs
    assert verdict.ok and verdict.note == (
        f"released into {spread}: all 2 bound pod(s) run there, on 2 node(s)"
    )
    outside = blocks(cluster.objects(), {"c-0": "b1", "c-1": "b2"})
    (verdict,) = doctor.diagnose(outside, cluster.settings).jobs
    (finding,) = verdict.findings
    assert finding.check == "split-domains" and finding.pods == ("llama-worker-0",)


def test_a_job_released_into_the_zone_alone_gets_no_domain_note() -> None:
    cluster = Cluster()
    objects = blocks(cluster.objects(), {"c-0": "b1", "c-1": "b2"})
    (verdict,) = doctor.diagnose(objects, cluster.settings).jobs
    assert verdict.ok and verdict.note is None


def test_review_says_which_domain_the_releaser_would_choose_and_why() -> None:
    """``podium review``'s releaser section with ``topology-levels``: the domain in the verdict
    and its summary line, and the why."""
    pj = pytorchjob(workers=1)
    objects = blocks(base_cluster(pj), {"c-0": "b1", "c-1": "b1", "c-2": "b1", "c-3": "b2"})
    objects[:] = [
        *objects,
        *hogs(["a-0", "b-0", "b-1", "c-4", "c-5", "c-6", "c-7"]),
        *held_pods(pj, 2),
    ]
    settings = Settings(zone_chooser=ZoneChooser.HOLD, topology_levels=(L2, L3))
    (verdict,) = offline.releaser(objects, settings, now=datetime.now(UTC))
    assert (verdict["verdict"], verdict["zone"]) == ("release", "zone-c")
    assert verdict["domain"] == DOMAIN
    assert verdict["topology"].startswith(f"the tightest of 1 {L3} domain(s)")
    assert f"into {DOMAIN}: the tightest of 1" in verdict["detail"]
    (line,) = offline.releaser_lines([verdict])
    assert f"release now into zone [bold]zone-c[/], domain [bold]{DOMAIN}[/]" in line
