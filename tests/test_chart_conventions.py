"""The chart follows Helm's conventions (issue 30): the standard labels on every object with a
selector that stays what it was, the pod values every chart has, a `helm test` hook, a values
table generated from values.yaml, the kubeVersion it requires, and `helm lint` clean with all of
it. helm: as in tests/test_chart.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts import chart_readme
from tests.test_chart import (
    CHART,
    EVERYTHING,
    KUBE_VERSION,
    Keyed,
    chart,
    helm_template,
)

Obj = dict[str, Any]

#: Every value this issue adds, set to something other than its default.
POD_VALUES: Obj = {
    "imagePullSecrets": [{"name": "regcred"}],
    "podLabels": {"team": "ml-platform"},
    "podAnnotations": {"example.com/owner": "ml-platform"},
    "nodeSelector": {"kubernetes.io/os": "linux", "node-role.example.com/system": "true"},
    "tolerations": [
        {"key": "node-role.example.com/system", "operator": "Exists", "effect": "NoSchedule"}
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                        ]
                    }
                ]
            }
        }
    },
    "podSecurityContext": {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "securityContext": {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    },
    "priorityClassName": "ml-critical",
    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
}

STANDARD = (
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)


def deployment_of(objects: Keyed, namespace: str = "podium-system", name: str = "podium") -> Obj:
    deployment: Obj = objects[("Deployment", namespace, name)]
    return deployment


def container_of(objects: Keyed, namespace: str = "podium-system", name: str = "podium") -> Obj:
    (container,) = deployment_of(objects, namespace, name)["spec"]["template"]["spec"]["containers"]
    return dict(container)


@pytest.fixture(scope="module")
def helm() -> str:
    from tests.test_chart import helm_binary  # noqa: PLC0415  (skips without helm or go)

    return helm_binary()


def probe_pod(objects: Keyed, namespace: str = "podium-system", name: str = "podium") -> Obj:
    pod: Obj = objects[("Pod", namespace, f"{name}-test-admission")]
    return pod


# --- standard labels --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "flags"),
    [
        ("podium", EVERYTHING),
        ("canary", ("--set", "rbac.scope=namespaced", "--set", "rbac.namespaces={ml,cv}")),
        ("podium", ("--set", "namespace.name=webhooks", "--set", "namespace.create=true")),
    ],
    ids=["everything", "namespaced-canary", "own-namespace"],
)
def test_every_object_carries_the_standard_labels(
    helm: str, release: str, flags: tuple[str, ...]
) -> None:
    objects = chart(helm, "--namespace", "default", *flags, release=release)
    name = "podium" if release == "podium" else f"{release}-podium"
    for k, obj in objects.items():
        labels = obj["metadata"].get("labels", {})
        assert [label for label in STANDARD if label not in labels] == [], k
        assert labels["helm.sh/chart"] == "podium-0.1.0"
        assert labels["app.kubernetes.io/instance"] == release
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        want = f"{name}-test" if k[0] == "Pod" else name
        assert labels["app.kubernetes.io/name"] == want, k
    pod_labels = deployment_of(objects, _where(flags), name)["spec"]["template"]["metadata"][
        "labels"
    ]
    assert [label for label in STANDARD if label not in pod_labels] == []


def _where(flags: tuple[str, ...]) -> str:
    return "webhooks" if "namespace.name=webhooks" in flags else "default"


def selectors(objects: Keyed, namespace: str, name: str) -> dict[str, dict[str, str]]:
    """Every label selector of the release that is meant to pick podium's pods."""
    deployment = objects[("Deployment", namespace, name)]
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    out = {
        "Deployment": deployment["spec"]["selector"]["matchLabels"],
        "Service": objects[("Service", namespace, name)]["spec"]["selector"],
        "PodDisruptionBudget": objects[("PodDisruptionBudget", namespace, name)]["spec"][
            "selector"
        ]["matchLabels"],
        "PodMonitor": objects[("PodMonitor", namespace, name)]["spec"]["selector"]["matchLabels"],
        "CiliumNetworkPolicy": objects[
            ("CiliumNetworkPolicy", namespace, f"{name}-allow-apiserver")
        ]["spec"]["endpointSelector"]["matchLabels"],
        **{f"spread {c['topologyKey']}": c["labelSelector"]["matchLabels"] for c in spread},
    }
    return out


@pytest.mark.parametrize(("release", "name"), [("podium", "podium"), ("canary", "canary-podium")])
def test_selectors_stay_the_name_label_alone_and_pick_podiums_pods_only(
    helm: str, tmp_path: Path, release: str, name: str
) -> None:
    """A Deployment's selector is immutable: it stays {app.kubernetes.io/name: <fullname>} as
    before the standard labels (so `helm upgrade` of an existing release works), whatever pod
    labels are added. Every selector picks the Deployment's pods and not the helm test pod."""
    objects = chart(helm, *EVERYTHING, values=POD_VALUES, tmp_path=tmp_path, release=release)
    pod_labels = deployment_of(objects, "podium-system", name)["spec"]["template"]["metadata"][
        "labels"
    ]
    probe_labels = probe_pod(objects, name=name)["metadata"]["labels"]
    for what, selector in selectors(objects, "podium-system", name).items():
        assert selector == {"app.kubernetes.io/name": name} or (
            what == "PodMonitor"
            and selector
            == {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "webhook"}
        ), what
        assert selector.items() <= pod_labels.items(), what
        assert not selector.items() <= probe_labels.items(), what


# --- the pod values -----------------------------------------------------------------------------


def test_the_pod_values_reach_the_deployment(helm: str, tmp_path: Path) -> None:
    objects = chart(helm, values=POD_VALUES, tmp_path=tmp_path)
    template = deployment_of(objects)["spec"]["template"]
    spec = template["spec"]
    assert spec["imagePullSecrets"] == POD_VALUES["imagePullSecrets"]
    assert spec["nodeSelector"] == POD_VALUES["nodeSelector"]
    assert spec["tolerations"] == POD_VALUES["tolerations"]
    assert spec["affinity"] == POD_VALUES["affinity"]
    # helm merges a map given in values into the default's: what is not given stays
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert spec["securityContext"] == {
        **defaults["podSecurityContext"],
        **POD_VALUES["podSecurityContext"],
    }
    assert spec["priorityClassName"] == "ml-critical"
    assert template["metadata"]["labels"]["team"] == "ml-platform"
    annotations = template["metadata"]["annotations"]
    assert annotations["example.com/owner"] == "ml-platform"
    assert "podium.dev/config-checksum" in annotations  # still there beside them
    container = container_of(objects)
    assert container["securityContext"] == {
        **defaults["securityContext"],
        **POD_VALUES["securityContext"],
    }
    assert container["resources"] == {**defaults["resources"], **POD_VALUES["resources"]}
    # The test pod runs where podium's pods may: the same pull secrets, node selector, tolerations.
    probe = probe_pod(objects)["spec"]
    for field in ("imagePullSecrets", "nodeSelector", "tolerations"):
        assert probe[field] == spec[field], field
    assert probe["securityContext"] == spec["securityContext"]


def test_the_defaults_add_nothing_to_the_pod(helm: str) -> None:
    spec = deployment_of(chart(helm))["spec"]["template"]["spec"]
    for field in ("imagePullSecrets", "nodeSelector", "tolerations", "affinity"):
        assert field not in spec, field


@pytest.mark.parametrize(
    ("flag", "complaint"),
    [
        ("nodeSelectors.a=b", "additional properties 'nodeSelectors' not allowed"),
        ("podLabel.a=b", "additional properties 'podLabel' not allowed"),
        ("tolerations[0].keys=a", "additional properties 'keys' not allowed"),
        ("tolerations[0].operator=Maybe", "tolerations/0/operator"),
        ("affinity.nodeAffinty.x=y", "additional properties 'nodeAffinty' not allowed"),
        ("imagePullSecrets[0].secret=regcred", "imagePullSecrets/0"),
        ("podSecurityContext=strict", "podSecurityContext"),
        ("podLabels.app\\.kubernetes\\.io/name=other", "podLabels.app.kubernetes.io/name"),
        ("podLabels.app\\.kubernetes\\.io/instance=other", "the chart sets this label itself"),
        ("podLabels.helm\\.sh/chart=x", "the chart sets this label itself"),
    ],
)
def test_misspelt_or_wrong_pod_values_are_refused(helm: str, flag: str, complaint: str) -> None:
    result = helm_template(helm, "--set", flag)
    assert result.returncode != 0, flag
    assert complaint in result.stderr, result.stderr


# --- helm test --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "namespace", "name"),
    [("podium", "podium-system", "podium"), ("canary", "ml-webhooks", "canary-podium")],
)
def test_the_helm_test_pod_probes_the_releases_service_with_its_ca(
    helm: str, release: str, namespace: str, name: str
) -> None:
    objects = chart(helm, "--namespace", namespace, release=release)
    pod = probe_pod(objects, namespace, name)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    assert container["image"] == container_of(objects, namespace, name)["image"]
    assert container["command"] == ["podium"]
    service = objects[("Service", namespace, name)]
    (port,) = service["spec"]["ports"]
    url = f"https://{name}.{namespace}.svc:{port['port']}/mutate"
    assert container["args"] == [
        "probe",
        url,
        "--ca-file",
        "/certs/ca.crt",
        "--pod-namespace",
        namespace,
    ]
    (webhook,) = objects[("MutatingWebhookConfiguration", "", name)]["webhooks"]
    client = webhook["clientConfig"]["service"]
    assert (
        url
        == f"https://{client['name']}.{client['namespace']}.svc:{client['port']}{client['path']}"
    )
    (volume,) = spec["volumes"]
    assert volume["secret"]["secretName"] == f"{name}-tls"
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert container["volumeMounts"] == [{"name": "ca", "mountPath": "/certs", "readOnly": True}]


def test_the_probe_command_line_parses(helm: str) -> None:
    """The hook's arguments are ones `podium probe` takes (its --help is reached only after
    the arguments parsed; an unknown option would exit 2)."""
    from typer.testing import CliRunner  # noqa: PLC0415

    from webhook.ops.cli import app  # noqa: PLC0415

    (container,) = probe_pod(chart(helm))["spec"]["containers"]
    result = CliRunner().invoke(app, [*container["args"], "--help"])
    assert result.exit_code == 0, result.output
    assert "dry-run AdmissionReview" in result.output


def test_with_cilium_the_test_pod_may_reach_podium(helm: str) -> None:
    objects = chart(helm, "--set", "cilium.enabled=true")
    policy = objects[("CiliumNetworkPolicy", "podium-system", "podium-allow-apiserver")]
    probe_labels = probe_pod(objects)["metadata"]["labels"]
    allowed = [
        rule
        for rule in policy["spec"]["ingress"]
        for peer in rule.get("fromEndpoints", [])
        if peer["matchLabels"].items() <= probe_labels.items()
    ]
    assert [r["toPorts"][0]["ports"] for r in allowed] == [[{"port": "8443", "protocol": "TCP"}]]


# --- lint, kubeVersion --------------------------------------------------------------------------


def test_helm_lint_is_clean_with_every_new_value(helm: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(POD_VALUES))
    result = subprocess.run(
        [helm, "lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), "-f", str(values)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_without_kube_version_helm_template_names_the_flag_it_needs(helm: str) -> None:
    """Offline, helm assumes Kubernetes 1.20 and the chart requires ≥ 1.30 (matchConditions,
    scheduling gates): the refusal, and the chart README tells `--kube-version`."""
    result = subprocess.run(
        [helm, "template", "podium", str(CHART)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "chart requires kubeVersion: >=1.30.0-0" in result.stderr
    readme = (CHART / "README.md").read_text()
    assert "--kube-version" in readme and ">=1.30.0-0" in readme
    ok = subprocess.run(
        [helm, "template", "podium", str(CHART), "--kube-version", "1.30.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr


# --- the README's values table ------------------------------------------------------------------


def test_the_chart_readme_values_table_is_current() -> None:
    readme, wanted = chart_readme.current()
    assert readme == wanted, "run: python -m scripts.chart_readme"


def test_the_values_table_has_a_row_for_every_value() -> None:
    """Every key of values.yaml (down to the keys of objects the schema spells out) has a row,
    with its default."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()

    def leaves(doc: Obj, prefix: str = "") -> list[str]:
        out = []
        for key, value in doc.items():
            if isinstance(value, dict) and value and key not in _FREE_FORM:
                out += leaves(value, f"{prefix}{key}.")
            else:
                out.append(f"{prefix}{key}")
        return out

    for key in leaves(values):
        assert f"| `{key}` |" in readme, key


#: Values that are maps of anything (labels, resources, security contexts, podium's settings).
_FREE_FORM = {
    "resources",
    "podSecurityContext",
    "securityContext",
    "extraSettings",
    "labels",
}


def test_the_check_fails_when_values_yaml_changes(tmp_path: Path) -> None:
    """`python -m scripts.chart_readme --check` notices a changed default or comment, and a
    run without --check brings the README back in step."""
    copy = tmp_path / "podium"
    copy.mkdir()
    for name in ("README.md", "values.yaml", "values.schema.json"):
        (copy / name).write_text((CHART / name).read_text())
    assert chart_readme.main(["--check", "--chart", str(copy)]) == 0
    values = (copy / "values.yaml").read_text()
    (copy / "values.yaml").write_text(
        values.replace("replicas: 2", "replicas: 3").replace("# Two or more:", "# Three or more:")
    )
    assert chart_readme.main(["--check", "--chart", str(copy)]) == 1
    assert chart_readme.main(["--chart", str(copy)]) == 0
    readme = (copy / "README.md").read_text()
    assert "| `replicas` | integer | `3` | Three or more:" in readme
    assert chart_readme.main(["--check", "--chart", str(copy)]) == 0
