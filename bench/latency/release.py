"""How long a release takes, from the releaser's decision to the last pod ungated, for gangs of
8, 64 and 512 pods, of several versions of podium side by side on the real local control plane:

    python -m bench.latency.release 68a3ee5 WORKTREE [--sizes 8,64,512] [--runs 3] [--out DIR]

Each REV is extracted (``git archive REV webhook``) into a scratch directory; ``WORKTREE`` is this
checkout as it is, a directory that checkout. One ``testbed.controlplane.LocalCluster`` with KWOK
nodes (3 zones of 8 nodes of 64 GPUs, 512 per zone). Per run, size and version, in turn (so that
load from other processes falls on every version alike): a namespace opted in, a PyTorchJob of
``size`` pods of 1 GPU, its pods created already held (``mutation.hold``, as podium's admission
leaves them); then a worker process running that version's code (this file run as a script,
``PYTHONPATH`` the version's tree) lists the cluster into a ``ClusterView``, plans
(``release.plan``: one release), and times ``Releaser.execute`` — record, policy, then every pod
ungated — from just before the call to the return of the last pod's PATCH (`release_once`). The
namespace's pods are deleted and waited for before the next run. Podium's own webhook is not
registered: the ungating PATCHes are not admitted by it (with it, each PATCH would also carry that
admission's round trip).

Prints the median and the spread of the runs per version and size, and writes them (and every
run) to ``--out``/release.json when ``--out`` is given.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from webhook.core import adapters, release
from webhook.core.settings import Settings, ZoneChooser
from webhook.core.view import ClusterView
from webhook.kube import protocols
from webhook.serve.audit import MemorySink
from webhook.serve.releaser import Releaser

ROOT = Path(__file__).resolve().parents[2]
SIZES = (8, 64, 512)
ZONES = ("zone-a", "zone-b", "zone-c")
#: 512 GPUs per zone: the largest gang fits one zone; 64 pods a node at most (KWOK's pod
#: capacity is 110).
ZONE_NODES = {zone: [64] * 8 for zone in ZONES}
CRDS = ("kubeflow.org_pytorchjobs.yaml", "cilium.io_ciliumnetworkpolicies.yaml")
SETTINGS = Settings(zone_chooser=ZoneChooser.HOLD, own_user="podium")
#: The kinds the worker lists into its view.
LISTED = (
    ("v1", "Namespace"),
    ("v1", "Node"),
    ("v1", "Pod"),
    ("v1", "ConfigMap"),
    ("kubeflow.org/v1", "PyTorchJob"),
)


# -- the measurement (any version's code: webhook and the standard library only) -------------


class Stopwatch:
    """``protocols.Objects`` around another, noting when each pod PATCH returns."""

    def __init__(self, api: protocols.Objects, clock: Callable[[], float]) -> None:
        self.api, self.clock = api, clock
        self.patched: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    async def json_patch(self, *args: Any, **kwargs: Any) -> Any:
        answer = await self.api.json_patch(*args, **kwargs)
        self.patched.append(self.clock())
        return answer


async def release_once(
    api: protocols.Objects,
    view: ClusterView,
    settings: Settings = SETTINGS,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Plan from ``view`` (one release expected) and carry it out through ``api``: the pods
    released and the seconds from the decision to the last pod's PATCH answered."""
    now = datetime.now(UTC)
    planned = release.plan(view, settings, now=now)
    (chosen,) = planned.releases
    watch = Stopwatch(api, clock)
    releaser = Releaser(
        view=lambda: view,
        ready=lambda: True,
        api=cast(protocols.Objects, watch),
        settings=settings,
        sink=MemorySink(),
        clock=lambda: now,
    )
    decided, cpu = clock(), time.process_time()
    entry = await releaser.execute(chosen, now=now)
    return {
        "pods": len(entry["pods"]),
        "seconds": (max(watch.patched) if watch.patched else clock()) - decided,
        # The releaser's own CPU (this process, every thread) over the same span, about.
        "cpu": time.process_time() - cpu,
        "error": entry.get("error"),
    }


async def _worker(kubeconfig: Path) -> dict[str, Any]:
    from webhook.kube import client  # noqa: PLC0415 - the real client for the worker only

    api = client.KubeObjects(client.load_client(kubeconfig))
    objects = [o for version, kind in LISTED for o in await api.list(version, kind)]
    view = ClusterView.from_objects(objects, zone_label=SETTINGS.zone_label, kept=adapters.KEPT)
    return await release_once(api, view)


# -- the driver ---------------------------------------------------------------------------------


def tree(rev: str, scratch: Path) -> Path:
    """The directory whose ``webhook`` is ``rev``'s (``WORKTREE``: this checkout; a directory:
    that checkout, e.g. another git worktree)."""
    if rev == "WORKTREE":
        return ROOT
    if Path(rev).is_dir():
        return Path(rev).resolve()
    out = scratch / rev.replace("/", "_")
    if not out.exists():
        out.mkdir()
        archive = subprocess.run(
            ["git", "archive", rev, "webhook"], cwd=ROOT, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def held_gang(size: int, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``size`` pods of ``job`` as podium's hold admission leaves them."""
    from bench.placement import runner, trace  # noqa: PLC0415 - the driver's only
    from webhook.core import mutation  # noqa: PLC0415

    spec = trace.TraceJob(
        index=0, name=job["metadata"]["name"], arrival_s=0, pods=size, gpus_per_pod=1, duration_s=0
    )
    uid = job["metadata"]["uid"]
    return [mutation.hold(p, gang_key=uid).pod for p in runner.operator_pods(spec, job)]


def gang_job(namespace: str, size: int) -> dict[str, Any]:
    from bench.placement import runner, trace  # noqa: PLC0415

    spec = trace.TraceJob(
        index=0, name="gang", arrival_s=0, pods=size, gpus_per_pod=1, duration_s=0
    )
    return runner.pytorchjob(spec, namespace)


def cpu_seconds(pids: Sequence[int]) -> float:
    """User and system CPU seconds the processes have used so far (``/proc/PID/stat``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def summary(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per version and size: the median, least and most seconds of its runs."""
    keys = sorted({(r["rev"], r["size"]) for r in runs}, key=lambda k: (k[1], k[0]))
    out = []
    for rev, size in keys:
        mine = [r for r in runs if (r["rev"], r["size"]) == (rev, size)]
        seconds = [r["seconds"] for r in mine]
        out.append(
            {
                "rev": rev,
                "size": size,
                "runs": len(seconds),
                "median": statistics.median(seconds),
                "least": min(seconds),
                "most": max(seconds),
                "cpu": statistics.median(r.get("cpu", 0.0) for r in mine),
                "control_plane_cpu": statistics.median(
                    r.get("control_plane_cpu", 0.0) for r in mine
                ),
            }
        )
    return out


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The summary as a Markdown table (milliseconds; CPU: medians, the releaser's process over
    the release, the control plane's processes over the worker's run)."""
    lines = [
        "| pods | version | runs | median ms | least ms | most ms | releaser CPU ms "
        "| control plane CPU ms |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['size']} | {r['rev']} | {r['runs']} | {r['median'] * 1000:.0f} "
            f"| {r['least'] * 1000:.0f} | {r['most'] * 1000:.0f} "
            f"| {r.get('cpu', 0.0) * 1000:.0f} | {r.get('control_plane_cpu', 0.0) * 1000:.0f} |"
        )
    return "\n".join(lines)


def measure(
    revs: Sequence[str], sizes: Sequence[int], runs: int, work: Path
) -> list[dict[str, Any]]:
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from testbed.build import controlplane_bin_dir  # noqa: PLC0415 - the driver's only
    from testbed.controlplane import CRD_DIR, LocalCluster  # noqa: PLC0415

    trees = {rev: tree(rev, work) for rev in revs}
    cluster = LocalCluster(controlplane_bin_dir(), work / "cluster")
    cluster.start()
    out: list[dict[str, Any]] = []
    try:
        cluster.create_fake_nodes(ZONE_NODES, timeout=180)
        cluster.install_crds([CRD_DIR / name for name in CRDS])
        for run in range(runs):
            for size in sizes:
                for index, rev in enumerate(revs):
                    ns = f"release-{size}-{run}-{index}"
                    cluster.create_namespace(ns, {"podium.dev/enabled": "true"})
                    job = cluster.request(
                        "POST",
                        f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs",
                        gang_job(ns, size),
                    )
                    path = f"/api/v1/namespaces/{ns}/pods"
                    with ThreadPoolExecutor(16) as pool:
                        list(
                            pool.map(
                                lambda p: cluster.request("POST", path, p),  # noqa: B023
                                held_gang(size, job),
                            )
                        )
                    pids = {name: p.pid for name, p in cluster.processes.items()}
                    before = {name: cpu_seconds([pid]) for name, pid in pids.items()}
                    done = subprocess.run(
                        [sys.executable, __file__, "worker", str(cluster.kubeconfig)],
                        cwd=trees[rev],
                        env={"PYTHONPATH": str(trees[rev]), "PATH": "/usr/bin:/bin"},
                        check=True,
                        capture_output=True,
                        text=True,
                    )
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                    assert result["pods"] == size and not result["error"], result
                    used = {name: cpu_seconds([pid]) - before[name] for name, pid in pids.items()}
                    result["control_plane_cpu"] = sum(used.values())
                    result["control_plane_cpu_by"] = {k: round(v, 2) for k, v in used.items()}
                    row = {"rev": rev, "size": size, "run": run, **result}
                    print(json.dumps(row), flush=True)
                    out.append(row)
                    cluster.request(
                        "DELETE", path, {"kind": "DeleteOptions", "gracePeriodSeconds": 0}
                    )
                    cluster.wait_for(
                        "the gang's pods gone",
                        lambda: not cluster.request("GET", path)["items"],  # noqa: B023
                        timeout=120,
                    )
                    cluster.request("DELETE", f"/api/v1/namespaces/{ns}")
    finally:
        cluster.stop()
    return out


def main(argv: Sequence[str]) -> int:
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m bench.latency.release")
    parser.add_argument("revs", nargs="+", metavar="REV", help="a commit, or WORKTREE")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="podium-release-") as work:
        runs = measure(args.revs, sizes, args.runs, Path(work))
    rows = summary(runs)
    print(table(rows))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "release.json").write_text(
            json.dumps({"summary": rows, "runs": runs}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        print(json.dumps(asyncio.run(_worker(Path(sys.argv[2])))))
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
