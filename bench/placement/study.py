"""The placement study's runs: each (arm, seed) on a fresh local control plane, the results and raw
records saved under ``--out`` and merged with the earlier runs there, the report written from them.
``python -m bench placement`` (``bench.cli``) calls `run` and `report_only`.

Each (arm, seed) runs on a fresh local control plane (testbed.controlplane) with the scheduler's
gang gates on, KWOK nodes in three unequal zones, and the same trace and time compression. Writes,
under ``--out``: ``placement.json`` (the numbers), ``placement-runs.json.gz`` (each run's raw
record, from which the numbers are computed), the tables into ``placement.md`` and one timeline
plot per arm, ``placement-<arm>.png``. Runs of other (arm, seed) pairs already in ``--out`` are
kept when the trace is the same, so an arm can be added or re-run alone.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.placement import analysis, arms, report, runner, trace
from bench.report import machine
from testbed.build import controlplane_bin_dir

ROOT = Path(__file__).resolve().parents[2]
#: The seeds `python -m bench placement` runs unless told otherwise.
DEFAULT_SEEDS = (1, 2, 3)
RESULTS = "placement.json"
RECORDS = "placement-runs.json.gz"
DOCUMENT = "placement.md"


def source() -> dict[str, Any]:
    """The commit the harness and podium ran from, and whether their files differed from it."""

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        )
        return result.stdout.strip()

    changed = git("status", "--porcelain", "--", "webhook", "bench", "testbed")
    return {"commit": git("rev-parse", "HEAD"), "changed_files": len(changed.splitlines())}


def params(
    spec: trace.TraceSpec, seeds: Sequence[int], drain_s: float, timeout_min: float
) -> dict[str, Any]:
    """What makes two runs comparable: the trace, the cluster, the compression, the drain, the
    gang timeout."""
    return {
        "jobs": spec.jobs,
        "mean_interarrival_s": spec.mean_interarrival_s,
        "pods": {str(k): v for k, v in sorted(spec.pods.items())},
        "gpus_per_pod": {str(k): v for k, v in sorted(spec.gpus_per_pod.items())},
        "duration_min": list(spec.duration_min),
        "max_gpus": spec.max_gpus,
        "sim_minutes_per_second": trace.SIM_MINUTES_PER_SECOND,
        "zone_nodes": dict(trace.ZONE_NODES),
        "capacity_gpus": trace.capacity(),
        "drain_s": drain_s,
        "timeout_sim_minutes": timeout_min,
        "operator_delay_s": runner.OPERATOR_DELAY_S,
        "stuck_sim_minutes": analysis.STUCK_SIM_MINUTES,
        "offered_load": {
            str(s): round(trace.offered_load(trace.generate(s, spec)), 4) for s in seeds
        },
    }


def spec_of(p: dict[str, Any]) -> trace.TraceSpec:
    """The `TraceSpec` recorded in ``params``."""
    return trace.TraceSpec(
        jobs=p["jobs"],
        mean_interarrival_s=p["mean_interarrival_s"],
        pods={int(k): v for k, v in p["pods"].items()},
        gpus_per_pod={int(k): v for k, v in p["gpus_per_pod"].items()},
        duration_min=tuple(p["duration_min"]),
        max_gpus=p["max_gpus"],
    )


def _comparable(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    strip = ("offered_load",)
    return {k: v for k, v in a.items() if k not in strip} == {
        k: v for k, v in b.items() if k not in strip
    }


#: A run's key among a study's runs: its arm, its seed, and which repeat of that arm and seed
#: it is (0, the first, unless the run says otherwise: ``--repeat``).
Key = tuple[str, int, int]


def key(run: Mapping[str, Any]) -> Key:
    """The key of a run or of its record."""
    return run["arm"], run["seed"], run.get("repeat", 0)


@dataclasses.dataclass(frozen=True)
class Store:
    """Where a study keeps its runs under ``--out``: the numbers (``results``), each run's raw
    record (``records``, from which the numbers are computed again), how a record's numbers are
    computed, and a trace's offered load against the study's cluster. The main study and the
    topology study (`bench.placement.topostudy`) each have one."""

    results: str
    records: str
    metrics: Callable[[Mapping[str, Any]], dict[str, Any]]
    load: Callable[[Sequence[trace.TraceJob]], float]
    #: How the study's lines start (``[placement] …``).
    label: str

    def load_records(self, out: Path) -> list[dict[str, Any]]:
        path = out / self.records
        if not path.exists():
            return []
        records: list[dict[str, Any]] = json.loads(gzip.decompress(path.read_bytes()))["runs"]
        return records

    def save(
        self,
        out: Path,
        run_params: dict[str, Any],
        arm_order: Sequence[str],
        runs: dict[Key, dict[str, Any]],
        records: dict[Key, dict[str, Any]],
    ) -> dict[str, Any]:
        """Every run so far into ``out``, arms in ``arm_order``, seeds and repeats in order; the
        offered load of every seed among them."""
        ordered = sorted(runs, key=lambda k: (list(arm_order).index(k[0]), *k[1:]))
        seeds = sorted({k[1] for k in ordered})
        spec = spec_of(run_params)
        run_params = {
            **run_params,
            "offered_load": {str(s): round(self.load(trace.generate(s, spec)), 4) for s in seeds},
        }
        results = {
            "params": run_params,
            "source": source(),
            "arms": [a for a in arm_order if any(k[0] == a for k in ordered)],
            "machine": machine(),
            "wall_s": round(sum(runs[k]["wall_s"] for k in ordered), 1),
            "runs": [runs[k] for k in ordered],
        }
        (out / self.results).write_text(json.dumps(results, indent=1) + "\n")
        payload = json.dumps({"runs": [records[k] for k in ordered]}, separators=(",", ":"))
        (out / self.records).write_bytes(gzip.compress(payload.encode(), mtime=0))
        return results

    def earlier(
        self, out: Path, run_params: Mapping[str, Any]
    ) -> tuple[dict[Key, dict[str, Any]], dict[Key, dict[str, Any]]]:
        """The runs and records in ``out`` made with the same trace and cluster, their numbers
        computed again (the analysis may have changed since)."""
        runs: dict[Key, dict[str, Any]] = {}
        records: dict[Key, dict[str, Any]] = {}
        previous = out / self.results
        if not previous.exists():
            return runs, records
        old = json.loads(previous.read_text())
        if not _comparable(old["params"], run_params):
            print(f"[{self.label}] earlier results use another trace: starting afresh", flush=True)
            return runs, records
        old_records = {key(r): r for r in self.load_records(out)}
        for run in old["runs"]:
            if (k := key(run)) in old_records:
                run["metrics"] = self.metrics(old_records[k])
                run.setdefault("source", old["source"])  # runs saved before each kept its own
                runs[k], records[k] = run, old_records[k]
        return runs, records

    def recompute(self, out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """``results`` with every run's numbers computed again from its raw record (so a change
        to the analysis needs no new runs), written back; and the records."""
        results: dict[str, Any] = json.loads((out / self.results).read_text())
        records = {key(r): r for r in self.load_records(out)}
        for run in results["runs"]:
            run["metrics"] = self.metrics(records[key(run)])
        (out / self.results).write_text(json.dumps(results, indent=1) + "\n")
        return results, list(records.values())


STORE = Store(RESULTS, RECORDS, analysis.metrics, trace.offered_load, "placement")


def load_records(out: Path) -> list[dict[str, Any]]:
    return STORE.load_records(out)


def _one_run(
    name: str,
    seed: int,
    jobs: list[trace.TraceJob],
    bin_dir: Path,
    work: Path,
    run_params: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one arm on one seed: (its summary with metrics, its raw record)."""
    started = time.monotonic()
    record = runner.run_arm(
        arms.ARMS[name](),
        seed,
        jobs,
        bin_dir,
        work,
        drain_s=run_params["drain_s"],
        timeout_s=run_params["timeout_sim_minutes"] / trace.SIM_MINUTES_PER_SECOND,
        log=lambda line: print(line, flush=True),
    )
    metrics = analysis.metrics(record)
    run = {
        "arm": name,
        "seed": seed,
        "metrics": metrics,
        "errors": len(record["errors"]),
        "setup_s": record["setup_s"],
        "wall_s": round(time.monotonic() - started, 1),
        "source": source(),
    }
    for error in record["errors"][:5]:
        print(f"  error: {error}", flush=True)
    print(
        f"[{name} seed {seed}] split {metrics['split_jobs']}, finished "
        f"{metrics['finished']}/{metrics['jobs']}, retries "
        f"{metrics['failed_timeout']}+{metrics['failed_split']}, stuck "
        f"{metrics['stuck_partial']}, stranded {metrics['stranded_gpu_h']:.1f} GPU-h, "
        f"useful {100 * metrics['useful_share']:.0f} %, {run['wall_s']:.0f}s wall",
        flush=True,
    )
    return run, record


def write_report(out: Path, results: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """The tables into ``placement.md`` (between the markers) and the plots; the tables."""
    tables = report.markdown(results)
    document = out / DOCUMENT
    if document.exists() and report.MARKERS.begin in document.read_text():
        document.write_text(report.MARKERS.embed(document.read_text(), tables))
    else:
        document.write_text(f"# Placement study\n\n{report.MARKERS.block(tables)}")
    for path in report.plots(records, out):
        print(f"[placement] wrote {path}", flush=True)
    return tables


def report_only(out: Path) -> int:
    """Recompute every run's metrics from its raw record, then rewrite ``placement.json``, the
    tables and the plots."""
    results, records = STORE.recompute(out)
    print(write_report(out, results, records))
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run(
    names: Sequence[str],
    seeds: Sequence[int],
    *,
    spec: trace.TraceSpec,
    drain_s: float,
    timeout_min: float,
    out: Path,
    work: Path | None,
    quick: bool,
    fresh: bool,
) -> int:
    """Run each of the arms ``names`` on each seed's trace, merged into the runs in ``out``
    (unless ``fresh``), and write the report."""
    # Stopped from outside (kill): still stop podium and the cluster on the way out.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    seeds = list(seeds)
    if quick:
        spec = dataclasses.replace(spec, jobs=30)
        seeds, drain_s = seeds[:1], min(drain_s, 20.0)
    run_params = params(spec, seeds, drain_s, timeout_min)
    arm_order = list(dict.fromkeys([*arms.ARMS, *names]))
    out.mkdir(parents=True, exist_ok=True)
    runs, records = ({}, {}) if fresh else STORE.earlier(out, run_params)

    bin_dir = controlplane_bin_dir()
    work_root = work or Path(tempfile.mkdtemp(prefix="podium-placement-"))
    started = time.monotonic()
    for seed in seeds:
        jobs = trace.generate(seed, spec)
        print(
            f"[placement] seed {seed}: {len(jobs)} jobs, {sum(j.pods for j in jobs)} pods, "
            f"offered load {trace.offered_load(jobs):.2f}× over {jobs[-1].arrival_s:.0f}s",
            flush=True,
        )
        for name in names:
            k = (name, seed, 0)
            runs[k], records[k] = _one_run(
                name, seed, jobs, bin_dir, work_root / f"{name}-{seed}", run_params
            )
            results = STORE.save(out, run_params, arm_order, runs, records)
    results = STORE.save(out, run_params, arm_order, runs, records)
    print(write_report(out, results, load_records(out)))
    print(f"[placement] {time.monotonic() - started:.0f}s wall for this invocation", flush=True)
    return 0
