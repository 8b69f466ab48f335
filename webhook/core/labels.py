"""Label, annotation and object-name vocabulary shared by every layer."""

from __future__ import annotations

import functools
import hashlib

PREFIX = "podium.dev/"

#: Namespace label that opts a namespace in (value ``"true"``).
ENABLED = PREFIX + "enabled"
#: Trusted per-gang label podium writes on every pod it admits; policies select on it.
JOB = PREFIX + "job"
#: Pod or job annotation ``"true"``: leave this pod (or every pod of this job) alone.
SKIP = PREFIX + "skip"
#: The zone podium pinned a pod to: an annotation on every pod it admits (empty when unpinned),
#: and a trusted label, like ``JOB``, on every pod of a gang whose zone is known (set at admission
#: when podium pins it, by the reconciler once the pod is bound); zone-scoped policies select on it.
ZONE = PREFIX + "zone"
#: Annotations podium writes on the pods it pins.
REASON = PREFIX + "reason"
POLICY = PREFIX + "policy"
#: podium's scheduling gate (``zone-chooser: hold``): set at admission on a new gang's pods,
#: removed by the releaser in the same patch that pins each pod to the gang's zone.
HOLD_GATE = PREFIX + "hold"
#: Job annotations ``podium release`` sets: release the job's held gang now (``zone``: into the
#: best zone, or the roomiest when none fits; ``unpinned``: into no zone), and who asked.
RELEASE = PREFIX + "release"
RELEASED_BY = PREFIX + "released-by"
#: The reason annotation's value on a held pod.
HELD = "held"
#: Annotation on a held pod: why its gang still waits (the releaser's why, e.g. "needs 4 × 8
#: nvidia.com/gpu in one zone; …; 2nd in line"), written when the why changes, removed at release.
HELD_WHY = PREFIX + "held"
#: Pod annotations (from the job's pod template, as Kueue's ``podset-required-topology``) asking
#: for a topology level below the zone (``topology-levels``, docs/topology.md): its value is one
#: level's node label key. Required: one domain of that level or wait; preferred: the finest
#: level that fits starting there, climbing to the zone. Neither: preferred at the finest level.
REQUIRED_TOPOLOGY = PREFIX + "required-topology"
PREFERRED_TOPOLOGY = PREFIX + "preferred-topology"
#: Annotation on a pod the releaser released into a domain below the zone: the domain's label
#: values, coarse to fine (``key=value,key=value``); absent when released into the zone alone.
TOPOLOGY = PREFIX + "topology"
#: Label on podium's own objects saying what they are (``decision`` or ``policy``).
COMPONENT = PREFIX + "component"

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "podium"

ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
MIRROR_POD = "kubernetes.io/config.mirror"

_MAX_NAME = 253


@functools.lru_cache(maxsize=4096)
def object_name(kind: str, name: str, key: str) -> str:
    """Name of podium's record and policy for one gang: readable, unique per job instance.

    The gang key (the job's UID, plus a group suffix for per-group gangs) is hashed into a short
    suffix so that a new job reusing an old job's name never collides with a leftover object.
    """
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    stem = f"podium-{kind.lower()}-{name}"
    room = _MAX_NAME - len(digest) - 1
    return f"{stem[:room].rstrip('-.')}-{digest}"
