"""A point-in-time view of the cluster that decisions read; never the live client.

The same class serves the offline ``podium review`` (built from a list of objects) and the server
(kept current by the watch cache, one event at a time). It holds only what decisions read, so that
a cluster at the official scale limits (5,000 nodes, 150,000 pods) fits in well under 200 MiB:

* a node as a ``NodeInfo`` (zone, labels, allocatable, usable, taints), not the node object;
* a pod as a ``PodSummary``: identity, node, phase, requests, controller reference, and only the
  labels, annotations and env values podium's adapters read from *other* pods (``Kept``). The
  pod object podium admits comes from the review, never from here;
* everything else (namespaces, job objects, batch Jobs, StatefulSets, podium's records and
  policies) as the object itself: there are few of them.

``ClusterView`` (``store``) is a store that applies watch events and a set of indexes, each
answering one question and updated by the store with a direct call per event: who carries a UID,
which pods carry a gang's member label, how many of a gang's pods are held or released, what a
gang's bound pods use (``indexes``); room per node and candidate nodes per zone for each recent
scheduling constraint (``capacity``); decision records in the order decided and what recently
decided gangs still reserve (``reservations``). Everything a decision asks is answered without a
scan of all pods or all nodes. Decisions depend on the read-only ``View`` protocol (``protocol``).

What to keep of pods is handed in (``Kept``, made by the adapters registry as ``adapters.KEPT``)
rather than read from the registry: every adapter reads the view, so the view imports no adapter.
"""

from typing import TYPE_CHECKING

from webhook.core.view.capacity import CANDIDATE_CACHE_SIZE, ZoneNodes
from webhook.core.view.protocol import View
from webhook.core.view.store import ClusterView
from webhook.core.view.summaries import TERMINAL_PHASES, Kept, NodeInfo, PodSummary, has_gate

if TYPE_CHECKING:
    # ``mypy webhook`` proves the store satisfies the protocol decisions read.
    _view: View = ClusterView(zone_label="", kept=Kept())

__all__ = [
    "CANDIDATE_CACHE_SIZE",
    "TERMINAL_PHASES",
    "ClusterView",
    "Kept",
    "NodeInfo",
    "PodSummary",
    "View",
    "ZoneNodes",
    "has_gate",
]
