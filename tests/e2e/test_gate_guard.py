"""Only podium removes podium's gate (issue 29, item 4), on the real apiserver.

The ValidatingAdmissionPolicy and its binding are taken from the rendered kustomize base
(``kubectl kustomize manifests/base``: what users apply; the chart renders the same objects, as
tests/test_chart.py checks) and applied. podium runs as the chart's ServiceAccount
(``system:serviceaccount:podium-system:podium``, `testbed.podium.Podium`'s default).

A held gang: the issue's
``kubectl patch pod … --type=json -p '[{"op":"remove","path":"/spec/schedulingGates"}]'``
by the cluster's admin is refused with the policy's message naming ``podium release``; so is the
same patch by a ServiceAccount that is also called ``podium`` but lives in another namespace (and
may edit pods there); other changes to the held pod still pass. podium's own release passes: when
room appears (the releaser) and when the admin asks with ``podium release`` (the way out the
message names).

The policy is removed after the module: other modules remove gates by hand on purpose.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import rbac
from testbed.controlplane import ApiError, LocalCluster
from testbed.controlplane.api import Api
from testbed.podium import Podium, serving

from .test_hold import (  # noqa: F401  (ns: test_hold's fixture, on this module's podium)
    HOLD_GATE,
    assert_held,
    delete_pods,
    fill_zone_c,
    gated,
    ns,
    pods_of,
)
from .test_podium import ZONE, create_concurrently, pytorch_pods, pytorchjob, wait_bound
from .test_reconciler import ensure_namespace

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "system:serviceaccount:podium-system:podium"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
GUARD_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
UNGATE = [{"op": "remove", "path": "/spec/schedulingGates"}]
JSON_PATCH = "application/json-patch+json"


def rendered_guard(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The policy and its binding from ``kubectl kustomize manifests/base``."""
    out = cluster.kubectl("kustomize", str(ROOT / "manifests" / "base")).stdout
    objects = [o for o in yaml.safe_load_all(out) if o and o["kind"] in GUARD_KINDS]
    assert sorted(o["kind"] for o in objects) == sorted(GUARD_KINDS)
    return objects


def collection(kind: str) -> str:
    return f"{ADMISSION}/{kind.lower()}s"


@pytest.fixture(scope="module")
def podium(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Podium]:
    """podium with ``zone-chooser: hold`` (and a short release interval), as the chart's
    ServiceAccount."""
    ensure_namespace(local_cluster, "podium-system")  # for the leader's Lease
    config = "zone-chooser: hold\nrelease-interval-seconds: 1\n"
    server = Podium(local_cluster, tmp_path_factory.mktemp("gate-guard"), config=config)
    with serving(server, unregister=True) as started:
        yield started


@pytest.fixture(scope="module")
def guard(local_cluster: LocalCluster, podium: Podium) -> Iterator[list[dict[str, Any]]]:
    """The shipped policy and binding, applied; deleted afterwards."""
    objects = rendered_guard(local_cluster)
    for obj in objects:
        local_cluster.apply(obj)
    try:
        yield objects
    finally:
        for obj in reversed(objects):
            try:
                local_cluster.request(
                    "DELETE", f"{collection(obj['kind'])}/{obj['metadata']['name']}"
                )
            except ApiError as error:
                if error.status != 404:
                    raise


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def refused(api: Api, namespace: str, name: str, *, dry_run: bool = False) -> ApiError | None:
    """The gate-removing patch as ``api``'s user: the apiserver's refusal, or None if taken."""
    try:
        api.request(
            "PATCH",
            pod_path(namespace, name),
            json.dumps(UNGATE),
            content_type=JSON_PATCH,
            query={"dryRun": "All"} if dry_run else None,
        )
    except ApiError as error:
        return error
    return None


def wait_in_force(cluster: LocalCluster, namespace: str, name: str) -> None:
    """The apiserver loads a new policy asynchronously: dry-run the admin's patch until it is
    refused (a dry run changes nothing while the policy is not in force yet)."""
    cluster.wait_for(
        "the gate guard to be in force",
        lambda: refused(cluster.api, namespace, name, dry_run=True) is not None,
        timeout=60,
    )


def held_gang(cluster: LocalCluster, namespace: str, name: str) -> list[str]:
    """A 4 × 8-GPU PyTorchJob with zone-c (the only zone that could hold it) full: held."""
    job = pytorchjob(cluster, namespace, name, workers=3)
    created = create_concurrently(cluster, pytorch_pods(job, workers=3))
    names = [p["metadata"]["name"] for p in created]
    assert all(gated(p) for p in created)
    assert_held(cluster, namespace, names, seconds=1)
    return names


def impostor(cluster: LocalCluster, namespace: str, work_dir: Path) -> Api:
    """A ServiceAccount also named ``podium``, in ``namespace``, that may edit pods there."""
    cluster.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "podium"}},
    )
    cluster.request(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "podium-edit"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "podium", "namespace": namespace}],
        },
    )
    token = rbac.mint_token(cluster, namespace=namespace, name="podium")
    return Api.from_kubeconfig(
        rbac.kubeconfig(cluster, work_dir / "impostor.kubeconfig", token=token)
    )


def test_only_podium_removes_its_gate(
    local_cluster: LocalCluster,
    guard: list[dict[str, Any]],
    ns: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    other = fill_zone_c(local_cluster, ns)
    names = held_gang(local_cluster, ns, "guarded")
    first = names[0]
    wait_in_force(local_cluster, ns, first)

    # The command, as the cluster's admin: refused, the message naming the way out.
    patch = local_cluster.kubectl(
        "patch", "pod", first, "-n", ns, "--type=json", "-p", json.dumps(UNGATE), check=False
    )
    print(f"$ kubectl patch pod {first} -n {ns} --type=json -p '{json.dumps(UNGATE)}'")
    print(f"(exit {patch.returncode}) {patch.stderr.strip()}")
    assert patch.returncode != 0
    assert "podium-gate" in patch.stderr
    assert f"podium release pytorchjob/guarded -n {ns}" in patch.stderr
    assert "forbidden" in patch.stderr.lower()

    # A ServiceAccount named podium in another namespace is not podium.
    error = refused(impostor(local_cluster, ns, tmp_path), ns, names[1])
    assert error is not None and error.status == 403, error
    assert f"system:serviceaccount:{ns}:podium may not release it" in error.body

    # Only the gate's removal is guarded: the admin still annotates the held pod.
    local_cluster.request(
        "PATCH",
        pod_path(ns, first),
        {"metadata": {"annotations": {"example.com/note": "looked at"}}},
        content_type="application/merge-patch+json",
    )
    assert all(
        gated(p) and not p["spec"].get("nodeName") for p in pods_of(local_cluster, ns, names)
    )

    # podium's own release passes: room appears, the gang is released whole and bound.
    delete_pods(local_cluster, ns, other)
    zones = wait_bound(local_cluster, ns, names)
    assert set(zones.values()) == {"zone-c"}
    assert {p["metadata"]["annotations"][ZONE] for p in pods_of(local_cluster, ns, names)} == {
        "zone-c"
    }


def test_podium_release_is_the_way_out(
    local_cluster: LocalCluster,
    podium: Podium,
    guard: list[dict[str, Any]],
    ns: str,  # noqa: F811
) -> None:
    """The admin asks podium (``podium release``, the message's advice): podium's releaser
    removes the gates, as its own ServiceAccount, though no zone has room for the gang."""
    fill_zone_c(local_cluster, ns)
    names = held_gang(local_cluster, ns, "asked")
    wait_in_force(local_cluster, ns, names[0])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "release",
            "pytorchjob/asked",
            "-n",
            ns,
            "--kubeconfig",
            str(local_cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    print(f"$ podium release pytorchjob/asked -n {ns}\n{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stderr
    local_cluster.wait_for(
        "podium to release the gang",
        lambda: not any(gated(p) for p in pods_of(local_cluster, ns, names)),
        timeout=60,
    )
    released = pods_of(local_cluster, ns, names)
    assert all(HOLD_GATE not in json.dumps(p["spec"]) for p in released)
    assert len({p["metadata"]["annotations"][ZONE] for p in released}) == 1
    # the ungating writes were podium's, and the apiserver took them
    ungated_by = {
        event["user"]["username"]
        for event in local_cluster.audit_events()
        if event.get("verb") == "patch"
        and event.get("stage") == "ResponseComplete"
        and (event.get("objectRef") or {}).get("namespace") == ns
        and (event.get("objectRef") or {}).get("name") in names
        and not (event.get("objectRef") or {}).get("subresource")  # kwok writes the status
        and (event.get("responseStatus") or {}).get("code") == 200
        and "dryRun" not in event.get("requestURI", "")  # not wait_in_force's probes
    }
    assert ungated_by == {ACCOUNT}, ungated_by
    assert not [line for line in podium.log_tail(400).splitlines() if "podium-gate" in line]
