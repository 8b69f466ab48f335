"""Whether a gang runs across zones on purpose. Pure.

podium keeps a gang in one zone unless an admin opts out for it: ``too-big: spread`` releases a
gang no zone could hold unpinned (``release.TOO_BIG_SPREAD``), and ``podium release --unpinned``
releases one into no zone (``release.ADMIN`` with no zone). Such a gang's pods carry an empty
``podium.dev/zone`` and that reason; bound in several zones it is what was asked for, not a split
to repair — ``podium doctor`` does not call it ``split-zones``, nor does the reconciler count it
in ``podium_gangs_split``.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.core import labels
from webhook.core.objects import Obj, annotations_of
from webhook.core.release import ADMIN, TOO_BIG_SPREAD

#: What each deliberate spread's reason means, as a person reads it.
DELIBERATE = {
    TOO_BIG_SPREAD: "released across zones on purpose (too-big: spread: no zone holds it)",
    ADMIN: "released into no zone on purpose (podium release --unpinned)",
}


def deliberate(pods: Iterable[Obj]) -> str | None:
    """Why the gang of ``pods`` runs across zones on purpose, or None: some pod of it was
    released into no zone for a reason an admin chose."""
    for pod in pods:
        notes = annotations_of(pod)
        reason = str(notes.get(labels.REASON) or "")
        if notes.get(labels.ZONE) == "" and reason in DELIBERATE:
            return DELIBERATE[reason]
    return None
