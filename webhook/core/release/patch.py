"""The JSON Patch that releases one held pod (``release_patch``), as the releaser applies it.
Pure.
"""

from __future__ import annotations

from webhook.core import labels, mutation, topology
from webhook.core.objects import Obj
from webhook.core.release.gangs import Release
from webhook.core.settings import Settings


def release_patch(pod: Obj, release: Release, settings: Settings) -> list[dict[str, object]]:
    """The one JSON Patch that releases ``pod`` (as just read from the apiserver): pinned to the
    release's zone with podium's labels and annotations, gate removed behind a ``test``."""
    annotations = {labels.ZONE: release.zone or "", labels.REASON: release.reason}
    if release.policy_name is not None:
        annotations[labels.POLICY] = release.policy_name
    domain = topology.parse(release.domain) if release.zone else ()
    if domain:
        annotations[labels.TOPOLOGY] = release.domain
    return mutation.release(
        pod,
        zone=release.zone,
        gang_key=release.held.key,
        zone_label=settings.zone_label,
        annotations=annotations,
        below=topology.requirements(domain),
    ).patch
