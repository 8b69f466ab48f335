"""``podium doctor``: what is wrong with the training jobs of a live cluster, and how to fix it.

``diagnose`` is pure — the cluster's objects in, a verdict per job and the findings out — so every
check is a table test. The checks, per job (pods grouped into jobs by the framework adapters):

    split-zones     the job's bound pods run in more than one zone
    no-policy       podium admitted the job's pods but its allow policy does not exist
    deny-rule       a Cilium deny rule (CNP or CCNP ingressDeny/egressDeny) selects the job's pods;
                    deny wins over any allow, so only co-location keeps the job's traffic alive
    default-deny    a CNP/CCNP puts the job's pods into default-deny and no policy allows the
                    job's own peers on all ports
    host-network    a training pod uses hostNetwork: pod network policy does not cover it
    not-pinned      a training pod in an opted-in namespace has no podium.dev/zone: podium was
                    down or failed open when it was created
    copied-label    a pod carries the job's podium.dev/job label although its controller chain
                    does not lead to the job (created with a copied label while podium was
                    down): the job's allow policy selects it
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from rich.table import Table

from webhook.core import adapters, engine, labels, policies, selectors
from webhook.core.adapters.base import Gang
from webhook.core.objects import Obj, group_of
from webhook.core.settings import PolicyMode, Settings
from webhook.core.view import TERMINAL_PHASES, ClusterView
from webhook.kube import cache, errors
from webhook.serve import reconciler

if TYPE_CHECKING:
    from webhook.kube import protocols

Check = Literal[
    "split-zones",
    "no-policy",
    "deny-rule",
    "default-deny",
    "host-network",
    "not-pinned",
    "copied-label",
]

CILIUM = "cilium.io"
CNP, CCNP = "CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy"
NS_LABEL = "io.kubernetes.pod.namespace"
NS_LABELS_PREFIX = "io.cilium.k8s.namespace.labels."
SA_LABEL = "io.cilium.k8s.policy.serviceaccount"

FIXES: Mapping[Check, str] = {
    "split-zones": "delete the job's pods (or re-create the job) without podium.dev/skip so podium "
    "pins every pod to one zone",
    "no-policy": "the reconciler re-creates it within a minute; if not, check podium's logs, RBAC "
    "and that the policy CRD is installed",
    "deny-rule": "exempt the job's pods from the rule (e.g. a podium.dev/job DoesNotExist "
    "requirement) or make sure it cannot match traffic between them; keep the job in one zone",
    "default-deny": "allow the job's own pods on all ports (podium's allow policy does this) or "
    "set enableDefaultDeny to false",
    "host-network": "run training pods without hostNetwork, or secure their traffic another way: "
    "pod policies do not apply to them",
    "copied-label": "podium's reconciler removes the label within one pass "
    "(reconcile-interval-seconds); if it stays, check that podium runs and may patch pods",
    "not-pinned": "delete the pod so its controller re-creates it through podium; see `podium "
    "audit --outcome fail-open` for why",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    check: Check
    namespace: str
    job: str
    detail: str
    pods: tuple[str, ...] = ()

    @property
    def fix(self) -> str:
        return FIXES[self.check]

    def as_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "namespace": self.namespace,
            "job": self.job,
            "detail": self.detail,
            "pods": list(self.pods),
            "fix": self.fix,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class JobVerdict:
    namespace: str
    job: str
    gang: str
    pods: int
    zones: tuple[str, ...]
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "job": self.job,
            "gang": self.gang,
            "pods": self.pods,
            "zones": list(self.zones),
            "verdict": "ok" if self.ok else "broken",
            "findings": [f.as_dict() for f in self.findings],
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Diagnosis:
    jobs: tuple[JobVerdict, ...]

    @property
    def findings(self) -> list[Finding]:
        return [f for j in self.jobs for f in j.findings]

    @property
    def ok(self) -> bool:
        return all(j.ok for j in self.jobs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "jobs": [j.as_dict() for j in self.jobs],
            "findings": [f.as_dict() for f in self.findings],
        }


# -- selectors as Cilium evaluates them ------------------------------------------------------


def _strip_source(key: str) -> str:
    """``k8s:app`` and ``any:app`` both mean the label ``app`` (of pod or namespace)."""
    for prefix in ("k8s:", "any:"):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def endpoint_labels(pod: Obj, namespace_obj: Obj | None) -> dict[str, str]:
    """The labels Cilium's identity of a pod carries: its own, its namespace's name and labels,
    its service account."""
    meta = pod.get("metadata") or {}
    out = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    out[NS_LABEL] = str(meta.get("namespace") or "")
    ns_labels = ((namespace_obj or {}).get("metadata") or {}).get("labels") or {}
    out.update({NS_LABELS_PREFIX + str(k): str(v) for k, v in ns_labels.items()})
    out[SA_LABEL] = str((pod.get("spec") or {}).get("serviceAccountName") or "default")
    return out


def selects(selector: Any, endpoint: Mapping[str, str]) -> bool:
    """A label selector (matchLabels + matchExpressions, ANDed); ``{}`` selects everything."""
    if not isinstance(selector, Mapping):
        return False
    for raw, value in (selector.get("matchLabels") or {}).items():
        key = _strip_source(str(raw))
        if key.startswith("reserved:") or endpoint.get(key) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, Mapping):
            return False
        value = endpoint.get(_strip_source(str(expr.get("key") or "")))
        values = [str(v) for v in expr.get("values") or []]
        if not selectors.matches_requirement(expr.get("operator"), value, values):
            return False
    return True


def _rules(policy: Obj) -> list[Mapping[str, Any]]:
    """A Cilium policy's rules: ``spec`` and/or every entry of ``specs``."""
    out = [policy["spec"]] if isinstance(policy.get("spec"), Mapping) else []
    out += [s for s in policy.get("specs") or [] if isinstance(s, Mapping)]
    return out


def _namespace_scoped(policy: Obj, rule_selector: Any) -> Any:
    """A namespaced CNP selects (and by default peers with) pods of its own namespace only."""
    if policy.get("kind") != CNP or not isinstance(rule_selector, Mapping):
        return rule_selector
    ns = str((policy.get("metadata") or {}).get("namespace") or "")
    labels_ = {**(rule_selector.get("matchLabels") or {}), NS_LABEL: ns}
    return {**rule_selector, "matchLabels": labels_}


def _selects_rule(policy: Obj, rule: Mapping[str, Any], endpoint: Mapping[str, str]) -> bool:
    return selects(_namespace_scoped(policy, rule.get("endpointSelector")), endpoint)


def _allows_peers(
    policy: Obj, rule: Mapping[str, Any], direction: str, peers: Sequence[Mapping[str, str]]
) -> bool:
    """Does the rule allow the job's pods in ``direction`` from/to every other member, on all
    ports? (NCCL uses ephemeral ports: a port list is not enough.)"""
    key, entities = (
        ("fromEndpoints", "fromEntities")
        if direction == "ingress"
        else ("toEndpoints", "toEntities")
    )
    for item in rule.get(direction) or []:
        if not isinstance(item, Mapping) or item.get("toPorts"):
            continue
        if set(item.get(entities) or []) & {"all", "cluster"}:
            return True
        for selector in item.get(key) or []:
            scoped = _namespace_scoped(policy, selector)
            if peers and all(selects(scoped, p) for p in peers):
                return True
    return False


def _default_deny(rule: Mapping[str, Any], direction: str) -> bool:
    """Cilium: rules in a direction put the selected pods into default-deny in it, unless
    ``enableDefaultDeny.<direction>`` is false."""
    if not rule.get(direction) and not rule.get(direction + "Deny"):
        return False
    setting = (rule.get("enableDefaultDeny") or {}).get(direction)
    return setting is not False


# -- the diagnosis ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Job:
    gang: Gang
    namespace: str
    pods: list[Obj] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.gang.owner.kind}/{self.gang.owner.name}"


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _annotations(obj: Obj) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def diagnose(
    objects: Iterable[Obj],
    settings: Settings,
    *,
    namespace: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Diagnosis:
    """Verdicts for every training job (in ``namespace``, or everywhere) from a list of the
    cluster's objects: Namespaces, Nodes, Pods, job objects, podium's objects and the Cilium and
    Kubernetes network policies. ``progress(n)`` is told every pod it has looked at."""
    everything = list(objects)
    view = ClusterView.from_objects(everything, zone_label=settings.zone_label)
    cilium = [o for o in everything if group_of(str(o.get("apiVersion", ""))) == CILIUM]
    managed_policies = {
        (str((o.get("metadata") or {}).get("namespace") or ""), _name(o))
        for o in everything
        if o.get("kind") in (CNP, policies.K8S_POLICY_KIND)
        and ((o.get("metadata") or {}).get("labels") or {}).get(labels.MANAGED_BY) == labels.MANAGER
    }
    pods = [
        o
        for o in everything
        if o.get("kind") == "Pod" and not group_of(str(o.get("apiVersion", "")))
    ]
    jobs: dict[tuple[str, str], _Job] = {}
    for i, pod in enumerate(pods, 1):
        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "")
        if (namespace is None or ns == namespace) and (pod.get("status") or {}).get(
            "phase"
        ) not in TERMINAL_PHASES:
            gang = adapters.recognise(pod, ns, view)
            if gang is not None:
                jobs.setdefault((ns, gang.key), _Job(gang, ns)).pods.append(pod)
        if progress is not None:
            progress(i)
    copied = _copied_labels(view, settings, namespace)
    verdicts = [
        _judge(job, view, settings, cilium, managed_policies, copied.pop(key, []))
        for key, job in sorted(jobs.items(), key=lambda kv: (kv[0][0], kv[1].name, kv[0][1]))
    ]
    for (ns, key), found in sorted(copied.items()):  # gangs none of whose own pods are left
        owner = reconciler.job_of_gang(key, view)
        name = f"{owner['kind']}/{owner['name']}" if owner else f"gang {key}"
        names = tuple(sorted(_name(p) for p, _ in found))
        detail = "; ".join(f"{_name(p)}: {why}" for p, why in found)
        finding = Finding("copied-label", ns, name, detail, names)
        verdicts.append(JobVerdict(ns, name, key, 0, (), (finding,)))
    return Diagnosis(tuple(verdicts))


def _copied_labels(
    view: ClusterView, settings: Settings, namespace: str | None
) -> dict[tuple[str, str], list[tuple[Obj, str]]]:
    """Per (namespace, gang): the pods in opted-in namespaces whose podium.dev/job label names
    the gang although their controller chain disowns it, and why."""
    out: dict[tuple[str, str], list[tuple[Obj, str]]] = collections.defaultdict(list)
    for ns, gang in sorted(set(view.gangs())):
        if (namespace is not None and ns != namespace) or not _opted_in(view, settings, ns):
            continue
        for pod in view.pods_in(ns, {labels.JOB: gang}):
            why = engine.disowned_label(pod, ns, view)
            if why is not None:
                out[(ns, gang)].append((pod, why))
    return out


def _opted_in(view: ClusterView, settings: Settings, namespace: str) -> bool:
    ns_labels = ((view.namespace(namespace) or {}).get("metadata") or {}).get("labels") or {}
    return (
        not settings.skips_namespace(namespace)
        and ns_labels.get(settings.namespace_label) == settings.namespace_label_value
    )


def _judge(
    job: _Job,
    view: ClusterView,
    settings: Settings,
    cilium: Sequence[Obj],
    managed_policies: set[tuple[str, str]],
    copied: Sequence[tuple[Obj, str]] = (),
) -> JobVerdict:
    ns, gang = job.namespace, job.gang
    findings: list[Finding] = []

    def find(check: Check, detail: str, pods: Iterable[Obj] = ()) -> None:
        findings.append(Finding(check, ns, job.name, detail, tuple(sorted(_name(p) for p in pods))))

    by_zone: dict[str, list[Obj]] = collections.defaultdict(list)
    for pod in job.pods:
        node = view.node(str((pod.get("spec") or {}).get("nodeName") or ""))
        if node is not None and node.zone:
            by_zone[node.zone].append(pod)
    if len(by_zone) > 1:
        spread = ", ".join(f"{z}: {len(p)}" for z, p in sorted(by_zone.items()))
        find("split-zones", f"pods run in {len(by_zone)} zones ({spread})", job.pods)

    ns_obj = view.namespace(ns)
    ns_labels = ((ns_obj or {}).get("metadata") or {}).get("labels") or {}
    opted_in = (
        not settings.skips_namespace(ns)
        and ns_labels.get(settings.namespace_label) == settings.namespace_label_value
    )
    skipped_job = gang.job_annotations.get(labels.SKIP) == "true"
    if opted_in and not skipped_job:
        unpinned = [
            p
            for p in job.pods
            if labels.ZONE not in _annotations(p) and _annotations(p).get(labels.SKIP) != "true"
        ]
        if unpinned:
            find(
                "not-pinned",
                f"{len(unpinned)} pod(s) have no {labels.ZONE}: podium did not admit them",
                unpinned,
            )
    admitted = [
        p
        for p in job.pods
        if ((p.get("metadata") or {}).get("labels") or {}).get(labels.JOB) == gang.key
    ]
    name = labels.object_name(gang.owner.kind, gang.owner.name, gang.key)
    if (
        opted_in
        and admitted
        and settings.policy_mode is not PolicyMode.NONE
        and (ns, name) not in managed_policies
    ):
        kind = policies.policy_kind(settings.policy_mode)
        find("no-policy", f"{kind[1] if kind else 'policy'} {name} does not exist", admitted)

    if copied:
        why = "; ".join(f"{_name(p)}: {reason}" for p, reason in copied)
        find(
            "copied-label",
            f"{len(copied)} pod(s) carry its {labels.JOB} label without being its own ({why})",
            [p for p, _ in copied],
        )
    hosts = [p for p in job.pods if (p.get("spec") or {}).get("hostNetwork")]
    if hosts:
        find("host-network", f"{len(hosts)} pod(s) use hostNetwork", hosts)

    endpoints = [endpoint_labels(p, ns_obj) for p in job.pods]
    _check_cilium(job, cilium, endpoints, find)
    zones = tuple(sorted(by_zone))
    return JobVerdict(ns, job.name, gang.key, len(job.pods), zones, tuple(findings))


def _check_cilium(
    job: _Job,
    cilium: Sequence[Obj],
    endpoints: Sequence[Mapping[str, str]],
    find: Callable[[Check, str, Iterable[Obj]], None],
) -> None:
    relevant = [
        p
        for p in cilium
        if p.get("kind") == CCNP
        or (p.get("kind") == CNP and (p.get("metadata") or {}).get("namespace") == job.namespace)
    ]
    deny_needs: dict[str, list[str]] = {"ingress": [], "egress": []}
    allowed = {"ingress": False, "egress": False}
    for policy in relevant:
        label = f"{policy.get('kind')} {_name(policy)}"
        for rule in _rules(policy):
            selected = [
                p
                for p, e in zip(job.pods, endpoints, strict=True)
                if _selects_rule(policy, rule, e)
            ]
            if not selected:
                continue
            denies = [d for d in ("ingressDeny", "egressDeny") if rule.get(d)]
            if denies:
                find(
                    "deny-rule", f"{label} has {' and '.join(denies)} and selects the job", selected
                )
            for direction in ("ingress", "egress"):
                if _allows_peers(policy, rule, direction, endpoints):
                    allowed[direction] = True
                if _default_deny(rule, direction):
                    deny_needs[direction].append(label)
    for direction, sources in deny_needs.items():
        if sources and not allowed[direction]:
            find(
                "default-deny",
                f"{', '.join(sorted(set(sources)))} put(s) the job's pods into {direction} "
                f"default-deny and no policy allows the job's own pods on all ports",
                job.pods,
            )


# -- presentation ------------------------------------------------------------------------------


def table(diagnosis: Diagnosis) -> Table:
    out = Table(title=f"podium doctor: {len(diagnosis.jobs)} training job(s)")
    for column in ("namespace", "job", "pods", "zones", "verdict", "finding", "fix"):
        out.add_column(column, overflow="fold")
    for job in diagnosis.jobs:
        zones = ", ".join(job.zones) or "-"
        if job.ok:
            out.add_row(job.namespace, job.job, str(job.pods), zones, "[green]ok[/]", "", "")
            continue
        for i, f in enumerate(job.findings):
            first = i == 0
            out.add_row(
                job.namespace if first else "",
                job.job if first else "",
                str(job.pods) if first else "",
                zones if first else "",
                "[red]broken[/]" if first else "",
                f"{f.check}: {f.detail}",
                f.fix,
            )
    return out


# -- reading the cluster -------------------------------------------------------------------------

#: What ``diagnose`` reads: the kinds podium watches (the cluster's shape, the jobs, podium's
#: policies) and the cluster-wide Cilium policies.
CLUSTERWIDE = ("Namespace", "Node", CCNP)


def kinds_to_read() -> list[tuple[str, str]]:
    kinds = [(r.api_version, r.kind) for r in cache.WATCHED if r.kind != "ConfigMap"]
    return [*kinds, ("cilium.io/v2", CCNP)]


async def collect(
    api: protocols.Objects,
    *,
    namespace: str | None = None,
    on_kind: Callable[[str], None] | None = None,
) -> list[Obj]:
    """Every object ``diagnose`` needs, listed from the apiserver (in ``namespace`` for the
    namespaced kinds when given). Kinds whose CRD is not installed are skipped."""
    out: list[Obj] = []
    for api_version, kind in kinds_to_read():
        if on_kind is not None:
            on_kind(kind)
        scope = None if kind in CLUSTERWIDE else namespace
        try:
            out.extend(await api.list(api_version, kind, namespace=scope))
        except errors.NotFound:
            continue
    return out
