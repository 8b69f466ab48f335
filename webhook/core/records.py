"""podium's decision records as the view and the engine read them: which zone a gang got, when,
and what it needs. Pure; the record objects themselves are built by ``policies.build_record``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

from webhook.core import labels, resources
from webhook.core.objects import Obj, labels_of

#: Who chose a gang's zone, as its record says (``data.zoneChooser``). Not the ``zone-chooser``
#: setting: ``hold`` and ``pin`` both mean podium chooses. A record podium decided (pinned at
#: admission, released from a hold, rebuilt by the reconciler) carries no ``zoneChooser``; one
#: kube-scheduler decides carries ``scheduler``. Any other value — ``podium``, or ``pin`` — reads
#: as podium's, so records written by any version keep their meaning.
PODIUM = "podium"
SCHEDULER = "scheduler"


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    zone: str | None
    reason: str
    gang: str
    decided_at: str
    demand: resources.Resources
    #: Who chooses the gang's zone (``PODIUM`` or ``SCHEDULER``): decided on the gang's first pod
    #: and followed by every later one, whatever the setting says by then.
    chooser: str = PODIUM
    #: The domain below the zone the gang was released into (``topology.describe``: ``key=value``
    #: per level, coarse to fine); empty: the zone alone (and every record written before
    #: ``topology-levels``). Pods of the gang released later follow it.
    domain: str = ""


def read_record(
    obj: Obj | None, gang_key: str, *, parse: Callable[[Obj], Record | None] | None = None
) -> Record | None:
    """The decision in a record object, or None if it is absent, not podium's or another gang's.
    ``parse`` stands in for ``parse_record`` (the engine's reads it once per version of the
    object the view holds)."""
    record = (parse or parse_record)(obj) if obj is not None else None
    return record if record is not None and record.gang == gang_key else None


def parse_record(obj: Obj) -> Record | None:
    """The decision in a record object, for whichever gang it names; None if it is not podium's.
    A pure function of the object, so the view keeps its result (``ClusterView.derived``)."""
    data: Mapping[str, Any] = obj.get("data") or {}
    meta_labels = labels_of(obj)
    gang_key = data.get("gang")
    if not isinstance(gang_key, str) or meta_labels.get(labels.MANAGED_BY) != labels.MANAGER:
        return None
    try:
        demand = {str(k): int(v) for k, v in json.loads(data.get("demand") or "{}").items()}
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        demand = {}
    return Record(
        zone=str(data.get("zone") or "") or None,
        reason=str(data.get("reason") or ""),
        gang=gang_key,
        decided_at=str(data.get("decidedAt") or ""),
        demand=demand,
        chooser=SCHEDULER if data.get("zoneChooser") == SCHEDULER else PODIUM,
        domain=str(data.get("topology") or ""),
    )
