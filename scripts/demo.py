"""podium's main job on a local control plane, beside the real training operators.

Brings up kube-apiserver, kube-scheduler, kube-controller-manager, etcd and KWOK on 127.0.0.1 with
fake GPU nodes in three zones (8, 16 and 64 GPUs), starts the real Kubeflow training-operator,
mpi-operator and JobSet controller (built from the Go module proxy and cached, see
docs/operators.md), runs ``podium serve`` registered with the shipped webhook configuration,
submits the jobs in ``examples/jobs/`` and lets the operators create their pods, then shows where
every pod landed, the policies, and the audit trail. podium runs with its default settings
(``zone-chooser: hold``): each job's pods are admitted held behind podium's gate and released whole
into one zone by the releaser, which the demo shows (held → released). Exits 1 when a pod was not
pinned to its job's one zone, or a job was not held and then released. Leaves nothing running, and
removes what it wrote to its work directory (the cluster's CA key and an admin kubeconfig among
it), unless ``--keep``.

``--keep`` leaves it all running until Ctrl-C or SIGTERM (in the foreground or the background:
``make demo-stop`` sends it), restarts podium on ``--restart-podium`` (SIGUSR1; podium's command
is printed, to run it by hand instead), renews podium's ServiceAccount token before it expires
(restarting podium with the new one), and marks the machine-wide mpi-operator lock as a kept
demo's, so that a test run beside it stops at once saying so instead of waiting for it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from testbed import build, processes
from testbed.controlplane import ZONES, ApiError, LocalCluster, crd_files
from testbed.observe import Watch, api_path
from testbed.operators import Operator, OperatorPool
from testbed.paths import REPO
from testbed.podium import Podium
from webhook.ops import auditview

NS = "ml-team"
#: The operators that create the pods of examples/jobs/*.yaml (testbed.build
#: names), started in this order, and what each is called here.
OPERATORS = {
    "trainingoperator": "training-operator",
    "mpioperator": "mpi-operator",
    "jobset": "JobSet",
}
#: Reasons that mean podium pinned the pod to a zone its whole gang fits in (not a fallback).
PINNED_REASONS = frozenset(
    {"best-fit", "most-free", "recorded", "members-placed", "coordinator-placed"}
)
ZONE_KEY = "topology.kubernetes.io/zone"
#: How long the operators get to create every pod and the scheduler to bind them.
PODS_TIMEOUT = 180.0
#: How long every pod still unbound may be unschedulable before the demo stops waiting.
UNSCHEDULABLE_PATIENCE = 20.0
# runner.MPIOperator takes this machine-wide lock: its health port is a fixed :8080.
MPI_LOCK_NAME = "mpi-operator-8080"
MPI_LOCK = processes.lock_path(MPI_LOCK_NAME)
#: How long podium's ServiceAccount token lives in the demo, and at which part of that a kept
#: demo mints the next one and restarts podium with it (the tests' tokens live an hour).
TOKEN_SECONDS = 24 * 3600
RENEW_AT = 0.8
#: Where a kept demo says it runs (one ``<pid>.json`` each): ``--stop``, ``--restart-podium``.
STATE_DIR = Path(tempfile.gettempdir()) / f"podium-demo-{os.getuid()}"

console = Console(width=160)


class DemoError(RuntimeError):
    """The demo cannot go on (an example it does not know)."""


def build_controlplane() -> Path:
    console.print("[bold]Building the control plane[/] (cached after the first time) …")
    return build.build_controlplane()


def mpi_port_taken() -> bool:
    """Whether another mpi-operator (another demo, an e2e run) holds port 8080's lock now."""
    with MPI_LOCK.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def start_operators(pool: OperatorPool) -> dict[str, Operator]:
    """Build (or take from the cache) and start each operator; say which, and how long it took."""
    console.print(
        "[bold]Starting the real operators[/] (built from the Go module proxy into "
        "~/.cache/podium the first time, about 6 minutes; cached after that) …"
    )
    started: dict[str, Operator] = {}
    for name, title in OPERATORS.items():
        if name == "mpioperator" and mpi_port_taken():
            holder = processes.lock_holder(MPI_LOCK_NAME) or "another process"
            console.print(
                f"  another mpi-operator on this machine holds port 8080 ({holder}): "
                "waiting for it, up to 10 minutes …",
                markup=False,
            )
        begin = time.time()
        (operator,) = pool.ensure([name])
        build = operator.build
        took = time.time() - begin
        if (build.directory / "operator.json").stat().st_mtime >= begin:
            how = f"built in {build.build_seconds} s, started in {took - build.build_seconds:.1f} s"
        else:
            how = f"cached, started in {took:.1f} s"
        console.print(f"  {title} {build.version} ({build.module}): {how}")
        started[name] = operator
    return started


def expected_pods(job: dict[str, Any]) -> int:
    """How many pods the job's operator creates for it."""
    spec = job["spec"]
    kind = job["kind"]
    if kind == "PyTorchJob":
        return sum(s.get("replicas", 1) for s in spec["pytorchReplicaSpecs"].values())
    if kind == "MPIJob":  # the workers, and one launcher (through a batch Job)
        return int(spec["mpiReplicaSpecs"]["Worker"].get("replicas", 1)) + 1
    if kind == "JobSet":
        return sum(
            rj.get("replicas", 1) * rj["template"]["spec"].get("parallelism", 1)
            for rj in spec["replicatedJobs"]
        )
    raise DemoError(f"the demo does not know how many pods a {kind} makes")


def job_of(pod: dict[str, Any]) -> str:
    """The job a pod belongs to, as its operator labelled it."""
    labels = pod["metadata"].get("labels") or {}
    for key in ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name"):
        if key in labels:
            return str(labels[key])
    owners = pod["metadata"].get("ownerReferences") or [{}]
    return str(owners[0].get("name", "-"))


def submit(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    """Create each job of examples/jobs/ in the demo namespace; return them by name."""
    jobs: dict[str, dict[str, Any]] = {}
    for path in sorted((REPO / "examples" / "jobs").glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        obj["metadata"]["namespace"] = NS
        created: dict[str, Any] = cluster.request(
            "POST", api_path(obj["apiVersion"], obj["kind"], NS), obj
        )
        name = created["metadata"]["name"]
        jobs[name] = created
        console.print(
            f"submitted {created['kind']}/{name} ({path.name}): "
            f"{expected_pods(created)} pods expected"
        )
    return jobs


def unschedulable(pod: dict[str, Any]) -> str | None:
    """The scheduler's message when it found no node for the pod, else None."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message") or "Unschedulable")
    return None


def wait_for_pods(
    watch: Watch,
    jobs: dict[str, dict[str, Any]],
    timeout: float = PODS_TIMEOUT,
    patience: float = UNSCHEDULABLE_PATIENCE,
) -> list[str]:
    """Until every job has its pods and each is bound to a node (or already deleted again by
    its operator). Returns nothing then, else why it stopped waiting: the timeout, or pods the
    scheduler has found no node for during ``patience`` seconds."""
    begin = time.monotonic()
    unschedulable_since: dict[str, float] = {}
    while True:
        watch.raise_error()
        pods = watch.snapshot()
        counts = Counter(job_of(p) for p in pods.values())
        missing = [
            f"  {job['kind']}/{name}: {counts[name]} of {expected_pods(job)} pods created"
            for name, job in jobs.items()
            if counts[name] < expected_pods(job)
        ]
        unbound = {
            uid: p
            for uid, p in pods.items()
            if not p["spec"].get("nodeName") and uid not in watch.gone
        }
        now = time.monotonic()
        if not missing and not unbound:
            console.print(
                f"the operators created {len(pods)} pods, all bound, in {now - begin:.1f} s"
            )
            time.sleep(2)  # any pod an operator still adds, and the phases kwok moves them to
            watch.raise_error()
            return []
        for uid in set(unschedulable_since) - set(unbound):
            del unschedulable_since[uid]
        for uid, pod in unbound.items():
            if unschedulable(pod):
                unschedulable_since.setdefault(uid, now)
            else:
                unschedulable_since.pop(uid, None)
        stuck = not missing and all(
            now - unschedulable_since.get(uid, now) >= patience for uid in unbound
        )
        if stuck or now - begin > timeout:
            lines = [
                f"the scheduler found no node for {len(unbound)} pods in {patience:.0f} s:"
                if stuck
                else f"timed out after {timeout:.0f} s waiting for the operators' pods:",
                *missing,
            ]
            for pod in unbound.values():
                ann = pod["metadata"].get("annotations") or {}
                lines.append(
                    f"  {pod['metadata']['name']} not bound (podium zone "
                    f"{ann.get('podium.dev/zone', '-')}, reason "
                    f"{ann.get('podium.dev/reason', '-')}): {unschedulable(pod) or 'Pending'}"
                )
            return lines
        time.sleep(0.25)


def log_tails(operators: dict[str, Operator], podium: Podium, lines: int = 20) -> None:
    """The last lines of every operator's log and podium's, for a demo that went wrong."""
    for name, operator in operators.items():
        console.print(f"--- {OPERATORS[name]}: last lines of {operator.log_file} ---", markup=False)
        console.print(operator.log_tail(lines), markup=False, highlight=False)
    console.print(f"--- podium: last lines of {podium.log_file} ---", markup=False)
    console.print(podium.log_tail(lines), markup=False, highlight=False)


#: The directions ``enableDefaultDeny`` sets, in the order the table names them.
DIRECTIONS = ("ingress", "egress")


def default_deny(spec: dict[str, Any]) -> str:
    """A CiliumNetworkPolicy's ``enableDefaultDeny`` in words: ``off`` (podium's policies only
    add an allow), ``on``, per direction when they differ, ``Cilium's default`` when unset."""
    setting = spec.get("enableDefaultDeny")
    if setting is None:
        return "Cilium's default"
    states = {d: {True: "on", False: "off"}.get(setting.get(d), "default") for d in DIRECTIONS}
    if len(set(states.values())) == 1:
        return next(iter(states.values()))
    return ", ".join(f"{d} {state}" for d, state in states.items())


def show(
    cluster: LocalCluster,
    podium: Podium,
    pods: dict[str, dict[str, Any]],
    gone: set[str],
) -> dict[str, Any]:
    """Print the tables; return what they show (the ``--json-summary`` document)."""
    node_zone = {
        n["metadata"]["name"]: n["metadata"]["labels"][ZONE_KEY]
        for n in cluster.request("GET", "/api/v1/nodes")["items"]
    }
    rows = []
    for uid, p in pods.items():
        ann = p["metadata"].get("annotations") or {}
        node = p["spec"].get("nodeName")
        rows.append(
            {
                "job": job_of(p),
                "pod": p["metadata"]["name"],
                "zone": ann.get("podium.dev/zone"),
                "reason": ann.get("podium.dev/reason"),
                "node": node,
                "node_zone": node_zone.get(node or ""),
                "phase": "deleted" if uid in gone else p.get("status", {}).get("phase"),
            }
        )
    rows.sort(key=lambda r: (r["job"], r["pod"]))
    table = Table(title=f"Where every pod landed (namespace {NS}; pods the operators created)")
    for col in ("job", "pod", "podium zone", "reason", "node", "node's zone", "phase"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            *(r[k] or "-" for k in ("job", "pod", "zone", "reason", "node", "node_zone", "phase"))
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
            default_deny(pol["spec"]),
        )
    console.print(ptable)

    records = list(auditview.read(podium.audit_file.read_text().splitlines()))
    records = [r for r in records if r["namespace"] == NS]
    # As `podium audit -n ml-team` shows them: without podium's own release UPDATEs.
    shown = [r for r in records if not auditview.own_release(r)]
    gangs = auditview.summarize(records)
    console.print(auditview.table(shown, namespace=False))
    console.print(auditview.summary(gangs, namespace=False))
    if legend := auditview.legend(shown, gangs, wide=False):
        console.print(legend)
    if hidden := len(records) - len(shown):
        console.print(f"({hidden} of podium's own release UPDATEs not shown)")
    releases = held_then_released(records)
    for line in releases.values():
        console.print(line, markup=False)
    return {
        "releases": releases,
        "pods": rows,
        "policies": [
            {
                "name": pol["metadata"]["name"],
                "owner": "{kind}/{name}".format(**pol["metadata"]["ownerReferences"][0]),
            }
            for pol in policies
        ],
        "jobs": [g.as_dict() for g in gangs.gangs],
    }


def held_then_released(records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Per job, how its gang was held at admission and released by the releaser (the audit
    trail's ``held`` admissions and its ``released`` entry), in a line."""
    held: Counter[str] = Counter()
    lines = {}
    for r in records:
        name = str((r.get("job") or {}).get("name") or "")
        if r.get("outcome") == "held" and r.get("pod"):
            held[name] += 1
        elif r.get("outcome") == "released" and name:
            lines[name] = (
                f"{name}: {held[name]} pod(s) held at admission → released into {r.get('zone')} "
                f"({r.get('reason')}) after {r.get('waitedSeconds')} s"
            )
    return lines


def problems(outcome: dict[str, Any], jobs: dict[str, dict[str, Any]]) -> list[str]:
    """Everything that says podium did not do its job: a pod not pinned, not bound, or outside
    its zone; a job short of pods, in two zones or in more than one gang, or without a clean
    audit verdict."""
    found = []
    zones: dict[str, set[str]] = defaultdict(set)
    for row in outcome["pods"]:
        if row["reason"] not in PINNED_REASONS or not row["zone"]:
            found.append(f"{row['pod']}: not pinned (zone {row['zone']}, reason {row['reason']})")
        if row["zone"]:
            zones[row["job"]].add(row["zone"])
        if not row["node"]:
            found.append(f"{row['pod']}: not bound to a node")
        elif row["zone"] and row["node_zone"] != row["zone"]:
            found.append(f"{row['pod']}: pinned to {row['zone']} but runs in {row['node_zone']}")
    found += [f"{job}: pods pinned to {sorted(z)}" for job, z in zones.items() if len(z) > 1]
    counts = Counter(row["job"] for row in outcome["pods"])
    found += [
        f"{job['kind']}/{name}: {counts[name]} of {expected_pods(job)} pods created"
        for name, job in jobs.items()
        if counts[name] < expected_pods(job)
    ]
    found += [
        f"{job['kind']}/{name}: not held and then released (zone-chooser: hold)"
        for name, job in jobs.items()
        if name not in outcome.get("releases", {})
    ]
    verdicts: dict[str, list[str]] = defaultdict(list)
    for gang in outcome["jobs"]:
        verdicts[gang["job"]["name"]].append(gang["verdict"])
    for name, job in jobs.items():
        if verdicts[name] != ["ok"]:
            found.append(
                f"{job['kind']}/{name}: audit verdicts {verdicts[name]} (one gang, ok, expected)"
            )
    return found


def conclude(
    outcome: dict[str, Any],
    jobs: dict[str, dict[str, Any]],
    operators: dict[str, Operator],
    json_path: Path | None,
) -> bool:
    """Say whether every pod is pinned (and write ``--json-summary``); True when it is."""
    outcome["operators"] = {
        OPERATORS[n]: {"module": o.build.module, "version": o.build.version}
        for n, o in operators.items()
    }
    outcome["problems"] = [*outcome.get("problems", []), *problems(outcome, jobs)]
    outcome["ok"] = not outcome["problems"]
    if json_path:
        json_path.write_text(json.dumps(outcome, indent=2) + "\n")
    if outcome["problems"]:
        console.print("[red]Not every pod is pinned to its job's zone:[/]")
        for line in outcome["problems"]:
            console.print(f"  {line}", markup=False)
    else:
        console.print(
            f"[green]Every pod of the {len(jobs)} jobs is pinned to its job's zone, "
            "and runs there.[/]"
        )
    return bool(outcome["ok"])


#: What the demo writes to its work directory: the cluster (pki/ with the CA key, an admin
#: kubeconfig, etcd's data), the operators' files and logs, podium's certificates and audit trail.
WORK_PARTS = ("cluster", "operators", "podium")


def clean_up(work: Path) -> None:
    """Remove what the demo wrote to ``work``, then ``work`` itself if nothing else is in it
    (a ``--workdir`` that held other files keeps them)."""
    for part in WORK_PARTS:
        shutil.rmtree(work / part, ignore_errors=True)
    with contextlib.suppress(OSError):
        work.rmdir()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the cluster and podium running until Ctrl-C, and the work directory after",
    )
    parser.add_argument(
        "--workdir", type=Path, help="where to keep the cluster's files (default: a temp dir)"
    )
    parser.add_argument(
        "--stop",
        action="store_true",
        help="stop the kept demos of this user (make demo-stop) and exit",
    )
    parser.add_argument(
        "--restart-podium",
        action="store_true",
        help="restart podium in the kept demos of this user (with a new token) and exit",
    )
    parser.add_argument(
        "--json-summary",
        type=Path,
        metavar="PATH",
        help="also write what the tables show, and the problems found, as JSON to PATH",
    )
    args = parser.parse_args()
    if args.stop:
        return stop_kept()
    if args.restart_podium:
        return signal_kept(signal.SIGUSR1, "asked to restart podium")
    install_signals()
    bin_dir = build_controlplane()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="podium-demo-"))
    console.print(f"[bold]Starting the control plane[/] in {work} …")
    try:
        return run(args, bin_dir, work)
    except KeyboardInterrupt:
        console.print("stopped before the end: podium, the operators and the cluster stop too")
        return 128 + (STOPPED_BY[0] if STOPPED_BY else signal.SIGINT)
    finally:
        if args.keep:
            console.print(f"Kept {work} (--keep): it holds the cluster's CA key and kubeconfig.")
        else:
            clean_up(work)


def run(args: argparse.Namespace, bin_dir: Path, work: Path) -> int:
    """The demo in ``work``: cluster, operators, podium, the jobs, the tables."""
    with (
        LocalCluster(bin_dir, work / "cluster") as cluster,
        OperatorPool(cluster, work / "operators") as pool,
    ):
        cluster.create_fake_nodes(ZONES)
        operators = start_operators(pool)
        # The operators installed their own CRDs; podium's policies need Cilium's, and its
        # Reports (docs/reports.md) Open Reports' (a kept demo shows them in `kubectl get reports`).
        mine = ("cilium.io_", "openreports.io_")
        cluster.install_crds(p for p in crd_files() if p.name.startswith(mine))
        with contextlib.suppress(ApiError):
            cluster.create_namespace("podium-system")  # the reconciler's leader-election lease
        cluster.create_namespace(NS, {"podium.dev/enabled": "true"})
        podium = Podium(cluster, work / "podium", token_seconds=TOKEN_SECONDS)
        podium.start()
        try:
            podium.register()
            podium.wait_until_called()
            console.print(f"[bold]podium[/] serves at {podium.url}, registered and called")
            with Watch(cluster, f"/api/v1/namespaces/{NS}/pods") as watch:
                jobs = submit(cluster)
                stuck = wait_for_pods(watch, jobs)
                pods, gone = watch.snapshot(), set(watch.gone)
            if stuck:
                console.print("\n".join(stuck), markup=False, style="red")
            outcome = show(cluster, podium, pods, gone)
            outcome["problems"] = stuck[:1]
            ok = conclude(outcome, jobs, operators, args.json_summary)
            if stuck:
                log_tails(operators, podium)
            if args.keep:
                keep(cluster, podium, work)
            return 0 if ok else 1
        finally:
            podium.stop()


# -- a kept demo ---------------------------------------------------------------------------------

#: The signals that stopped the demo, the first first.
STOPPED_BY: list[int] = []
#: Set by SIGUSR1 (``--restart-podium``): the kept demo restarts podium at its next look.
RESTART: list[bool] = []


def install_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM stop the demo alike, in the foreground or the background (a
    shell starts a background job with SIGINT ignored, and Python then leaves it ignored: the
    handler is set here whatever was inherited). The first one stops it; later ones while it
    cleans up are only noted. SIGUSR1 restarts podium in a kept demo."""
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGUSR1, _restart)


def _stop(signum: int, _frame: FrameType | None) -> None:
    STOPPED_BY.append(signum)
    if len(STOPPED_BY) == 1:
        raise KeyboardInterrupt
    console.print("still stopping (podium, the operators, the cluster) …")


def _restart(_signum: int, _frame: FrameType | None) -> None:
    RESTART.append(True)


def renewal_due(minted: float | None, seconds: float, now: float) -> bool:
    """Whether podium's token, minted at ``minted`` for ``seconds``, is due for the next one
    (``RENEW_AT`` of its life gone); never for a podium without a token of its own."""
    return minted is not None and now >= minted + RENEW_AT * seconds


def keep(cluster: LocalCluster, podium: Podium, work: Path) -> None:
    """Say how to use and stop the kept demo, then `wait_kept` until a signal stops it."""
    state = STATE_DIR / f"{os.getpid()}.json"
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    state.write_text(
        json.dumps({"pid": os.getpid(), "work": str(work), "kubeconfig": str(cluster.kubeconfig)})
    )
    with contextlib.suppress(OSError):  # the demo's mpi-operator holds the lock
        processes.describe_holder(
            MPI_LOCK_NAME,
            f"{processes.KEPT}a kept podium demo (pid {os.getpid()}); make demo-stop ends it",
        )
    console.print(f"\nkubeconfig: [bold]{cluster.kubeconfig}[/]  (kubectl --kubeconfig …)")
    console.print(
        f"podium: {podium.url}, audit trail: {podium.audit_file}; operator logs in "
        f"{work / 'operators'}. podium runs as (its token is renewed while the demo runs):"
    )
    console.print(f"  {shlex.join(podium.command())}", markup=False, soft_wrap=True)
    console.print(
        "Restart podium: python -m scripts.demo --restart-podium. Stop the demo: Ctrl-C, "
        f"kill {os.getpid()} or make demo-stop. mpi-operator's port 8080 is this machine's: a "
        "test run beside it stops its MPIJob tests at once (make demo-stop first)."
    )
    try:
        wait_kept(podium)
    except KeyboardInterrupt:
        console.print("stopping the kept demo …")
    finally:
        state.unlink(missing_ok=True)


def wait_kept(podium: Podium, *, poll: float = 1.0) -> None:
    """Until a signal stops it (KeyboardInterrupt): restart podium when asked or when its token
    is due for renewal (a fresh token first), and say once if podium exits by itself."""
    exited = False
    while True:
        time.sleep(poll)
        due = renewal_due(podium.token_minted, podium.token_seconds, time.time())
        if RESTART or due:
            why = "as asked" if RESTART else "with a renewed token"
            RESTART.clear()
            podium.stop()
            podium.renew_token()
            podium.start()
            exited = False
            console.print(f"podium restarted {why} at {podium.url}")
        elif not exited and (podium.process is None or podium.process.poll() is not None):
            exited = True
            console.print(
                f"podium exited (its log: {podium.log_file}); python -m scripts.demo "
                "--restart-podium starts it again"
            )


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def kept_demos() -> list[dict[str, Any]]:
    """The kept demos of this user that still run (state files of others are removed)."""
    found = []
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            state = json.loads(path.read_text())
            pid = int(state["pid"])
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if b"scripts.demo" in command and alive(pid):
            found.append(state)
        else:
            path.unlink(missing_ok=True)
    return found


def signal_kept(signum: int, done: str) -> int:
    """Send ``signum`` to every kept demo; 0, or 1 when there is none."""
    demos = kept_demos()
    if not demos:
        console.print("no kept demo is running")
        return 1
    for state in demos:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(state["pid"]), signum)
        console.print(f"{done}: the demo of pid {state['pid']} ({state['work']})", markup=False)
    return 0


def stop_kept(timeout: float = 120.0) -> int:
    """``make demo-stop``: SIGTERM to every kept demo, then wait until each has stopped its
    cluster and exited. 0 (also when none runs), 1 when one is still running at ``timeout``."""
    demos = kept_demos()
    if not demos:
        console.print("no kept demo is running")
        return 0
    for state in demos:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(state["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    running = [s for s in demos if alive(int(s["pid"]))]
    while running and time.monotonic() < deadline:
        time.sleep(0.2)
        running = [s for s in running if alive(int(s["pid"]))]
    for state in demos:
        if state in running:
            console.print(f"the demo of pid {state['pid']} is still stopping", markup=False)
        else:
            console.print(f"stopped the demo of pid {state['pid']}; kept {state['work']}")
    return 1 if running else 0


if __name__ == "__main__":
    raise SystemExit(main())
