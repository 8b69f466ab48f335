"""``podium doctor`` (webhook/ops/doctor.py):
the pure diagnosis as table tests, selector semantics, and
the command's output and exit code over a stubbed cluster read."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from tests.builders import PodBuilder, namespace
from tests.ops.conftest import UNREACHABLE
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, labels, policies
from webhook.core.settings import OldCilium, PolicyMode, PolicyScope, Settings
from webhook.core.view import ClusterView
from webhook.ops import cli, cli_options, doctor

Obj = dict[str, Any]
JOB_NAME = "PyTorchJob/llama"


def cnp(name: str, spec: Obj, ns: str = NS, kind: str = doctor.CNP) -> Obj:
    meta: Obj = {"name": name}
    if kind == doctor.CNP:
        meta["namespace"] = ns
    return {"apiVersion": "cilium.io/v2", "kind": kind, "metadata": meta, "spec": spec}


def ccnp(name: str, spec: Obj) -> Obj:
    return cnp(name, spec, kind=doctor.CCNP)


class Cluster:
    """A PyTorchJob (master + 1 worker) that podium admitted, pinned to zone-c and bound there,
    with its allow policy — healthy — plus whatever a case changes."""

    def __init__(self) -> None:
        self.job = pytorchjob(workers=1)
        self.key = self.job["metadata"]["uid"]
        self.pods = [
            pytorch_pod(self.job, rtype, 0)
            .uid()
            .label(labels.JOB, self.key)
            .label(labels.ZONE, "zone-c")
            .label("app", "trainer")
            .annotate(labels.ZONE, "zone-c")
            .annotate(labels.REASON, "best-fit")
            .bound(node)
            .obj()
            for rtype, node in (("master", "c-0"), ("worker", "c-1"))
        ]
        view = ClusterView.from_objects(
            base_cluster(self.job, *self.pods), zone_label="x", kept=adapters.KEPT
        )
        gang = adapters.recognise(self.pods[0], NS, view)
        assert gang is not None
        self.policy = policies.build_policy(
            gang=gang,
            namespace=NS,
            mode=PolicyMode.CILIUM,
            scope=PolicyScope.ZONE,
            zone="zone-c",
            record_zone="zone-c",
        )
        self.extra: list[Obj] = []
        self.settings = Settings()

    def objects(self) -> list[Obj]:
        policy = [self.policy] if self.policy else []
        return base_cluster(self.job, *self.pods, *policy, *self.extra)

    def diagnose(self, **kw: Any) -> doctor.Diagnosis:
        return doctor.diagnose(self.objects(), self.settings, **kw)


def split(c: Cluster) -> None:
    c.pods[1]["spec"]["nodeName"] = "a-1"


def no_policy(c: Cluster) -> None:
    c.policy = None


def host_network(c: Cluster) -> None:
    c.pods[1]["spec"]["hostNetwork"] = True


def not_pinned(c: Cluster) -> None:
    del c.pods[1]["metadata"]["annotations"][labels.ZONE]
    del c.pods[1]["metadata"]["labels"][labels.JOB]


def copied_label(c: Cluster) -> None:
    """A pod created while podium was down, with the job's label copied onto it."""
    c.extra.append(PodBuilder(NS, name="spy").uid().label(labels.JOB, c.key).bound("c-2").obj())


def deny_in_namespace(c: Cluster) -> None:
    c.extra.append(
        cnp(
            "zones",
            {
                "endpointSelector": {"matchLabels": {"app": "trainer"}},
                "ingressDeny": [{"fromEndpoints": [{}]}],
            },
        )
    )


def deny_clusterwide_by_namespace(c: Cluster) -> None:
    c.extra.append(
        ccnp(
            "isolate-zones",
            {
                "endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": NS}},
                "egressDeny": [{"toEndpoints": [{}]}],
            },
        )
    )


NOT_SYSTEM = {
    "matchExpressions": [
        {"key": "k8s:io.kubernetes.pod.namespace", "operator": "NotIn", "values": ["kube-system"]}
    ]
}


def deny_clusterwide_by_expression(c: Cluster) -> None:
    c.extra.append(
        ccnp(
            "not-system",
            {"endpointSelector": NOT_SYSTEM, "egressDeny": [{"toEndpoints": [NOT_SYSTEM]}]},
        )
    )


def deny_to_the_world(c: Cluster) -> None:
    """A deny toward the world: it turns egress enforcement on (no enableDefaultDeny) but podium's
    policy allows the job's pods, and no pod is part of the world."""
    c.extra.append(
        ccnp(
            "no-world", {"endpointSelector": NOT_SYSTEM, "egressDeny": [{"toEntities": ["world"]}]}
        )
    )


def empty_deny_rule(c: Cluster) -> None:
    """``ingressDeny: [{}]`` names no peer and no port: it denies nothing (Cilium's
    ``mergeL4Filter``), though it turns ingress enforcement on."""
    c.extra.append(
        cnp("zones", {"endpointSelector": {"matchLabels": {"app": "trainer"}}, "ingressDeny": [{}]})
    )


def netpol(c: Cluster) -> None:
    """The namespace's default deny, Kubernetes style (ingress and egress)."""
    c.extra.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny", "namespace": NS},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        }
    )


def netpol_default_deny(c: Cluster) -> None:
    c.policy = None
    for pod in c.pods:
        pod["metadata"]["labels"].pop(labels.JOB)  # not admitted: no no-policy finding either
    netpol(c)


def deny_in_specs_list(c: Cluster) -> None:
    rule = {"endpointSelector": {}, "ingressDeny": [{"fromEntities": ["all"]}]}
    policy = cnp("many", {"endpointSelector": {"matchLabels": {"x": "y"}}})
    policy["specs"] = [rule]
    c.extra.append(policy)


def default_deny_without_allow(c: Cluster) -> None:
    c.policy = None
    c.pods[0]["metadata"]["labels"].pop(labels.JOB)  # not admitted: no no-policy finding either
    c.pods[1]["metadata"]["labels"].pop(labels.JOB)
    c.extra.append(
        cnp(
            "frontend-only",
            {
                "endpointSelector": {"matchLabels": {"app": "trainer"}},
                "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "frontend"}}]}],
            },
        )
    )


SCHEDULER_SAYS = (
    "0/11 nodes are available: 3 node(s) didn't match Pod's node affinity/selector, "
    "8 Insufficient nvidia.com/gpu. preemption: 0/11 nodes are available: 11 No preemption "
    "victims found for incoming pod."
)


def pending(c: Cluster, reason: str = "Unschedulable") -> None:
    """The worker, pinned to zone-c, not bound: the scheduler says why (``reason``)."""
    worker = c.pods[1]
    del worker["spec"]["nodeName"]
    condition = {"type": "PodScheduled", "status": "False", "reason": reason}
    if reason == "Unschedulable":
        condition["message"] = SCHEDULER_SAYS
    worker["status"] = {"phase": "Pending", "conditions": [condition]}


NO_FINDINGS: list[str] = []
CASES: list[tuple[str, Callable[[Cluster], None], list[str]]] = [
    ("healthy", lambda c: None, NO_FINDINGS),
    ("split across zones", split, ["split-zones"]),
    ("no allow policy", no_policy, ["no-policy"]),
    ("hostNetwork pod", host_network, ["host-network"]),
    ("pod podium did not pin", not_pinned, ["not-pinned"]),
    ("a pod with the job's label copied", copied_label, ["copied-label"]),
    ("CNP deny rule selects the job", deny_in_namespace, ["deny-rule"]),
    ("CCNP deny by namespace label", deny_clusterwide_by_namespace, ["deny-rule"]),
    ("CCNP deny by NotIn expression", deny_clusterwide_by_expression, ["deny-rule"]),
    ("a deny toward the world does not cut the job", deny_to_the_world, NO_FINDINGS),
    ("an empty deny rule denies nothing", empty_deny_rule, NO_FINDINGS),
    ("NetworkPolicy default deny, no allow", netpol_default_deny, ["default-deny"] * 2),
    ("NetworkPolicy default deny, podium's policy allows the peers", netpol, NO_FINDINGS),
    (
        "a pod without its zone label is outside the zone-scoped policy",
        lambda c: (c.pods[1]["metadata"]["labels"].pop(labels.ZONE), deny_in_namespace(c)),
        ["no-policy", "deny-rule"],
    ),
    ("deny rule in a specs list", deny_in_specs_list, ["deny-rule"]),
    (
        "default-deny and nothing allows peers",
        default_deny_without_allow,
        ["default-deny"],
    ),
    (
        "CNP deny rule in another namespace",
        lambda c: c.extra.append(
            cnp("zones", {"endpointSelector": {}, "ingressDeny": [{}]}, ns="other")
        ),
        NO_FINDINGS,
    ),
    (
        "CCNP deny for another namespace",
        lambda c: c.extra.append(
            ccnp(
                "elsewhere",
                {
                    "endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "b"}},
                    "egressDeny": [{}],
                },
            )
        ),
        NO_FINDINGS,
    ),
    (
        "default-deny, but podium's policy allows the peers",
        lambda c: c.extra.append(
            cnp(
                "frontend-only",
                {
                    "endpointSelector": {},
                    "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "frontend"}}]}],
                },
            )
        ),
        NO_FINDINGS,
    ),
    (
        "a rule with enableDefaultDeny false",
        lambda c: (
            no_policy(c),
            c.extra.append(
                cnp(
                    "additive",
                    {
                        "endpointSelector": {},
                        "enableDefaultDeny": {"ingress": False, "egress": False},
                        "ingress": [{"fromEntities": ["world"]}],
                    },
                )
            ),
        ),
        ["no-policy"],
    ),
    (
        "peers allowed only on some ports is not enough",
        lambda c: (
            default_deny_without_allow(c),
            c.extra.append(
                cnp(
                    "ports",
                    {
                        "endpointSelector": {},
                        "ingress": [
                            {
                                "fromEndpoints": [{"matchLabels": {"app": "trainer"}}],
                                "toPorts": [{"ports": [{"port": "29500"}]}],
                            }
                        ],
                    },
                )
            ),
        ),
        ["default-deny"],
    ),
    (
        "a pod annotated podium.dev/skip is not a podium failure",
        lambda c: (
            not_pinned(c),
            c.pods[1]["metadata"]["annotations"].update({labels.SKIP: "true"}),
        ),
        NO_FINDINGS,
    ),
    ("a pinned pod the scheduler cannot place in its zone", pending, ["unschedulable"]),
    (
        "a pending pod the scheduler has not judged yet",
        lambda c: (pending(c), c.pods[1]["status"].pop("conditions")),
        NO_FINDINGS,
    ),
    (
        "a pod another system holds back (SchedulingGated)",
        lambda c: pending(c, "SchedulingGated"),
        NO_FINDINGS,
    ),
    (
        "an unschedulable pod podium did not pin is only not-pinned",
        lambda c: (pending(c), not_pinned(c)),
        ["not-pinned"],
    ),
    (
        "finished pods are not judged",
        lambda c: (split(c), c.pods[1].update(status={"phase": "Succeeded"})),
        NO_FINDINGS,
    ),
]


@pytest.mark.parametrize(("case", "change", "checks"), CASES, ids=[c[0] for c in CASES])
def test_checks(case: str, change: Callable[[Cluster], None], checks: list[str]) -> None:
    c = Cluster()
    change(c)
    result = c.diagnose()
    (job,) = result.jobs
    assert (job.namespace, job.job) == (NS, JOB_NAME)
    assert [f.check for f in job.findings] == checks
    assert job.ok is (not checks)
    assert result.ok is (not checks)


def test_unschedulable_quotes_the_scheduler_and_says_what_to_do() -> None:
    c = Cluster()
    pending(c)
    (finding,) = c.diagnose().findings
    assert finding.detail == (
        "1 pod(s) pinned to zone-c cannot be scheduled there, the scheduler says: "
        f'"{SCHEDULER_SAYS}"; 1 of its 2 pod(s) are bound and hold their resources'
    )
    assert finding.pods == ("llama-worker-0",)
    assert finding.fix.startswith("zone-c has no room for them: free capacity there")
    assert "delete the job and submit it again" in finding.fix


def test_split_names_the_zones_and_the_pods() -> None:
    c = Cluster()
    split(c)
    (finding,) = c.diagnose().findings
    assert finding.detail == "pods run in 2 zones (zone-a: 1, zone-c: 1)"
    assert finding.pods == ("llama-master-0", "llama-worker-0")
    assert "podium.dev/skip" in finding.fix


def test_a_copied_label_is_reported_on_the_job_it_names() -> None:
    c = Cluster()
    copied_label(c)
    (finding,) = c.diagnose().findings
    assert (finding.job, finding.pods) == (JOB_NAME, ("spy",))
    assert "no job in its controller chain (no controller)" in finding.detail
    assert "reconciler removes the label" in finding.fix
    # the job's own pods gone (finished), the copy still selected by its policy: still reported
    for pod in c.pods:
        pod["status"] = {"phase": "Succeeded"}
    (job,) = c.diagnose().jobs
    assert (job.job, job.pods, [f.check for f in job.findings]) == (
        JOB_NAME,
        0,
        ["copied-label"],
    )


def test_policy_mode_none_expects_no_policy() -> None:
    c = Cluster()
    no_policy(c)
    c.settings = Settings(policy_mode=PolicyMode.NONE)
    assert c.diagnose().ok


def test_a_namespace_that_did_not_opt_in_is_not_expected_to_be_pinned() -> None:
    c = Cluster()
    not_pinned(c)
    no_policy(c)
    objects = [
        namespace(NS, enabled=False)
        if o["kind"] == "Namespace" and o["metadata"]["name"] == NS
        else o
        for o in c.objects()
    ]
    assert doctor.diagnose(objects, c.settings).findings == []


def test_the_namespace_filter_and_progress() -> None:
    c = Cluster()
    other = copy.deepcopy(c.pods[0])
    other["metadata"]["namespace"] = "sandbox"
    seen: list[int] = []
    result = doctor.diagnose([*c.objects(), other], c.settings, namespace=NS, progress=seen.append)
    assert [j.namespace for j in result.jobs] == [NS]
    assert seen == [1, 2, 3]


def test_non_training_pods_are_not_jobs() -> None:
    c = Cluster()
    c.pods[1]["metadata"].pop("ownerReferences")
    assert [j.pods for j in c.diagnose().jobs] == [1]


# --- the command ------------------------------------------------------------------------------


@pytest.fixture
def stub_cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster()

    async def collect(
        _api: Any,
        *,
        namespace: str | None = None,
        on_kind: Any = None,
        own_namespace: str = "",
        notes: Any = None,
    ) -> list[Obj]:
        return c.objects()

    monkeypatch.setattr(doctor, "collect", collect)
    connected: list[tuple[Any, Any]] = []

    def connect(kubeconfig: Any, context: Any) -> tuple[_Closable, None]:
        connected.append((kubeconfig, context))
        return _Closable(), None

    monkeypatch.setattr(cli_options, "connect_cluster", connect)
    c.connected = connected
    return c


class _Closable:
    configuration = None

    def close(self) -> None:
        pass


def test_command_healthy_exits_0(stub_cluster: Cluster) -> None:
    result = CliRunner().invoke(cli.app, ["doctor", "--context", "prod"])
    assert result.exit_code == 0, result.output
    assert "no problems found" in result.output
    assert "llama" in result.output
    assert stub_cluster.connected == [(None, "prod")]
    # piped: plain columns, no box drawing
    assert not set("─│┃━┏") & set(result.stdout)
    assert result.stdout.split()[:2] == ["NAMESPACE", "JOB"]


def test_command_json_lists_findings_and_exits_1(stub_cluster: Cluster) -> None:
    split(stub_cluster)
    host_network(stub_cluster)
    result = CliRunner().invoke(cli.app, ["doctor", "-o", "json"])
    assert result.exit_code == 1
    doc = orjson.loads(result.stdout)
    assert doc["ok"] is False
    assert [f["check"] for f in doc["findings"]] == ["split-zones", "host-network"]
    assert doc["jobs"][0]["verdict"] == "broken"
    assert all(f["fix"] for f in doc["findings"])


def test_command_a_namespace_that_does_not_exist_is_exit_2(stub_cluster: Cluster) -> None:
    """A typo in -n must not read as "no problems found"."""
    result = CliRunner().invoke(cli.app, ["doctor", "-n", "nosuchns"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "Error: namespace nosuchns not found\n"


def test_command_a_namespace_not_opted_in_says_how_to_opt_in(stub_cluster: Cluster) -> None:
    result = CliRunner().invoke(cli.app, ["doctor", "-n", "sandbox"])
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "namespace sandbox has not opted in to podium, which leaves its pods alone; opt it in "
        f"with: kubectl label namespace sandbox {labels.ENABLED}=true\n"
    )
    opted_in = CliRunner().invoke(cli.app, ["doctor", "-n", NS])
    assert (opted_in.exit_code, opted_in.stderr) == (0, "")
    assert "llama" in opted_in.stdout


def test_command_an_unreachable_cluster_is_one_line(unreachable_kubeconfig: Path) -> None:
    result = CliRunner().invoke(cli.app, ["doctor", "--kubeconfig", str(unreachable_kubeconfig)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [UNREACHABLE]


def test_command_refuses_an_unknown_output(stub_cluster: Cluster) -> None:
    result = CliRunner().invoke(cli.app, ["doctor", "-o", "xml"])
    assert result.exit_code == 2


# --- the cluster: an old Cilium, identity labels -------------------------------------------


def cnp_crd(*, default_deny: bool) -> Obj:
    spec = {"properties": {"enableDefaultDeny": {"type": "object"}}} if default_deny else {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "ciliumnetworkpolicies.cilium.io"},
        "spec": {
            "versions": [
                {"name": "v2", "schema": {"openAPIV3Schema": {"properties": {"spec": spec}}}}
            ]
        },
    }


def cilium_config(value: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cilium-config", "namespace": "kube-system"},
        "data": {"labels": value},
    }


@pytest.mark.parametrize("old_cilium", list(OldCilium))
def test_an_old_cilium_is_a_cluster_finding_and_no_job_misses_a_policy(
    old_cilium: OldCilium,
) -> None:
    c = Cluster()
    no_policy(c)
    c.settings = Settings(old_cilium=old_cilium)
    c.extra.append(cnp_crd(default_deny=False))
    result = c.diagnose()
    (finding,) = result.cluster
    assert (finding.check, finding.job) == ("old-cilium", "(cluster)")
    assert "no enableDefaultDeny (Cilium < 1.16)" in finding.detail
    assert ("writes no CiliumNetworkPolicy" in finding.detail) == (
        old_cilium is OldCilium.SKIP_POLICY
    )
    assert "upgrade Cilium" in finding.fix
    # podium withholds its policy on purpose: no no-policy finding for that
    assert [f.check for f in result.jobs[0].findings] == (
        [] if old_cilium is OldCilium.SKIP_POLICY else ["no-policy"]
    )
    assert not result.ok
    c.extra = [cnp_crd(default_deny=True)]
    c.settings = Settings()
    assert c.diagnose().cluster == ()


def test_on_an_old_cilium_enable_default_deny_is_pruned() -> None:
    """The CRD drops enableDefaultDeny: podium's own (create-policy) policy then puts the job
    into default deny, and so does an 'additive' cluster policy."""
    c = Cluster()
    c.settings = Settings(old_cilium=OldCilium.CREATE_POLICY)
    c.extra.append(cnp_crd(default_deny=False))
    assert [f.check for f in c.diagnose().jobs[0].findings] == []  # podium allows its own pods
    c.policy = None
    c.extra.append(
        ccnp(
            "additive-deny-world",
            {
                "endpointSelector": {},
                "enableDefaultDeny": {"ingress": False, "egress": False},
                "ingressDeny": [{"fromEntities": ["world"]}],
            },
        )
    )
    checks = [f.check for f in c.diagnose().jobs[0].findings]
    assert checks == ["no-policy", "default-deny"]


@pytest.mark.parametrize(
    ("value", "fixed"),
    [
        ("", None),  # the default filter keeps podium's labels
        ("k8s:topology.kubernetes.io/zone", "k8s:topology.kubernetes.io/zone k8s:podium.dev/"),
        ("k8s:app k8s:podium.dev/", None),
        ("k8s:podium.dev/job", "k8s:podium.dev/job k8s:podium.dev/"),  # the zone key is missing
        ("k8s:!podium.dev/job", ""),  # an exclusion: drop it (an include would whitelist)
        ("k8s:!podium k8s:app", "k8s:app k8s:podium.dev/"),
        ("k8s:!controller-uid", None),
        # Cilium reads the source before the first ":": "!k8s" here, an include that matches
        # nothing, and the filter becomes a whitelist (pkg/labelsfilter parseLabelPrefix).
        ("!k8s:controller-uid", "!k8s:controller-uid k8s:podium.dev/"),
    ],
)
def test_identity_labels_gives_the_exact_value_to_set(value: str, fixed: str | None) -> None:
    c = Cluster()
    c.extra.append(cilium_config(value))
    result = c.diagnose()
    findings = [f for f in result.cluster if f.check == "identity-labels"]
    if fixed is None:
        assert findings == []
        return
    (finding,) = findings
    assert f'set labels: "{fixed}" in ConfigMap kube-system/cilium-config' in finding.fix
    assert "podium's policies select no pod" in finding.detail
    # Set as told, the labels are identity-relevant: the finding goes.
    c.extra = [cilium_config(fixed)]
    assert [f.check for f in c.diagnose().cluster] == []


def test_a_whitelist_without_podiums_labels_leaves_the_job_in_default_deny() -> None:
    """What Cilium does with it: podium's policy selects no pod, so under a namespace default
    deny the job's own traffic is denied — the doctor says so, and why."""
    c = Cluster()
    netpol(c)
    c.extra.append(cilium_config("k8s:app"))
    result = c.diagnose()
    assert [f.check for f in result.cluster] == ["identity-labels"]
    assert [f.check for f in result.jobs[0].findings] == ["default-deny", "default-deny"]


def test_job_scope_needs_only_the_job_label() -> None:
    c = Cluster()
    c.settings = Settings(policy_scope=PolicyScope.JOB)
    c.extra.append(cilium_config("k8s:podium.dev/job"))
    assert [f.check for f in c.diagnose().cluster] == []
