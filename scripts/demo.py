"""podium's main job on a local control plane, end to end.

Brings up kube-apiserver, kube-scheduler, kube-controller-manager, etcd and KWOK on 127.0.0.1 with
fake GPU nodes in three zones (8, 16 and 64 GPUs), runs ``podium serve`` registered with the
shipped webhook configuration, submits the jobs in ``examples/jobs/`` and creates their pods the
way their operators do, then shows where every pod landed, the policies, and the audit trail.
Leaves nothing running unless ``--keep``.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.cluster import ZONES, LocalCluster, crd_files  # noqa: E402
from tests.e2e.podium import Podium  # noqa: E402
from webhook.ops import auditview  # noqa: E402

NS = "ml-team"
console = Console(width=160)


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_from(
    template: dict[str, Any],
    *,
    labels: dict[str, str],
    owners: list[dict[str, Any]],
    name: str | None = None,
    generate_name: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": NS, "labels": labels, "ownerReferences": owners}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    if annotations:
        meta["annotations"] = annotations
    spec = {"restartPolicy": "Never", **template["spec"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class Operators:
    """Creates pods as the training-operator, mpi-operator and JobSet controllers do."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        api = obj["apiVersion"]
        prefix = f"/api/{api}" if "/" not in api else f"/apis/{api}"
        plural = {
            "Pod": "pods",
            "Job": "jobs",
            "PyTorchJob": "pytorchjobs",
            "MPIJob": "mpijobs",
            "JobSet": "jobsets",
        }[obj["kind"]]
        obj["metadata"]["namespace"] = NS
        created: dict[str, Any] = self.cluster.request(
            "POST", f"{prefix}/namespaces/{NS}/{plural}", obj
        )
        return created

    def create_all(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        random.shuffle(pods)  # the operators iterate Go maps: no order, the coordinator not first
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(self.create, pods))

    def pytorchjob(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        name = job["metadata"]["name"]
        pods = []
        for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items():
            for i in range(spec.get("replicas", 1)):
                labels = {
                    "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/replica-type": rtype.lower(),
                    "training.kubeflow.org/replica-index": str(i),
                }
                if rtype == "Master":
                    labels["training.kubeflow.org/job-role"] = "master"
                pods.append(
                    pod_from(
                        spec["template"],
                        labels=labels,
                        owners=[owner(job)],
                        name=f"{name}-{rtype.lower()}-{i}",
                    )
                )
        return self.create_all(pods)

    def mpijob(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        name = job["metadata"]["name"]
        specs = job["spec"]["mpiReplicaSpecs"]
        base = {
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/job-name": name,
        }
        workers = [
            pod_from(
                specs["Worker"]["template"],
                owners=[owner(job)],
                name=f"{name}-worker-{i}",
                labels={
                    **base,
                    "training.kubeflow.org/job-role": "worker",
                    "training.kubeflow.org/replica-index": str(i),
                },
            )
            for i in range(specs["Worker"].get("replicas", 1))
        ]
        created = self.create_all(workers)
        launcher_job = self.create(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"{name}-launcher", "ownerReferences": [owner(job)]},
                "spec": {
                    "suspend": True,
                    "template": {
                        **specs["Launcher"]["template"],
                        "spec": {"restartPolicy": "Never", **specs["Launcher"]["template"]["spec"]},
                    },
                },
            }
        )
        time.sleep(1)  # as the real launcher, created once the workers exist
        created.append(
            self.create(
                pod_from(
                    specs["Launcher"]["template"],
                    owners=[owner(launcher_job)],
                    generate_name=f"{name}-launcher-",
                    labels={**base, "training.kubeflow.org/job-role": "launcher"},
                )
            )
        )
        return created

    def jobset(self, jobset: dict[str, Any]) -> list[dict[str, Any]]:
        name, uid = jobset["metadata"]["name"], jobset["metadata"]["uid"]
        total = sum(rj.get("replicas", 1) for rj in jobset["spec"]["replicatedJobs"])
        pods = []
        for rj in jobset["spec"]["replicatedJobs"]:
            job_template = rj["template"]["spec"]
            for j in range(rj.get("replicas", 1)):
                batch = self.create(
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {
                            "name": f"{name}-{rj['name']}-{j}",
                            "ownerReferences": [owner(jobset)],
                        },
                        "spec": {**job_template, "suspend": True},
                    }
                )
                labels = {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/jobset-uid": uid,
                    "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                    "jobset.sigs.k8s.io/replicatedjob-replicas": str(rj.get("replicas", 1)),
                    "jobset.sigs.k8s.io/job-index": str(j),
                    "jobset.sigs.k8s.io/global-replicas": str(total),
                }
                for k in range(job_template.get("parallelism", 1)):
                    pods.append(
                        pod_from(
                            job_template["template"],
                            labels=labels,
                            owners=[owner(batch)],
                            generate_name=f"{name}-{rj['name']}-{j}-{k}-",
                            annotations={"batch.kubernetes.io/job-completion-index": str(k)},
                        )
                    )
        time.sleep(1)
        return self.create_all(pods)


def build_controlplane() -> Path:
    console.print("[bold]Building the control plane[/] (cached after the first time) …")
    out = subprocess.run(
        ["bash", str(REPO / "tests/e2e/controlplane/build.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def wait_scheduled(cluster: LocalCluster, timeout: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        pods: list[dict[str, Any]] = cluster.request("GET", f"/api/v1/namespaces/{NS}/pods")[
            "items"
        ]
        if all(p["spec"].get("nodeName") for p in pods) or time.monotonic() > deadline:
            return pods
        time.sleep(0.5)


def job_of(pod: dict[str, Any]) -> str:
    """The job a pod belongs to, as its operator labelled it."""
    labels = pod["metadata"].get("labels") or {}
    for key in ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name"):
        if key in labels:
            return str(labels[key])
    owners = pod["metadata"].get("ownerReferences") or [{}]
    return str(owners[0].get("name", "-"))


def show(cluster: LocalCluster, podium: Podium) -> None:
    pods = wait_scheduled(cluster)
    node_zone = {
        n["metadata"]["name"]: n["metadata"]["labels"]["topology.kubernetes.io/zone"]
        for n in cluster.request("GET", "/api/v1/nodes")["items"]
    }
    table = Table(title=f"Where every pod landed (namespace {NS})")
    for col in ("job", "pod", "podium zone", "reason", "node", "node's zone", "phase"):
        table.add_column(col)
    for p in sorted(pods, key=lambda p: (job_of(p), p["metadata"]["name"])):
        ann = p["metadata"].get("annotations") or {}
        node = p["spec"].get("nodeName") or "-"
        table.add_row(
            job_of(p),
            p["metadata"]["name"],
            ann.get("podium.dev/zone", "-"),
            ann.get("podium.dev/reason", "-"),
            node,
            node_zone.get(node, "-"),
            p.get("status", {}).get("phase", "-"),
        )
    console.print(table)
    policies = cluster.request("GET", f"/apis/cilium.io/v2/namespaces/{NS}/ciliumnetworkpolicies")[
        "items"
    ]
    ptable = Table(title="CiliumNetworkPolicies podium created (owned by their jobs)")
    for col in ("name", "owner", "selects", "default deny"):
        ptable.add_column(col)
    for pol in policies:
        ref = pol["metadata"]["ownerReferences"][0]
        ptable.add_row(
            pol["metadata"]["name"],
            f"{ref['kind']}/{ref['name']}",
            yaml.safe_dump(pol["spec"]["endpointSelector"]["matchLabels"]).strip(),
            str(pol["spec"]["enableDefaultDeny"]),
        )
    console.print(ptable)
    records = list(auditview.read(podium.audit_file.read_text().splitlines()))
    records = [r for r in records if r["namespace"] == NS]
    console.print(auditview.table(records))
    console.print(auditview.summary(records))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the cluster and podium running until Ctrl-C"
    )
    parser.add_argument(
        "--workdir", type=Path, help="where to keep the cluster's files (default: a temp dir)"
    )
    args = parser.parse_args()
    bin_dir = build_controlplane()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="podium-demo-"))
    console.print(f"[bold]Starting the control plane[/] in {work} …")
    with LocalCluster(bin_dir, work / "cluster") as cluster:
        cluster.create_fake_nodes(ZONES)
        cluster.install_crds(crd_files())
        podium = Podium(cluster, work / "podium")
        podium.start()
        try:
            podium.register()
            cluster.request(
                "POST",
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": NS, "labels": {"podium.dev/enabled": "true"}},
                },
            )
            time.sleep(2)  # the apiserver picks up the webhook configuration
            operators = Operators(cluster)
            for path in sorted((REPO / "examples" / "jobs").glob("*.yaml")):
                job = operators.create(yaml.safe_load(path.read_text()))
                console.print(f"submitted {job['kind']}/{job['metadata']['name']} ({path.name})")
                {
                    "PyTorchJob": operators.pytorchjob,
                    "MPIJob": operators.mpijob,
                    "JobSet": operators.jobset,
                }[job["kind"]](job)
            show(cluster, podium)
            if args.keep:
                console.print(
                    f"\nkubeconfig: [bold]{cluster.kubeconfig}[/]  (kubectl --kubeconfig …)"
                )
                console.print(
                    f"podium: {podium.url}, audit trail: {podium.audit_file}. Ctrl-C to stop."
                )
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
        finally:
            podium.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
