"""Traffic between pods as Cilium's policy engine judges it, for ``podium doctor``. Pure.

What Cilium (≥ 1.16; ``pkg/policy``, ``pkg/k8s``) decides for one direction of a flow between two
pods, at L3/L4, from the cluster's CiliumNetworkPolicies, CiliumClusterwideNetworkPolicies and
Kubernetes NetworkPolicies — only as far as the doctor needs it to say whether a job's own
traffic is cut by a deny rule or left in default deny. ``tests/cilium/test_doctor_agrees.py``
checks it against Cilium's own engine on random policy sets.

* **Identities** (``identity``): a pod's labels, its namespace's labels (``io.cilium.k8s.namespace
  .labels.<key>``), its namespace, service account and cluster, then Cilium's label filter
  (``LabelFilter``, cilium-config ``labels``): a label the filter drops cannot be selected.
* **Selectors**: matchLabels and matchExpressions on those labels; a key may carry the ``k8s:``
  or ``any:`` source. In a CiliumNetworkPolicy, the subject is always in the policy's namespace,
  and so is a peer selector that names no namespace (``getEndpointSelector``).
* **Peers**: ``from/toEndpoints``, ``from/toEntities`` (``all`` and ``cluster`` match pods); a
  rule with no peer at all allows nothing, unless it has ports: then every peer on them
  (``RulesToPolicyEntries``, ``mergeL4Filter``). An explicitly empty peer list selects nothing.
* **Ports**: none means all; ``ANY`` is TCP, UDP and SCTP; ``port: "0"`` all ports; ``endPort``
  a range. L7 rules count as an allow of their port (the proxy is not judged). Named ports are
  not resolved (the doctor does not know the pods' container ports): they match nothing.
* **Enforcement**: a rule with ingress (or ingressDeny) rules puts its subjects into ingress
  default deny unless ``enableDefaultDeny.ingress`` is false (``Rule.Sanitize``); egress alike;
  where the installed CRD has no ``enableDefaultDeny`` (Cilium < 1.16) the field is pruned. A
  NetworkPolicy is default deny for its policy types. Deny rules win over every allow.
* Host policies (``nodeSelector``) and node, CIDR and FQDN peers never select pods.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from webhook.core import selectors
from webhook.core.objects import Obj, labels_of, metadata_of

Direction = Literal["ingress", "egress"]
Endpoint = Mapping[str, str]
Selects = Callable[[Endpoint], bool]

CNP, CCNP, NP = "CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy", "NetworkPolicy"
NS_LABEL = "io.kubernetes.pod.namespace"
NS_LABELS_PREFIX = "io.cilium.k8s.namespace.labels."
SA_LABEL = "io.cilium.k8s.policy.serviceaccount"
CLUSTER_LABEL = "io.cilium.k8s.policy.cluster"
CLUSTER = "default"
#: What the doctor judges: NCCL's TCP (and the UDP some transports use) on any port.
PROTOCOLS = ("TCP", "UDP")
MAX_PORT = 65535


# -- Cilium's label filter (pkg/labelsfilter) ------------------------------------------------

#: Cilium's default label prefixes (``defaultLabelPrefixCfg``), all of source ``any``.
DEFAULT_PREFIXES = (
    r"reserved:.*",
    re.escape(NS_LABEL),
    re.escape(NS_LABELS_PREFIX),
    re.escape("app.kubernetes.io"),
    re.escape(CLUSTER_LABEL),
    re.escape(SA_LABEL),
    r"!io\.kubernetes",
    r"!kubernetes\.io",
    "!" + re.escape("statefulset.kubernetes.io/pod-name"),
    "!" + re.escape("apps.kubernetes.io/pod-index"),
    "!" + re.escape("batch.kubernetes.io/job-completion-index"),
    "!" + re.escape("batch.kubernetes.io/controller-uid"),
    r"!.*beta\.kubernetes\.io",
    r"!k8s\.io",
    r"!pod-template-generation",
    r"!pod-template-hash",
    r"!controller-revision-hash",
    r"!controller-uid",
    r"!annotation.*",
    r"!etcd_node",
    r"!topology\.kubernetes\.io",
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Prefix:
    source: str
    pattern: re.Pattern[str]
    ignore: bool

    @classmethod
    def parse(cls, entry: str) -> _Prefix:
        source, sep, prefix = entry.partition(":")
        if not sep:
            source, prefix = "", entry
        ignore = prefix.startswith("!")
        return cls(source, re.compile(prefix.removeprefix("!")), ignore)

    def match(self, source: str, key: str) -> int:
        """Length of the match at the start of ``key`` (0: none), as ``LabelPrefix.matches``."""
        if self.source and self.source != source:
            return 0
        found = self.pattern.search(key)
        return found.end() if found is not None and found.start() == 0 else 0


class LabelFilter:
    """Which pod labels are identity-relevant: Cilium's default prefixes plus cilium-config
    ``labels`` (whitespace-separated; one include switches to whitelist mode)."""

    def __init__(self, labels_value: str | None = None) -> None:
        self.value = labels_value
        self.entries = tuple((labels_value or "").split())
        prefixes = [_Prefix.parse(e) for e in DEFAULT_PREFIXES]
        user = [_Prefix.parse(e) for e in self.entries]
        self.whitelist = any(not p.ignore for p in user)
        self.prefixes = tuple(prefixes + user)

    def keeps(self, key: str, source: str = "k8s") -> bool:
        included = ignored = 0
        for prefix in self.prefixes:
            length = prefix.match(source, key)
            if not length:
                continue
            if prefix.ignore:
                ignored = length if not ignored or length < ignored else ignored
            else:
                included = max(included, length)
        return (not self.whitelist and not ignored) or included > ignored

    def fixed(self, keys: Sequence[str], include: str) -> str | None:
        """The ``labels`` value that keeps ``keys`` (and everything kept now), or None when they
        are kept already: the exclusions that hit them dropped, and ``include`` (e.g.
        ``k8s:podium.dev/``) added where the filter is (or then is) a whitelist."""
        if all(self.keeps(k) for k in keys):
            return None
        entries = [
            e
            for e in self.entries
            if not ((p := _Prefix.parse(e)).ignore and any(p.match("k8s", k) for k in keys))
        ]
        if not all(LabelFilter(" ".join(entries)).keeps(k) for k in keys):
            entries.append(include)
        return " ".join(entries)


def identity(pod: Obj, namespace: Obj | None, keep: LabelFilter) -> dict[str, str]:
    """The identity-relevant labels of a pod, keyed without their ``k8s:`` source."""
    meta = metadata_of(pod)
    out = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    out[NS_LABEL] = str(meta.get("namespace") or "")
    ns_labels = labels_of(namespace)
    out.update({NS_LABELS_PREFIX + str(k): str(v) for k, v in ns_labels.items()})
    out[SA_LABEL] = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
    out[CLUSTER_LABEL] = CLUSTER
    return {k: v for k, v in out.items() if keep.keeps(k)}


# -- selectors -------------------------------------------------------------------------------


def _key(raw: Any) -> str | None:
    """A selector key as a pod label key; None for a reserved (non-pod) one."""
    key = str(raw)
    for source in ("k8s:", "any:"):
        if key.startswith(source):
            return key[len(source) :]
    return None if key.startswith(("reserved:", "cidr:", "fqdn:")) else key


def _names_namespace(selector: Mapping[str, Any]) -> bool:
    keys = [*(selector.get("matchLabels") or {})]
    keys += [e.get("key") for e in selector.get("matchExpressions") or [] if isinstance(e, Mapping)]
    return any(_key(k) == NS_LABEL or str(_key(k)).startswith(NS_LABELS_PREFIX) for k in keys)


def selector(raw: Any, *, namespace: str | None = None) -> Selects:
    """A label selector over identities; with ``namespace``, also requiring it (CNP scoping)."""
    if not isinstance(raw, Mapping):
        return lambda _ep: False
    match = dict(raw.get("matchLabels") or {})
    exprs = [e for e in raw.get("matchExpressions") or [] if isinstance(e, Mapping)]

    def selects(ep: Endpoint) -> bool:
        if namespace is not None and ep.get(NS_LABEL) != namespace:
            return False
        for raw_key, value in match.items():
            key = _key(raw_key)
            if key is None or ep.get(key) != str(value):
                return False
        for expr in exprs:
            key = _key(expr.get("key") or "")
            have = ep.get(key) if key is not None else None
            values = [str(v) for v in expr.get("values") or []]
            if not selectors.matches_requirement(expr.get("operator"), have, values):
                return False
        return True

    return selects


# -- ports -----------------------------------------------------------------------------------

#: protocol → sorted, disjoint, inclusive port ranges.
Ports = dict[str, list[tuple[int, int]]]
ALL: Ports = {p: [(1, MAX_PORT)] for p in PROTOCOLS}


def _union(a: Ports, b: Ports) -> Ports:
    out: Ports = {}
    for proto in {*a, *b}:
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted([*a.get(proto, []), *b.get(proto, [])]):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        out[proto] = merged
    return out


def _minus(a: Ports, b: Ports) -> Ports:
    out: Ports = {}
    for proto, ranges in a.items():
        left = list(ranges)
        for blo, bhi in b.get(proto, []):
            nxt = []
            for lo, hi in left:
                if bhi < lo or blo > hi:
                    nxt.append((lo, hi))
                    continue
                if lo < blo:
                    nxt.append((lo, blo - 1))
                if hi > bhi:
                    nxt.append((bhi + 1, hi))
            left = nxt
        if left:
            out[proto] = left
    return out


def _empty(ports: Ports) -> bool:
    return not any(ports.values())


def _port_number(raw: Any) -> int | None:
    try:
        return int(str(raw))
    except ValueError:
        return None  # a named port: not resolved


def _ports(entries: Iterable[Any], *, default_proto: str) -> Ports:
    """The ports of ``toPorts[].ports[]`` (Cilium) or ``ports[]`` (NetworkPolicy)."""
    out: Ports = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        proto = str(entry.get("protocol") or default_proto).upper()
        protos = PROTOCOLS if proto == "ANY" else (proto,) if proto in PROTOCOLS else ()
        if "port" not in entry or entry.get("port") in (None, "", "0", 0):
            span = (1, MAX_PORT)
        elif (first := _port_number(entry.get("port"))) is None:
            continue
        else:
            span = (first, int(entry.get("endPort") or first))
        out = _union(out, {p: [span] for p in protos})
    return out


def _cilium_ports(item: Mapping[str, Any]) -> Ports | None:
    """The ports a Cilium rule item covers; None when it names none (all)."""
    to_ports = item.get("toPorts")
    if not to_ports:
        return None
    return _ports(
        (p for tp in to_ports if isinstance(tp, Mapping) for p in tp.get("ports") or [{}]),
        default_proto="ANY",
    )


# -- rules -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """One allow or deny entry: whom it applies to, in which direction, which peers and ports."""

    source: str
    direction: Direction
    deny: bool
    subject: Selects
    peers: Selects
    #: None: every port.
    ports: Ports | None


@dataclasses.dataclass(frozen=True, slots=True)
class Enforcer:
    """A policy that puts its subjects into default deny in one direction."""

    source: str
    direction: Direction
    subject: Selects


ENTITIES_WITH_PODS = frozenset({"all", "cluster"})


def _cilium_peers(
    item: Mapping[str, Any], direction: Direction, namespace: str | None
) -> Selects | None:
    """The pods a Cilium rule item's peers select; None when it names no peer at all."""
    ends, entities = (
        ("fromEndpoints", "fromEntities")
        if direction == "ingress"
        else ("toEndpoints", "toEntities")
    )
    named = [
        k
        for k in item
        if k.startswith("from" if direction == "ingress" else "to") and k != "toPorts"
    ]
    if not named:
        return None
    picks: list[Selects] = []
    for raw in item.get(ends) or []:
        scoped = namespace if isinstance(raw, Mapping) and not _names_namespace(raw) else None
        picks.append(selector(raw, namespace=scoped))
    if set(item.get(entities) or []) & ENTITIES_WITH_PODS:
        picks.append(lambda _ep: True)
    return lambda ep: any(pick(ep) for pick in picks)


def _cilium_rules(policy: Obj, *, default_deny_known: bool) -> tuple[list[Rule], list[Enforcer]]:
    kind = str(policy.get("kind"))
    meta = metadata_of(policy)
    namespace = str(meta.get("namespace") or "") if kind == CNP else None
    source = f"{kind} {meta.get('name')}"
    specs = [policy["spec"]] if isinstance(policy.get("spec"), Mapping) else []
    specs += [s for s in policy.get("specs") or [] if isinstance(s, Mapping)]
    rules: list[Rule] = []
    enforcers: list[Enforcer] = []
    for spec in specs:
        if "endpointSelector" not in spec:
            continue  # a host policy (nodeSelector): its subject is the node, not a pod
        subject = selector(spec["endpointSelector"], namespace=namespace or None)
        setting = (spec.get("enableDefaultDeny") or {}) if default_deny_known else {}
        for direction in ("ingress", "egress"):
            allows = spec.get(direction) or []
            denies = spec.get(direction + "Deny") or []
            if (allows or denies) and setting.get(direction) is not False:
                enforcers.append(Enforcer(source, direction, subject))
            for deny, items in ((False, allows), (True, denies)):
                for item in items:
                    if not isinstance(item, Mapping):
                        continue
                    ports = _cilium_ports(item)
                    peers = _cilium_peers(item, direction, namespace)
                    if peers is None:
                        if ports is None:
                            continue  # `{}`: enforces, allows (or denies) nothing
                        peers = lambda _ep: True  # noqa: E731 - an L4-only rule: every peer
                    rules.append(Rule(source, direction, deny, subject, peers, ports))
    return rules, enforcers


def _any(picks: Sequence[Selects]) -> Selects:
    """Any of ``picks``; every peer when there are none (a NetworkPolicy rule without peers)."""
    if not picks:
        return lambda _ep: True
    return lambda ep: any(pick(ep) for pick in picks)


def _k8s_peer(peer: Any, namespace: str, namespaces: Mapping[str, Obj]) -> Selects:
    if not isinstance(peer, Mapping) or "ipBlock" in peer:
        return lambda _ep: False
    pods = selector(peer.get("podSelector") or {})
    if "namespaceSelector" not in peer:
        return lambda ep: ep.get(NS_LABEL) == namespace and pods(ep)
    ns_selector = selector(peer.get("namespaceSelector") or {})

    def selects(ep: Endpoint) -> bool:
        ns_obj = namespaces.get(ep.get(NS_LABEL, ""))
        ns_labels = labels_of(ns_obj)
        return ns_selector({str(k): str(v) for k, v in ns_labels.items()}) and pods(ep)

    return selects


def _k8s_rules(policy: Obj, namespaces: Mapping[str, Obj]) -> tuple[list[Rule], list[Enforcer]]:
    meta = metadata_of(policy)
    namespace = str(meta.get("namespace") or "")
    source = f"{NP} {meta.get('name')}"
    spec = policy.get("spec") or {}
    subject = selector(spec.get("podSelector") or {}, namespace=namespace)
    types = spec.get("policyTypes") or ["Ingress", *(["Egress"] if spec.get("egress") else [])]
    rules: list[Rule] = []
    enforcers: list[Enforcer] = []
    directions: tuple[tuple[Direction, str], ...] = (("ingress", "from"), ("egress", "to"))
    for direction, peers_key in directions:
        if direction.capitalize() not in types:
            continue
        enforcers.append(Enforcer(source, direction, subject))
        for item in spec.get(direction) or []:
            if not isinstance(item, Mapping):
                continue
            peers_raw = item.get(peers_key) or []
            peers = _any([_k8s_peer(p, namespace, namespaces) for p in peers_raw])
            ports = _ports(item["ports"], default_proto="TCP") if item.get("ports") else None
            rules.append(Rule(source, direction, False, subject, peers, ports))
    return rules, enforcers


@dataclasses.dataclass(frozen=True, slots=True)
class Policies:
    rules: tuple[Rule, ...]
    enforcers: tuple[Enforcer, ...]

    @classmethod
    def parse(
        cls,
        objects: Iterable[Obj],
        namespaces: Mapping[str, Obj],
        *,
        default_deny_known: bool = True,
    ) -> Policies:
        """Every CNP, CCNP and NetworkPolicy among ``objects``; ``default_deny_known`` False
        prunes ``enableDefaultDeny`` as the CRD of a Cilium < 1.16 does."""
        rules: list[Rule] = []
        enforcers: list[Enforcer] = []
        for obj in objects:
            kind = obj.get("kind")
            if kind in (CNP, CCNP) and str(obj.get("apiVersion", "")).startswith("cilium.io/"):
                r, e = _cilium_rules(obj, default_deny_known=default_deny_known)
            elif kind == NP and str(obj.get("apiVersion", "")).startswith("networking.k8s.io/"):
                r, e = _k8s_rules(obj, namespaces)
            else:
                continue
            rules += r
            enforcers += e
        return cls(tuple(rules), tuple(enforcers))


def describe(ports: Ports) -> str:
    """``TCP 1-29499, 40001-65535; UDP all`` — the ports of a set, in few words."""
    parts = []
    for proto in PROTOCOLS:
        ranges = ports.get(proto) or []
        if not ranges:
            continue
        if ranges == [(1, MAX_PORT)]:
            parts.append(f"{proto} all ports")
            continue
        spans = ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)
        parts.append(f"{proto} {spans}")
    return "; ".join(parts)


# -- a job's own traffic -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Cut:
    """Where the job's own traffic is cut in one direction: by deny rules or by default deny."""

    direction: Direction
    #: ``deny-rule`` or ``default-deny``
    by: str
    #: The policies behind it (deny rules, or the policies that enforce the default deny).
    sources: tuple[str, ...]
    ports: Ports
    #: The pods at the enforcing end (the sender for egress, the receiver for ingress).
    pods: tuple[str, ...]


def job_cuts(policies: Policies, members: Sequence[tuple[str, Endpoint]]) -> list[Cut]:
    """Where traffic between two of a job's pods (``(name, identity)``, every ordered pair of
    different pods, every TCP and UDP port) is denied, per direction and cause.

    Pods that every selector treats alike are judged once (a job of 1,000 pods, each its own
    identity through a replica-index label, is a handful of classes)."""
    rules, enforcers = policies.rules, policies.enforcers

    def signature(ep: Endpoint) -> tuple[frozenset[int], frozenset[int], frozenset[int]]:
        return (
            frozenset(i for i, r in enumerate(rules) if r.subject(ep)),
            frozenset(i for i, r in enumerate(rules) if r.peers(ep)),
            frozenset(i for i, e in enumerate(enforcers) if e.subject(ep)),
        )

    classes: dict[tuple[frozenset[int], ...], list[str]] = {}
    for name, ep in members:
        classes.setdefault(signature(ep), []).append(name)
    found: dict[tuple[Direction, str], tuple[set[str], Ports, set[str]]] = {}
    for local_sig, local_pods in classes.items():
        subject, _, enforcing = local_sig
        for peer_sig in classes:
            if peer_sig == local_sig and len(local_pods) < 2:
                continue  # a pod's traffic with itself is not the job's traffic
            for direction in ("ingress", "egress"):
                allowed: Ports = {}
                denied: Ports = {}
                deny_sources: set[str] = set()
                for i in subject & peer_sig[1]:
                    rule = rules[i]
                    if rule.direction != direction:
                        continue
                    ports = ALL if rule.ports is None else rule.ports
                    if rule.deny:
                        denied = _union(denied, ports)
                        deny_sources.add(rule.source)
                    else:
                        allowed = _union(allowed, ports)
                enforced = {
                    enforcers[i].source for i in enforcing if enforcers[i].direction == direction
                }
                left = _minus(_minus(ALL, allowed), denied) if enforced else {}
                for by, sources, ports in (
                    ("deny-rule", deny_sources, denied),
                    ("default-deny", enforced, left),
                ):
                    if _empty(ports):
                        continue
                    pods, had, srcs = found.setdefault((direction, by), (set(), {}, set()))
                    pods.update(local_pods)
                    srcs.update(sources)
                    found[(direction, by)] = (pods, _union(had, ports), srcs)
    return [
        Cut(direction, by, tuple(sorted(srcs)), ports, tuple(sorted(pods)))
        for (direction, by), (pods, ports, srcs) in sorted(found.items())
    ]
