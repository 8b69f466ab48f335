"""What users install is accepted by a real kube-apiserver, and an installed podium reports.

* Every object of ``kubectl kustomize`` of the base and of each overlay, and of the Helm chart with
  several value sets, passes a server-side dry-run create (``?dryRun=All``): the apiserver decodes,
  defaults and validates it and runs admission, and stores nothing. A dry-run create of an object
  that already exists (a MutatingWebhookConfiguration registered by another test, the namespace)
  answers 409 *after* validation and admission, so 409 counts as accepted.
* cert-manager's CRDs are not installed in the harness: its Issuers and Certificates cannot be
  validated by the apiserver. The test asserts that (so it notices when they are installed) and
  validates the rest of the cert-manager overlay, including the annotated webhook configuration.
* With podium serving (the module-scoped ``podium`` fixture of test_podium), admitting a job shows
  on ``/metrics`` and as ``ZonePinned`` and ``PolicyCreated`` Events on the job object.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import build
from testbed.controlplane import ApiError, LocalCluster
from testbed.podium import PIN, Podium
from tests.test_chart import KUBE_VERSION, helm_binary

from .test_podium import (  # noqa: F401  (ns: a fixture, used by name)
    create_concurrently,
    ns,
    pytorch_pods,
    pytorchjob,
    serving,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CHART = ROOT / "charts" / "podium"
NAMESPACE = "podium-system"
CERT_MANAGER_GROUP = "cert-manager.io"

Obj = dict[str, Any]


def kubectl_binary() -> str:
    candidate = Path(sys.executable).parent / "kubectl"
    return str(candidate) if candidate.exists() else "kubectl"


def kustomize(directory: Path) -> list[Obj]:
    result = subprocess.run(
        [kubectl_binary(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def helm_template(*flags: str) -> list[Obj]:
    result = subprocess.run(
        [helm_binary(), "template", "podium", str(CHART), "--kube-version", KUBE_VERSION, *flags],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def label(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta.get('name') or meta['generateName']}"


class Acceptance:
    """Server-side dry-run creates against one cluster, with a cached discovery of resources."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._resources: dict[str, list[Obj]] = {}

    def resources(self, api_version: str) -> list[Obj]:
        if api_version not in self._resources:
            prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            try:
                self._resources[api_version] = self.cluster.request("GET", prefix)["resources"]
            except ApiError as err:
                if err.status != 404:
                    raise
                self._resources[api_version] = []
        return self._resources[api_version]

    def served(self, obj: Obj) -> bool:
        return any(r["kind"] == obj["kind"] for r in self.resources(obj["apiVersion"]))

    def collection(self, obj: Obj) -> str:
        api_version = obj["apiVersion"]
        (resource,) = [
            r
            for r in self.resources(api_version)
            if r["kind"] == obj["kind"] and "/" not in r["name"]
        ]
        prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        if resource["namespaced"]:
            return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{resource['name']}"
        return f"{prefix}/{resource['name']}"

    def dry_run_create(self, obj: Obj) -> str | None:
        """None when the apiserver accepts the object, else its complaint."""
        try:
            self.cluster.request("POST", self.collection(obj), obj, query={"dryRun": "All"})
        except ApiError as err:
            if err.status == 409:  # validated and admitted; only the name is taken
                return None
            return f"{label(obj)}: {err}"
        return None

    def check(self, objects: list[Obj]) -> list[str]:
        """Dry-run create every object of a served kind; the complaints (empty: all accepted)."""
        assert objects
        complaints = []
        for obj in objects:
            if obj["apiVersion"].startswith(f"{CERT_MANAGER_GROUP}/"):
                continue  # see test_cert_manager_kinds_cannot_be_validated_here
            if not self.served(obj):
                complaints.append(f"{label(obj)}: {obj['apiVersion']} is not served")
                continue
            if complaint := self.dry_run_create(obj):
                complaints.append(complaint)
        return complaints


@pytest.fixture(scope="module")
def acceptance(local_cluster: LocalCluster) -> Acceptance:
    """Namespaced objects need their namespace to exist: validate the base's Namespace with a dry
    run, then create it for real (other tests use podium-system too; it is never opted in)."""
    checker = Acceptance(local_cluster)
    (namespace,) = [o for o in kustomize(MANIFESTS / "base") if o["kind"] == "Namespace"]
    assert checker.dry_run_create(namespace) is None
    # ``ml``: the namespace the namespaced-rbac component binds podium's writes in (its example).
    for created in (
        namespace,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
    ):
        try:
            local_cluster.request("POST", "/api/v1/namespaces", created)
        except ApiError as err:
            if err.status != 409:
                raise
    # The Prometheus Operator's own CRDs, so that the PodMonitor and PrometheusRule of the
    # monitoring overlay and chart values are validated like every other object.
    local_cluster.install_crds(build.monitoring_crds())
    return checker


KUSTOMIZATIONS = [
    MANIFESTS / "base",
    *sorted(p.parent for p in (MANIFESTS / "overlays").glob("*/kustomization.yaml")),
]


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_kustomize_output_is_accepted(acceptance: Acceptance, directory: Path) -> None:
    assert acceptance.check(kustomize(directory)) == []


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--set", "certManager.enabled=true", "--set", "cilium.enabled=true"),
        (
            "--set",
            "policyMode=kubernetes",
            "--set",
            "failurePolicy=Fail",
            "--set",
            "timeoutSeconds=30",
            "--set",
            "priorityClassName=",
            "--set",
            "namespaceLabel.key=example.com/training",
            "--set",
            "replicas=3",
            "--set",
            "image.pullPolicy=Always",
        ),
        (
            # the pod values every chart has (issue 30), and namespaced RBAC
            "--set",
            "imagePullSecrets[0].name=regcred",
            "--set",
            "nodeSelector.kubernetes\\.io/os=linux",
            "--set",
            "tolerations[0].key=node-role.kubernetes.io/control-plane",
            "--set",
            "tolerations[0].operator=Exists",
            "--set",
            "tolerations[0].effect=NoSchedule",
            "--set",
            "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=10",
            "--set",
            "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
            ".podAffinityTerm.topologyKey=kubernetes.io/hostname",
            "--set",
            "podLabels.team=ml-platform",
            "--set",
            "podAnnotations.example\\.com/owner=ml-platform",
            "--set",
            "rbac.scope=namespaced",
            "--set",
            "rbac.namespaces={ml}",
        ),
    ],
    ids=["defaults", "cert-manager-and-cilium", "changed-values", "pod-values-namespaced"],
)
def test_helm_output_is_accepted(acceptance: Acceptance, flags: tuple[str, ...]) -> None:
    if (
        not os.environ.get("PODIUM_HELM")
        and subprocess.run(["which", "go"], capture_output=True, check=False).returncode
    ):
        pytest.skip("go is not on PATH: cannot build helm")
    assert acceptance.check(helm_template(*flags)) == []


def test_the_apiserver_refuses_a_broken_object(acceptance: Acceptance) -> None:
    """The check has teeth: a dry run reports what the apiserver's validation says."""
    (webhook,) = [
        o for o in kustomize(MANIFESTS / "base") if o["kind"] == "MutatingWebhookConfiguration"
    ]
    webhook["metadata"]["name"] = "podium-broken"
    webhook["webhooks"][0]["timeoutSeconds"] = 31
    webhook["webhooks"][0]["sideEffects"] = "Some"
    complaint = acceptance.dry_run_create(webhook)
    assert complaint is not None
    assert "timeoutSeconds" in complaint and "sideEffects" in complaint


def test_cert_manager_kinds_cannot_be_validated_here(acceptance: Acceptance) -> None:
    """The harness installs Cilium's and the training operators' CRDs, not cert-manager's: the
    apiserver does not serve cert-manager.io, so Issuers and Certificates are checked field by field
    in tests/test_manifests.py only. Everything else of the overlay is validated above."""
    objects = [
        o
        for o in kustomize(MANIFESTS / "overlays" / "cert-manager")
        if o["apiVersion"].startswith(f"{CERT_MANAGER_GROUP}/")
    ]
    assert {o["kind"] for o in objects} == {"Issuer", "Certificate"}
    assert not any(acceptance.served(o) for o in objects), (
        "cert-manager's CRDs are installed now: validate its objects here too"
    )
    for obj in objects:  # what a CRD-backed kind is always held to: its metadata
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", obj["metadata"]["name"])
        assert obj["metadata"]["namespace"] == NAMESPACE


def test_the_pod_template_passes_pod_security_restricted(
    acceptance: Acceptance, local_cluster: LocalCluster
) -> None:
    """podium-system enforces the restricted Pod Security level: a pod made from the Deployment's
    template (its ServiceAccount created for real) must be admitted by a dry run."""
    objects = kustomize(MANIFESTS / "base")
    # Other tests may have created podium-system plainly (for their Lease): apply ours on top, so
    # its Pod Security labels are there whatever ran before.
    (namespace,) = [o for o in objects if o["kind"] == "Namespace"]
    local_cluster.apply(namespace)
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    try:
        local_cluster.request("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", account)
    except ApiError as err:
        if err.status != 409:
            raise
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "podium-", "namespace": NAMESPACE, **template["metadata"]},
        "spec": template["spec"],
    }
    assert acceptance.dry_run_create(pod) is None
    pod["spec"] = {**template["spec"], "securityContext": {}}
    pod["spec"]["containers"] = [
        {**c, "securityContext": {"runAsNonRoot": True}} for c in template["spec"]["containers"]
    ]
    complaint = acceptance.dry_run_create(pod)
    assert complaint is not None and "restricted" in complaint


# -- an installed podium reports -----------------------------------------------------------------


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    with serving(Podium(local_cluster, tmp_path_factory.mktemp("podium"), config=PIN)) as server:
        yield server


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        sample, value = line.rsplit(" ", 1)
        found = dict(re.findall(r'(\w+)="([^"]*)"', sample))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    return 0.0


def events_for(cluster: LocalCluster, namespace: str, uid: str) -> list[Obj]:
    items: list[Obj] = cluster.request(
        "GET",
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        query={"fieldSelector": f"regarding.uid={uid}"},
    )["items"]
    return items


def test_an_admitted_job_shows_in_metrics_and_events(
    local_cluster: LocalCluster,
    podium: Podium,
    ns: str,  # noqa: F811
) -> None:
    before = podium.get("/metrics")
    job = pytorchjob(local_cluster, ns, "metered", workers=1)  # 16 GPUs
    pods = create_concurrently(local_cluster, pytorch_pods(job, workers=1))
    zone = pods[0]["metadata"]["annotations"]["podium.dev/zone"]
    assert {p["metadata"]["annotations"]["podium.dev/zone"] for p in pods} == {zone}

    after = podium.get("/metrics")
    pinned = {"outcome": "pinned"}
    assert (
        metric(after, "podium_admissions_total", **pinned)
        >= metric(before, "podium_admissions_total", **pinned) + 1
    )
    assert metric(after, "podium_zone_decisions_total", zone=zone) >= (
        metric(before, "podium_zone_decisions_total", zone=zone) + 2
    )
    cnp = {"kind": "CiliumNetworkPolicy"}
    assert metric(after, "podium_policies_created_total", **cnp) == (
        metric(before, "podium_policies_created_total", **cnp) + 1
    )
    assert "podium_events_dropped_total" not in after or (
        metric(after, "podium_events_dropped_total")
        == metric(before, "podium_events_dropped_total")
    )

    uid = job["metadata"]["uid"]
    found: list[Obj] = []

    def reported() -> bool:
        found[:] = events_for(local_cluster, ns, uid)
        return {"ZonePinned", "PolicyCreated"} <= {e["reason"] for e in found}

    local_cluster.wait_for("podium's events on the job", reported, timeout=30)
    by_reason = {e["reason"]: e for e in found}
    assert sorted(e["reason"] for e in found) == ["PolicyCreated", "ZonePinned"]  # once per job
    pinned_event = by_reason["ZonePinned"]
    assert pinned_event["type"] == "Normal"
    assert zone in pinned_event["note"]
    assert pinned_event["regarding"] == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "metered",
        "namespace": ns,
        "uid": uid,
    }
    assert pinned_event["reportingController"] == "podium.dev/webhook"
    policy = by_reason["PolicyCreated"]["related"]
    assert policy["kind"] == "CiliumNetworkPolicy"
    local_cluster.request(
        "GET", f"/apis/cilium.io/v2/namespaces/{ns}/ciliumnetworkpolicies/{policy['name']}"
    )
    # kubectl describe shows them on the job, as users will look for them.
    described = local_cluster.kubectl("describe", "pytorchjob", "metered", "-n", ns).stdout
    assert "ZonePinned" in described and "PolicyCreated" in described


# --- helm install where a webhook of the same name exists ------------------------------------

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@pytest.mark.parametrize(
    ("annotations", "refusal"),
    [
        ({}, "belongs to no Helm release: kubectl apply -k of manifests/, or `make demo"),
        (
            {"meta.helm.sh/release-name": "other", "meta.helm.sh/release-namespace": "ml"},
            "belongs to Helm release other in namespace ml",
        ),
        (
            {"meta.helm.sh/release-name": "clash", "meta.helm.sh/release-namespace": NAMESPACE},
            None,  # this release's own: an upgrade
        ),
    ],
    ids=["kustomize-or-demo", "another-release", "this-release"],
)
def test_helm_install_over_a_webhook_it_does_not_own_says_what_to_do(
    local_cluster: LocalCluster, annotations: dict[str, str], refusal: str | None
) -> None:
    """What `make demo DEMO_ARGS=--keep` or a kustomize install leaves: a configuration of the
    chart's name without Helm's ownership. The chart's lookup (helm install and upgrade; here
    a server-side dry run) refuses it with the fix, not helm's "invalid ownership metadata"."""
    if not os.environ.get("PODIUM_HELM") and not build_go():
        pytest.skip("go is not on PATH: cannot build helm")
    config = kustomize(MANIFESTS / "base")
    (webhook,) = [o for o in config if o["kind"] == "MutatingWebhookConfiguration"]
    webhook["metadata"] = {"name": "clash-podium", "annotations": annotations}
    if annotations:  # what helm writes on the objects of a release
        webhook["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    webhook["webhooks"][0]["clientConfig"] = {"url": "https://127.0.0.1:1/mutate"}
    local_cluster.request("POST", WEBHOOKS, webhook)
    try:
        result = subprocess.run(
            [helm_binary(), "install", "clash", str(CHART), "-n", NAMESPACE, "--dry-run=server"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig)},
        )
    finally:
        local_cluster.request("DELETE", f"{WEBHOOKS}/clash-podium")
    if refusal is None:
        assert result.returncode == 0, result.stderr
        assert "name: clash-podium" in result.stdout
    else:
        assert result.returncode != 0
        assert "MutatingWebhookConfiguration clash-podium already exists" in result.stderr
        assert refusal in result.stderr
        assert "kubectl delete mutatingwebhookconfiguration clash-podium" in result.stderr
        assert "--set fullnameOverride=" in result.stderr


def build_go() -> bool:
    return subprocess.run(["which", "go"], capture_output=True, check=False).returncode == 0


def test_the_install_notes_say_how_to_uninstall_without_leaving_the_private_key(
    local_cluster: LocalCluster,
) -> None:
    """NOTES.txt (rendered only by helm install): the webhook first, the release, then the TLS
    Secret helm does not own — with this release's names."""
    if not os.environ.get("PODIUM_HELM") and not build_go():
        pytest.skip("go is not on PATH: cannot build helm")
    command = [helm_binary(), "install", "canary", str(CHART), "-n", "canary-ns"]
    result = subprocess.run(
        [*command, "--dry-run=server"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig)},
    )
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    # the next step: check the install with helm test, with this release's names
    assert "  helm test canary -n canary-ns --logs\n" in notes
    assert "  kubectl -n canary-ns rollout status deployment/canary-podium\n" in notes
    assert (
        "  kubectl delete mutatingwebhookconfiguration canary-podium\n"
        "  helm uninstall canary -n canary-ns\n"
        "  kubectl -n canary-ns delete secret canary-podium-tls\n"
    ) in notes
