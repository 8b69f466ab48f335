"""``podium doctor`` (webhook/ops/doctor.py):
the pure diagnosis as table tests, selector semantics, and
the command's output and exit code over a stubbed cluster read."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from tests.builders import PodBuilder, namespace
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, labels, policies
from webhook.core.settings import PolicyMode, Settings
from webhook.core.view import ClusterView
from webhook.ops import cli, doctor

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
            .label("app", "trainer")
            .annotate(labels.ZONE, "zone-c")
            .annotate(labels.REASON, "best-fit")
            .bound(node)
            .obj()
            for rtype, node in (("master", "c-0"), ("worker", "c-1"))
        ]
        view = ClusterView.from_objects(base_cluster(self.job, *self.pods), zone_label="x")
        gang = adapters.recognise(self.pods[0], NS, view)
        assert gang is not None
        self.policy = policies.build_policy(gang=gang, namespace=NS, mode=PolicyMode.CILIUM)
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
        cnp("zones", {"endpointSelector": {"matchLabels": {"app": "trainer"}}, "ingressDeny": [{}]})
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


def deny_clusterwide_by_expression(c: Cluster) -> None:
    c.extra.append(
        ccnp(
            "not-system",
            {
                "endpointSelector": {
                    "matchExpressions": [
                        {
                            "key": "k8s:io.kubernetes.pod.namespace",
                            "operator": "NotIn",
                            "values": ["kube-system"],
                        }
                    ]
                },
                "egressDeny": [{"toEntities": ["world"]}],
            },
        )
    )


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


SELECTORS = [
    ({}, {"app": "x"}, True),
    ({"matchLabels": {"app": "x"}}, {"app": "x"}, True),
    ({"matchLabels": {"k8s:app": "x"}}, {"app": "x"}, True),
    ({"matchLabels": {"any:app": "x"}}, {"app": "y"}, False),
    ({"matchLabels": {"reserved:host": ""}}, {"app": "x"}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}, {"app": "x"}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {}, False),
    ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, {}, True),
    ({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, {"app": "x"}, False),
    (
        {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
        {"app": "x"},
        False,
    ),
    (None, {"app": "x"}, False),
]


@pytest.mark.parametrize(("selector", "endpoint", "expected"), SELECTORS)
def test_selects(selector: Any, endpoint: dict[str, str], expected: bool) -> None:
    assert doctor.selects(selector, endpoint) is expected


def test_endpoint_labels_carry_namespace_name_labels_and_service_account() -> None:
    c = Cluster()
    got = doctor.endpoint_labels(c.pods[0], namespace(NS))
    assert got[doctor.NS_LABEL] == NS
    assert got[doctor.NS_LABELS_PREFIX + "podium.dev/enabled"] == "true"
    assert got[doctor.SA_LABEL] == "default"


# --- the command ------------------------------------------------------------------------------


@pytest.fixture
def stub_cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    c = Cluster()

    async def collect(_api: Any, *, namespace: str | None = None, on_kind: Any = None) -> list[Obj]:
        return c.objects()

    monkeypatch.setattr(doctor, "collect", collect)
    connected: list[tuple[Any, Any]] = []

    def connect(kubeconfig: Any, context: Any) -> tuple[_Closable, None]:
        connected.append((kubeconfig, context))
        return _Closable(), None

    monkeypatch.setattr(cli, "_connect", connect)
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


def test_command_refuses_an_unknown_output(stub_cluster: Cluster) -> None:
    result = CliRunner().invoke(cli.app, ["doctor", "-o", "yaml"])
    assert result.exit_code == 2
