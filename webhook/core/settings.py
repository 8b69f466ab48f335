"""podium's settings: one frozen value handed to every decision, loaded from YAML or defaults."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from webhook.core import labels


class PolicyMode(StrEnum):
    #: A CiliumNetworkPolicy per job: additive (enableDefaultDeny off), all ports between peers.
    CILIUM = "cilium"
    #: A networking.k8s.io NetworkPolicy per job. It isolates the job's pods in both directions:
    #: they can then reach only each other (DNS and storage need policies of their own).
    KUBERNETES = "kubernetes"
    #: No policy; zone pinning only.
    NONE = "none"


class PolicyScope(StrEnum):
    #: One policy per gang and zone: the gang's pods in a zone may talk to the gang's pods in that
    #: zone (selector and peers carry ``podium.dev/zone``). Never opens cross-zone traffic, even
    #: for a gang whose pods ended up in several zones.
    ZONE = "zone"
    #: One policy for all the gang's pods, wherever they run: for a gang split across zones it
    #: also allows the cross-zone traffic between them that the cluster's own policies deny.
    JOB = "job"


class OldCilium(StrEnum):
    #: The installed CiliumNetworkPolicy CRD has no ``enableDefaultDeny`` (Cilium < 1.16): write
    #: no CiliumNetworkPolicy, since there it would put the job's pods into default deny.
    SKIP_POLICY = "skip-policy"
    #: Write it anyway (the job's pods then reach only each other, as in ``kubernetes`` mode).
    CREATE_POLICY = "create-policy"


class Placement(StrEnum):
    #: Among zones where the whole gang fits, the one left with the least free capacity.
    BEST_FIT = "best-fit"
    #: Among zones where the whole gang fits, the one with the most free capacity.
    MOST_FREE = "most-free"


class ZoneChooser(StrEnum):
    """Who decides a gang's zone, and when (docs/design.md, "Modes")."""

    #: The default. podium admits a new gang's pods behind its scheduling gate
    #: (``podium.dev/hold``) and its releaser ungates the whole gang into one zone once that zone
    #: has room for all of it (``webhook.core.release``): no partial gang holds GPUs while it
    #: waits. Pods another system gates or places are pinned as in ``pin`` mode.
    HOLD = "hold"
    #: podium chooses the zone (``placement``) at the gang's first pod and pins every pod to it at
    #: once, room or not (``no-fit`` says what happens without room). Old name: ``podium``.
    PIN = "pin"
    #: An alias of ``PIN`` (not a fifth mode), for code written before ``hold`` was the default.
    PODIUM = "pin"
    #: kube-scheduler chooses it: podium creates a PodGroup with a gang policy and a topology
    #: constraint on ``zone-label`` and names it in every pod's ``spec.schedulingGroup``; no pin.
    #: Needs the GenericWorkload and TopologyAwareWorkloadScheduling gates (k8s ≥ 1.37).
    SCHEDULER = "scheduler"
    #: ``scheduler`` where the apiserver serves PodGroups with topology constraints (probed at
    #: start and every few minutes, never during an admission), ``hold`` elsewhere — and for a
    #: gang a PodGroup cannot express (``podgroups.unfit``).
    AUTO = "auto"

    @classmethod
    def _missing_(cls, value: object) -> ZoneChooser | None:
        # ``podium``, the name ``pin`` had before ``hold`` became the default: settings files
        # written with it keep their meaning.
        return cls.PIN if value == "podium" else None

    @property
    def pins_at_admission(self) -> bool:
        """podium itself decides the zone of a gang that is neither grouped nor held."""
        return self in (ZoneChooser.PIN, ZoneChooser.HOLD)

    @property
    def may_hold(self) -> bool:
        """New gangs may wait behind podium's gate (``auto``: unless kube-scheduler groups them)."""
        return self in (ZoneChooser.HOLD, ZoneChooser.AUTO)


class NoFit(StrEnum):
    """Where a gang goes that no zone has room for: at admission in ``pin`` mode, and when a held
    gang reaches ``hold-timeout-seconds``."""

    #: Pin to the zone with the most free capacity (an autoscaler then scales that zone), and warn.
    PIN_MOST_FREE = "pin-most-free"
    #: Leave the pods unpinned (kube-scheduler places them anywhere), and warn.
    UNPINNED = "unpinned"


class TooBig(StrEnum):
    #: A held gang whose demand exceeds every zone's whole allocatable stays held, said at once
    #: (Event, audit, doctor), until an admin releases it (``podium release``).
    HOLD = "hold"
    #: Such a gang is released unpinned, with one job-wide policy between its own pods (the
    #: cross-zone connectivity it needs): an admin's explicit opt-in.
    SPREAD = "spread"


class HoldOrder(StrEnum):
    #: The oldest held gang that fits nowhere keeps the zone where it comes closest; later gangs
    #: use the other zones only. No gang starves behind a stream of smaller ones, at the price of
    #: that zone's GPUs idling while it drains for the head.
    OLDEST_FIRST = "oldest-first"
    #: Every gang that fits somewhere is released, whatever waits before it: no zone drains for
    #: a waiting gang, and a big gang may wait until ``hold-timeout-seconds`` (for ever with 0).
    FIT_FIRST = "fit-first"


class CapacityBuffers(StrEnum):
    """Whether a held gang that fits no zone asks the autoscaler for room (docs/autoscaling.md)."""

    #: The default: podium creates no CapacityBuffer; such a gang waits as it always did.
    OFF = "off"
    #: podium chooses a zone to grow and creates a CapacityBuffer (``autoscaling.x-k8s.io``)
    #: whose pod is the gang's pod pinned there, so Cluster Autoscaler or Karpenter make room.
    ON = "on"


class BufferDeadline(StrEnum):
    """What a gang does whose buffer brought no room within ``buffer-deadline-seconds``."""

    #: Ask the next zone (the next fewest new nodes) not asked yet; when none is left, as
    #: ``hold-timeout``.
    NEXT_ZONE = "next-zone"
    #: Stop asking: the gang waits as without buffers, ``hold-timeout-seconds`` included.
    HOLD_TIMEOUT = "hold-timeout"


class Mode(StrEnum):
    #: podium pins, holds or groups every gang it recognises and writes its record and policy.
    ENFORCE = "enforce"
    #: podium decides every pod as in ``enforce`` and audits and counts the decision (marked
    #: ``shadow``), but admits the pod unchanged and creates nothing: no record, no policy, no
    #: PodGroup, no hold. ``podium report`` then says what enforcing would have saved.
    SHADOW = "shadow"


class SettingsError(ValueError):
    """A settings file or value that podium cannot use."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    namespace_label: str = labels.ENABLED
    namespace_label_value: str = "true"
    #: A namespace whose opt-in label has this value is in shadow mode whatever ``mode`` says;
    #: ``kubectl label --overwrite`` to ``namespace-label-value`` makes it enforce.
    namespace_shadow_value: str = "shadow"
    #: ``shadow``: every opted-in namespace is in shadow mode (``Mode``).
    mode: Mode = Mode.ENFORCE
    #: podium's own namespace; never mutated.
    own_namespace: str = "podium-system"
    excluded_namespaces: frozenset[str] = frozenset(
        {"kube-system", "kube-public", "kube-node-lease"}
    )
    zone_label: str = labels.ZONE_LABEL
    policy_mode: PolicyMode = PolicyMode.CILIUM
    #: What one allow policy covers: the gang's pods in one zone (default), or all of them.
    policy_scope: PolicyScope = PolicyScope.ZONE
    #: What ``cilium`` mode does where the installed CRD lacks ``enableDefaultDeny``.
    old_cilium: OldCilium = OldCilium.SKIP_POLICY
    placement: Placement = Placement.BEST_FIT
    #: No zone has room for the whole gang (``pin`` at admission, ``hold`` at the timeout).
    no_fit: NoFit = NoFit.PIN_MOST_FREE
    #: Who chooses a gang's zone, and when: podium once the whole gang fits (``hold``), podium at
    #: the first pod (``pin``), kube-scheduler through a PodGroup (``scheduler``), or whichever the
    #: cluster supports (``auto``). Decided once per gang, on its first pod, and recorded.
    zone_chooser: ZoneChooser = ZoneChooser.HOLD
    #: The resource whose free amount ranks zones (others must fit too).
    primary_resource: str = "nvidia.com/gpu"
    #: For this long after a gang's zone is decided, the part of its demand not yet bound to nodes
    #: counts as taken in that zone, so a burst of jobs does not all pick the same free space.
    reservation_seconds: float = 600.0
    #: Seconds one admission may spend on API calls before podium fails open.
    time_budget_seconds: float = 2.0
    #: How long one of podium's objects must be an orphan (its job gone, or no pod of its gang),
    #: first unmarked and then marked, before the reconciler deletes it.
    orphan_grace_seconds: float = 120.0
    #: Seconds between two reconciler passes (of the elected replica).
    reconcile_interval_seconds: float = 30.0
    #: The user podium's own API calls come as (``podium serve`` asks the apiserver at start, e.g.
    #: ``system:serviceaccount:podium-system:podium``): the one user whose updates may remove a
    #: ``podium.dev/job`` label — the reconciler's, on a pod created with a copied one while
    #: podium was down. Empty: nobody may.
    own_user: str = ""
    #: ``zone-chooser: hold``: a held gang that still fits no zone after this long is released
    #: as ``no-fit`` says (pinned to the roomiest zone, so an autoscaler scales that zone, or
    #: unpinned): gated pods never trigger a scale-up. 0 (the default): hold until a zone has
    #: room, since on a cluster of fixed size such a release binds the gang partially and its
    #: GPUs idle (the placement study: docs/benchmarks/placement.md); set it where an autoscaler
    #: grows the GPU nodes.
    hold_timeout_seconds: float = 0.0
    #: ``zone-chooser: hold``: what to do with a gang no zone could hold even empty.
    too_big: TooBig = TooBig.HOLD
    #: ``zone-chooser: hold``: whether the oldest gang that fits nowhere keeps a zone for itself
    #: (``oldest-first``) or every gang that fits goes first (``fit-first``).
    hold_order: HoldOrder = HoldOrder.OLDEST_FIRST
    #: Seconds between two releaser passes of the elected replica (in every mode: gangs held
    #: before a switch away from ``hold`` are still released).
    release_interval_seconds: float = 2.0
    #: The namespaces where podium may write (the chart's ``rbac.namespaces`` with
    #: ``rbac.scope: namespaced``); empty: every namespace. podium never holds a pod where it may
    #: not write — it could not release it — so there it decides as ``pin`` and, when the
    #: apiserver refuses its writes, fails open saying which binding is missing. podium also
    #: reads its own records and policies only there (one watch per namespace).
    writable_namespaces: frozenset[str] = frozenset()
    #: ``zone-chooser: hold``: whether a held gang that fits no zone gets a CapacityBuffer in the
    #: zone podium chooses to grow (``webhook.core.buffers``). Off by default.
    capacity_buffers: CapacityBuffers = CapacityBuffers.OFF
    #: The zones a buffer may grow; empty: every zone some node is in. The pods' own node
    #: selection narrows it further.
    buffer_zones: frozenset[str] = frozenset()
    #: The most of ``primary-resource`` one buffer may ask for, and all of podium's buffers
    #: together; 0: no cap. A gang over a cap waits as without buffers, saying so.
    buffer_max_per_gang: int = 0
    buffer_max_total: int = 0
    #: How long a buffer may ask one zone before ``buffer-on-deadline`` applies.
    buffer_deadline_seconds: float = 900.0
    buffer_on_deadline: BufferDeadline = BufferDeadline.NEXT_ZONE
    #: Node label keys of the network levels below the zone, coarse to fine (docs/topology.md),
    #: e.g. EKS's ``topology.k8s.aws/network-node-layer-2`` and ``-3``: the releaser puts each
    #: gang into the tightest domain of its zone that fits it whole. Empty: the zone alone.
    topology_levels: tuple[str, ...] = ()

    def may_write(self, namespace: str) -> bool:
        return not self.writable_namespaces or namespace in self.writable_namespaces

    def skips_namespace(self, namespace: str) -> bool:
        return namespace == self.own_namespace or namespace in self.excluded_namespaces

    def namespace_mode(self, namespace: str, namespace_labels: Mapping[str, Any]) -> Mode | None:
        """How podium acts on the pods of a namespace with these labels: None when it leaves
        them alone (excluded, or not opted in), ``shadow`` when the opt-in label says
        ``namespace-shadow-value``, else ``mode``."""
        if self.skips_namespace(namespace):
            return None
        value = namespace_labels.get(self.namespace_label)
        if value == self.namespace_shadow_value:
            return Mode.SHADOW
        return self.mode if value == self.namespace_label_value else None

    def enforces(self, namespace: str, namespace_labels: Mapping[str, Any]) -> bool:
        """podium enforces in the namespace: it pins, holds and writes there (in shadow mode it
        changes nothing)."""
        return self.namespace_mode(namespace, namespace_labels) is Mode.ENFORCE

    def __post_init__(self) -> None:
        if self.namespace_shadow_value == self.namespace_label_value:
            raise SettingsError(
                f"namespace-shadow-value and namespace-label-value are both "
                f"{self.namespace_label_value!r}: a namespace could not say which mode it is in"
            )
        if self.zone_label in self.topology_levels:
            raise SettingsError(
                f"topology-levels lists the zone label {self.zone_label!r}: list only the "
                "levels below the zone"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Settings:
        """Build settings from a mapping with kebab- or snake-case keys; unknown keys are errors."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for raw_key, value in data.items():
            key = str(raw_key).replace("-", "_")
            if key not in fields:
                known = ", ".join(sorted(f.replace("_", "-") for f in fields))
                raise SettingsError(f"unknown setting {raw_key!r} (known: {known})")
            values[key] = _coerce(key, value)
        return cls(**values)

    @classmethod
    def load(cls, path: Path | None) -> Settings:
        if path is None:
            return cls()
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as err:
            raise SettingsError(
                f"cannot read settings file {path}: {err.strerror or err} (check the --config path)"
            ) from err
        except yaml.YAMLError as err:
            first = str(err).splitlines()[0] if str(err) else "not YAML"
            raise SettingsError(f"cannot read settings file {path}: {first}") from err
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise SettingsError(f"settings file {path} must hold a mapping")
        return cls.from_mapping(data)


#: Settings in seconds: which values are valid, and how an error says so.
_SECONDS: dict[str, tuple[Callable[[float], bool], str]] = {
    "reservation_seconds": (lambda s: s >= 0, "zero or more seconds"),
    "time_budget_seconds": (lambda s: 0 < s <= 30, "between 0 and 30 seconds"),
    "orphan_grace_seconds": (lambda s: s >= 0, "zero or more seconds"),
    "reconcile_interval_seconds": (lambda s: 0 < s <= 86_400, "between 0 and 86400 seconds"),
    "hold_timeout_seconds": (lambda s: s >= 0, "zero or more seconds"),
    "release_interval_seconds": (lambda s: 0 < s <= 3_600, "between 0 and 3600 seconds"),
    "buffer_deadline_seconds": (lambda s: 0 < s <= 86_400, "between 0 and 86400 seconds"),
}
#: Settings that are counts of the primary resource (0: no cap).
_COUNTS = ("buffer_max_per_gang", "buffer_max_total")


def _coerce(key: str, value: Any) -> Any:
    enums: dict[str, type[StrEnum]] = {
        "policy_mode": PolicyMode,
        "policy_scope": PolicyScope,
        "old_cilium": OldCilium,
        "placement": Placement,
        "no_fit": NoFit,
        "zone_chooser": ZoneChooser,
        "too_big": TooBig,
        "hold_order": HoldOrder,
        "mode": Mode,
        "capacity_buffers": CapacityBuffers,
        "buffer_on_deadline": BufferDeadline,
    }
    if key == "capacity_buffers" and isinstance(value, bool):
        value = "on" if value else "off"  # YAML 1.1 reads an unquoted on/off as a boolean
    try:
        if key in enums:
            return enums[key](str(value))
        if key in _COUNTS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError("a whole number, 0 or more")
            return value
        if key in ("excluded_namespaces", "writable_namespaces", "buffer_zones"):
            if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
                raise TypeError("a list of namespace names")
            return frozenset(str(v) for v in value)
        if key == "topology_levels":
            return _levels(value)
        if key in _SECONDS:
            fits, allowed = _SECONDS[key]
            seconds = float(value)
            if not (math.isfinite(seconds) and fits(seconds)):
                raise ValueError(allowed)
            return seconds
        if not isinstance(value, str):
            raise TypeError("a string")
        return value
    except (TypeError, ValueError) as err:
        # In words, never Python's ("could not convert string to float", "is not a valid …").
        if key in enums:
            why = "it must be one of: " + ", ".join(m.value for m in enums[key])
            if key == "zone_chooser":
                why += " (podium = pin)"
        elif key in _SECONDS:
            why = f"it must be a number, {_SECONDS[key][1]}"
        elif key == "topology_levels":
            why = str(err)
        else:
            why = f"it must be {err}"  # "a string", "a list of namespace names"
        raise SettingsError(f"setting {key.replace('_', '-')}={value!r} is invalid: {why}") from err


def _levels(value: Any) -> tuple[str, ...]:
    """``topology-levels``: node label keys, coarse to fine, each once, the hostname only last
    (as Kueue's Topology), never the zone label (``Settings.__post_init__`` checks the one set)."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise TypeError("it must be a list of node label keys, coarse to fine")
    if not all(isinstance(v, str) for v in value):
        raise TypeError("it must be a list of node label keys (strings), coarse to fine")
    levels = tuple(value)
    for level in levels:
        if not level.rsplit("/", 1)[-1] or any(c.isspace() for c in level):
            raise ValueError(f"{level!r} is not a node label key")
    if len(set(levels)) != len(levels):
        twice = next(v for v in levels if levels.count(v) > 1)
        raise ValueError(f"{twice!r} is listed twice")
    if labels.ZONE_LABEL in levels:
        raise ValueError(f"{labels.ZONE_LABEL!r} is the zone, not a level below it")
    if labels.HOSTNAME_LABEL in levels[:-1]:
        raise ValueError(f"{labels.HOSTNAME_LABEL!r} may only be the last (finest) level")
    return levels
