"""One throughput run: podium serve vs the bare-ASGI limit vs kopf under load, and the cluster
view against cluster size. Writes ``results.json``, ``results.md`` (and its tables into the
README beside it) and PNG plots to ``--out``. ``python -m bench throughput`` (``bench.cli``) calls
`run` and `report_only`.

Each server runs in its own process pinned to core 0; ``wrk`` (Debian package ``wrk``) runs on
core 1 with ``load.lua`` (beside this file), one thread, keep-alive TLS connections to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.report import machine
from bench.throughput import report, scale, servers, workload
from testbed.processes import free_port
from webhook import certs

ROOT = Path(__file__).resolve().parents[2]
LUA = Path(__file__).with_name("load.lua")
RESULTS = "results.json"
TABLES = "results.md"
README = "README.md"
SERVER_CORE, LOAD_CORE = 0, 1
CONCURRENCY = report.CONCURRENCY
BURST = 1000


def write_certs(directory: Path) -> None:
    ca = certs.issue_ca("podium-bench-ca")
    leaf = certs.issue_serving(
        ca, service="podium", namespace="podium-system", extra_sans=("127.0.0.1",)
    )
    (directory / "tls.crt").write_bytes(leaf.cert_pem())
    (directory / "tls.key").write_bytes(leaf.key_pem())
    (directory / "ca.pem").write_bytes(ca.cert_pem())


def write_bodies(directory: Path) -> dict[str, Path]:
    """Review bodies: later pods of recorded jobs, a first-pod template, a 1,000-pod gang."""
    later = []
    for job in range(8):
        name, uid = workload.job_of(job)
        for rank in range(8):
            rtype = "master" if rank == 0 else "worker"
            pod = workload.training_pod(name, uid, rtype, rank, world=8, gpus=4)
            later.append(workload.review(pod, uid=f"later-{job}-{rank}"))
    fresh = workload.review(
        workload.training_pod("fresh", "@JOB@", "worker", 1, world=8, gpus=4), uid="fresh"
    )
    paths = {"later": directory / "later.txt", "fresh": directory / "fresh.txt"}
    paths["later"].write_bytes(b"\n".join(later) + b"\n")
    paths["fresh"].write_bytes(fresh + b"\n")
    return paths


def burst_bodies(directory: Path, tag: str) -> Path:
    """A 1,000-pod gang of a job nobody has seen: the first admission decides, the rest follow."""
    uid = f"burst-{tag}"
    bodies = [
        workload.review(
            workload.training_pod(
                f"gang-{tag}", uid, "master" if i == 0 else "worker", i, world=BURST, gpus=1
            ),
            uid=f"{uid}-{i}",
        )
        for i in range(BURST)
    ]
    path = directory / f"burst-{tag}.txt"
    path.write_bytes(b"\n".join(bodies) + b"\n")
    return path


@dataclasses.dataclass(frozen=True)
class Served:
    url: str
    pid: int

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (``/proc/PID/stat``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def serving(
    kind: str, certs_dir: Path, *, nodes: int, profile: Path | None = None
) -> Iterator[Served]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "bench.throughput.servers",
        kind,
        "--port",
        str(port),
        "--certs",
        str(certs_dir),
        "--nodes",
        str(nodes),
        "--core",
        str(SERVER_CORE),
    ]
    if profile is not None:
        command += ["--profile", str(profile)]
    log = (certs_dir / f"{kind}.log").open("w")
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}/" + ("podium" if kind == "kopf" else "mutate")
    try:
        _wait_ready(port, proc, certs_dir / f"{kind}.log")
        yield Served(url, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", port), timeout=1) as raw,
            context.wrap_socket(raw),
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"server on port {port} did not come up")


def wrk(
    server: Served,
    bodies: Path,
    *,
    connections: int,
    seconds: float,
    mode: str = "cycle",
    prefix: str = "j",
    limit: int = 0,
) -> dict[str, Any]:
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(LUA),
        server.url,
        "--",
        str(bodies),
        mode,
        prefix,
        str(limit),
    ]
    if shutil.which("taskset"):
        command = ["taskset", "-c", str(LOAD_CORE), *command]
    cpu_before = server.cpu_seconds()
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    cpu = server.cpu_seconds() - cpu_before
    line = next(x for x in reversed(done.stdout.splitlines()) if x.startswith("{"))
    stats: dict[str, Any] = json.loads(line)
    stats["rps"] = stats["requests"] / (stats["duration_us"] / 1e6)
    if limit:
        # wrk stops sending after ``limit`` responses but idles until -d: with every connection
        # busy from first to last request, the wall time is the summed latency / connections.
        stats["duration_us"] = stats["mean_us"] * stats["requests"] / connections
        stats["rps"] = stats["requests"] / (stats["duration_us"] / 1e6)
    stats["connections"] = connections
    # CPU, unlike req/s, does not fall when another session takes the core for a while: the
    # server's cost per request, whatever the machine's load (jiffies: 10 ms resolution).
    stats["cpu_us"] = cpu / max(stats["requests"], 1) * 1e6
    stats["non_200"] = done.stderr.count("status ")
    return stats


Measure = Callable[[Served], dict[str, Any]]


def interleaved(
    servers: dict[str, Served],
    measure: Measure,
    *,
    rounds: int,
    better: Callable[[dict[str, Any], dict[str, Any]], bool],
    label: str,
) -> dict[str, dict[str, Any]]:
    """``measure`` each server in turn, ``rounds`` times, keeping each one's ``better`` round: load
    from elsewhere on a shared machine then hits every server alike rather than whichever ran."""
    kept: dict[str, dict[str, Any]] = {}
    for round_ in range(rounds):
        for kind, served in servers.items():
            print(f"[{label}] round {round_ + 1} {kind}", flush=True)
            stats = measure(served)
            if kind not in kept or better(stats, kept[kind]):
                kept[kind] = stats
    return kept


def more_rps(new: dict[str, Any], old: dict[str, Any]) -> bool:
    return bool(new["rps"] > old["rps"])


def less_cpu(new: dict[str, Any], old: dict[str, Any]) -> bool:
    return bool(new["cpu_us"] < old["cpu_us"])


@contextlib.contextmanager
def all_serving(
    kinds: tuple[str, ...], work: Path, *, nodes: int, warm_up: Path
) -> Iterator[dict[str, Served]]:
    """Every server of ``kinds`` up at once (idle ones cost nothing), warmed up on ``warm_up``."""
    with contextlib.ExitStack() as stack:
        running = {kind: stack.enter_context(serving(kind, work, nodes=nodes)) for kind in kinds}
        for served in running.values():
            wrk(served, warm_up, connections=4, seconds=1)
        yield running


def load_phases(
    work: Path, *, nodes: int, seconds: float, rounds: int, profile: Path | None
) -> dict[str, Any]:
    """Steady state (interleaved, best round by req/s), first pods and the gang burst."""
    bodies = write_bodies(work)
    results: dict[str, Any] = {}
    kinds = ("limit", "podium", "kopf")
    with all_serving(kinds, work, nodes=nodes, warm_up=bodies["later"]) as servers:
        for c in CONCURRENCY:
            best = interleaved(
                servers,
                functools.partial(wrk, bodies=bodies["later"], connections=c, seconds=seconds),
                rounds=rounds,
                better=more_rps,
                label=f"load later c={c}",
            )
            for kind, stats in best.items():
                results.setdefault(kind, {})[f"later-c{c}"] = stats
        for kind in ("podium", "kopf"):
            for c in CONCURRENCY:
                print(f"[load] {kind} first pod c={c}", flush=True)
                results[kind][f"first-c{c}"] = wrk(
                    servers[kind],
                    bodies["fresh"],
                    connections=c,
                    seconds=seconds,
                    mode="fresh",
                    prefix=f"{kind}-c{c}",
                )
            print(f"[load] {kind} 1,000-pod burst", flush=True)
            burst = burst_bodies(work, kind)
            results[kind]["burst-c16"] = wrk(
                servers[kind], burst, connections=16, seconds=30, limit=BURST
            )
    if profile is not None:
        print("[load] podium under pyinstrument", flush=True)
        with serving("podium", work, nodes=nodes, profile=profile) as served:
            wrk(served, bodies["later"], connections=4, seconds=seconds)
            wrk(served, bodies["fresh"], connections=4, seconds=1, mode="fresh", prefix="prof")
    return results


def breakdown(work: Path, *, nodes: int, seconds: float, rounds: int) -> dict[str, Any]:
    """Server CPU per later pod at 4 connections for the limit, podium cut short after each stage
    (``servers.STAGES``) and the whole of podium; each keeps its lowest round."""
    bodies = write_bodies(work)
    kinds = ("limit", *(f"podium-{stage}" for stage in servers.STAGES), "podium")
    with all_serving(kinds, work, nodes=nodes, warm_up=bodies["later"]) as running:
        return interleaved(
            running,
            functools.partial(wrk, bodies=bodies["later"], connections=4, seconds=seconds),
            rounds=rounds,
            better=less_cpu,
            label="breakdown",
        )


def scale_phases(sizes: tuple[int, ...], runs: int) -> list[dict[str, Any]]:
    print(f"[scale] views of {', '.join(map(str, sizes))} nodes", flush=True)
    return scale.measure_all(sizes, runs=runs)


def run(*, out: Path, quick: bool, profile: bool, seconds: float, server_nodes: int) -> int:
    """The load phases, the breakdown and the scale phases (shorter and smaller when ``quick``),
    then the report; 2 when ``wrk`` is missing."""
    if shutil.which("wrk") is None:
        print("wrk is needed: apt-get install -y wrk", file=sys.stderr)
        return 2
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {SERVER_CORE})  # the scale phases share the server's core
    seconds = 1.0 if quick else seconds
    nodes = 100 if quick else server_nodes
    sizes = (10, 100) if quick else (10, 500, 5000)
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="podium-bench-") as tmp:
        work = Path(tmp)
        write_certs(work)
        load = load_phases(
            work,
            nodes=nodes,
            seconds=seconds,
            rounds=1 if quick else 2,
            profile=out / "profile-server.txt" if profile else None,
        )
        stages = breakdown(
            work,
            nodes=nodes,
            seconds=seconds,
            rounds=1 if quick else 3,
        )
    sized = scale_phases(sizes, runs=100 if quick else 400)
    results = {
        "machine": machine(),
        "seconds_per_phase": seconds,
        "server_nodes": nodes,
        "load": load,
        "breakdown": stages,
        "scale": sized,
        "wall_s": time.monotonic() - started,
    }
    (out / RESULTS).write_text(json.dumps(results, indent=2) + "\n")
    print(write_report(out, results))
    return 0


def write_report(out: Path, results: dict[str, Any]) -> str:
    """``results.md``, its tables into the README beside it (when there is one) and the plots;
    the tables."""
    tables = report.markdown(results)
    (out / TABLES).write_text(tables)
    readme = out / README
    if readme.exists():
        readme.write_text(report.MARKERS.embed(readme.read_text(), tables))
    report.plots(results, out)
    return tables


def report_only(out: Path) -> int:
    """Run nothing: rewrite the tables and plots from ``results.json`` in ``out``."""
    print(write_report(out, json.loads((out / RESULTS).read_text())))
    return 0
