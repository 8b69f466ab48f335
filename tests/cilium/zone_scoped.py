"""DEMONSTRATION ONLY — the zone-scoped form of podium's Cilium policy (issue 13, phase 2).

Today podium's policy allows traffic between *all* pods of a job, wherever they run: under an
admin's allow-list zone isolation that opens cross-zone traffic for a job that ended up split.
The target form scopes the policy to the job *and* the zone: one rule per zone, whose selector
and peers both carry ``podium.dev/zone=<zone>``. This helper derives that form by hand from the
real builder's job-wide policy, only so that a test can show the form keeps "never widens". Phase 2
puts it in podium's builder (``policies.build_policy``); then this module and the tests that use
it are replaced by the real builder.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

#: The pod label phase 2 stamps on pinned pods (today podium writes it as an annotation only).
ZONE_LABEL = "podium.dev/zone"


def demo_zone_scoped(job_wide: Mapping[str, Any], zones: Iterable[str]) -> dict[str, Any]:
    """podium's job-wide CiliumNetworkPolicy, rewritten as one rule per zone in ``specs``: the
    job's pods in a zone may talk to the job's pods in that zone, and to nothing else."""
    if job_wide.get("kind") != "CiliumNetworkPolicy":
        raise ValueError("the demonstration covers podium's CiliumNetworkPolicy only")
    out = copy.deepcopy(dict(job_wide))
    spec = out.pop("spec")
    job_labels = spec["endpointSelector"]["matchLabels"]
    specs = []
    for zone in zones:
        peers = {"matchLabels": {**job_labels, ZONE_LABEL: zone}}
        specs.append(
            {
                "description": f"{spec.get('description', '')} in {zone}".strip(),
                "endpointSelector": peers,
                "enableDefaultDeny": {"ingress": False, "egress": False},
                "ingress": [{"fromEndpoints": [peers]}],
                "egress": [{"toEndpoints": [peers]}],
            }
        )
    out["specs"] = specs
    return out
