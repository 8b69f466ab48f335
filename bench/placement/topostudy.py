"""The topology study (``python -m bench placement-topology``): the placement study's trace and
harness on a cluster with network blocks below the zone (`bench.placement.topology`), the arms
that place a gang into a block, and how tightly each packed the gangs. Its own files beside the
main study's, which it leaves alone: ``placement-topology.json`` (numbers),
``placement-topology-runs.json.gz`` (raw records) and its tables in ``placement.md`` between
`MARKERS`.
"""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.placement import allreduce, analysis, runner, study, topology, trace
from bench.report import MISSING, Markers, num, row, table
from testbed.build import controlplane_bin_dir

RESULTS = "placement-topology.json"
RECORDS = "placement-topology-runs.json.gz"
MARKERS = Markers(
    begin="<!-- topology tables, written by python -m bench placement-topology: edit the report "
    "code -->",
    end="<!-- end of topology tables -->",
)
#: The goal (issue 31): the topology arm against the queue's TAS and the zone-only hold.
TOPOLOGY_ARM, HOLD_ARM, QUEUE_ARM = "podium-hold-topology", "podium-hold", "kueue-tas"
#: How many fewer jobs than the zone-only hold the topology arm may finish.
FINISHED_SLACK = 2


def metrics(record: Mapping[str, Any]) -> dict[str, Any]:
    """The main study's numbers and the topology's, per-gang rows left in the record."""
    topo = topology.metrics(record)
    spans = topo.pop("spans")
    hist: dict[str, int] = {}
    for span in spans:
        key = str(min(span["blocks"], 4)) + ("+" if span["blocks"] >= 4 else "")
        hist[key] = hist.get(key, 0) + 1
    return {**analysis.metrics(record), **topo, "blocks_hist": hist}


def params(
    spec: trace.TraceSpec, seeds: Sequence[int], drain_s: float, timeout_min: float
) -> dict[str, Any]:
    base = study.params(spec, seeds, drain_s, timeout_min)
    base.pop("zone_nodes")
    return {
        **base,
        "capacity_gpus": topology.CAPACITY,
        "layout": topology.TopologyLayout().describe(),
        "fabric": vars(allreduce.Fabric()) | {"comm_share": allreduce.COMM_SHARE},
        "offered_load": {str(s): round(_load(trace.generate(s, spec)), 4) for s in seeds},
    }


def _load(jobs: Sequence[trace.TraceJob]) -> float:
    """`trace.offered_load` against this cluster's capacity."""
    return trace.offered_load(jobs) * trace.capacity() / topology.CAPACITY


STORE = study.Store(RESULTS, RECORDS, metrics, _load, "topology")


def load_records(out: Path) -> list[dict[str, Any]]:
    return STORE.load_records(out)


def write_report(out: Path, results: Mapping[str, Any]) -> str:
    tables = markdown(results)
    document = out / study.DOCUMENT
    text = document.read_text() if document.exists() else "# Placement study\n"
    if MARKERS.begin in text:
        document.write_text(MARKERS.embed(text, tables))
    else:
        document.write_text(f"{text.rstrip()}\n\n{MARKERS.block(tables)}")
    return tables


def report_only(out: Path) -> int:
    results, _ = STORE.recompute(out)
    print(write_report(out, results))
    return 0


def run(
    names: Sequence[str],
    seeds: Sequence[int],
    *,
    jobs: int,
    drain_s: float,
    timeout_min: float,
    out: Path,
    work: Path | None,
    fresh: bool,
    repeat: int = 0,
) -> int:
    """Each arm on each seed, one after another, merged into the runs in ``out`` as their
    ``repeat``-th run (0: the first; another run of an arm and seed replaces the one with its
    repeat number, and stands beside those with others)."""
    signal.signal(signal.SIGTERM, study._exit_on_sigterm)
    spec = topology.spec(jobs)
    run_params = params(spec, seeds, drain_s, timeout_min)
    out.mkdir(parents=True, exist_ok=True)
    runs, records = ({}, {}) if fresh else STORE.earlier(out, run_params)
    built = {name: topology.ARMS[name] for name in names}  # unknown names fail before any run
    bin_dir = controlplane_bin_dir()
    work_root = work or Path(tempfile.mkdtemp(prefix="podium-topology-"))
    started = time.monotonic()
    for seed in seeds:
        trace_jobs = trace.generate(seed, spec)
        print(
            f"[topology] seed {seed}: {len(trace_jobs)} jobs, offered load "
            f"{_load(trace_jobs):.2f}× over {trace_jobs[-1].arrival_s:.0f}s",
            flush=True,
        )
        for name, make in built.items():
            began = time.monotonic()
            record = runner.run_arm(
                make(),
                seed,
                trace_jobs,
                bin_dir,
                work_root / f"{name}-{seed}" / str(repeat),
                drain_s=drain_s,
                timeout_s=timeout_min / trace.SIM_MINUTES_PER_SECOND,
                log=lambda line: print(line, flush=True),
                layout=topology.TopologyLayout(),
            )
            again = {"repeat": repeat} if repeat else {}
            record.update(arm=name, **again)
            m = metrics(record)
            runs[(name, seed, repeat)] = {
                "arm": name,
                "seed": seed,
                **again,
                "metrics": m,
                "errors": len(record["errors"]),
                "setup_s": record["setup_s"],
                "wall_s": round(time.monotonic() - began, 1),
                "source": study.source(),
            }
            records[(name, seed, repeat)] = record
            for error in record["errors"][:5]:
                print(f"  error: {error}", flush=True)
            print(
                f"[{name} seed {_seed(runs[(name, seed, repeat)])}] finished "
                f"{m['finished']}/{m['jobs']}, split "
                f"{m['split_jobs']}, stranded {m['stranded_gpu_h']:.1f} GPU-h, useful "
                f"{100 * m['useful_share']:.0f} %, one block {m['one_block']}/{m['gangs']}, "
                f"comm × {num(m['comm_ratio_mean'], 2)}, {time.monotonic() - began:.0f}s wall",
                flush=True,
            )
            STORE.save(out, run_params, list(topology.ARMS), runs, records)
    results = STORE.save(out, run_params, list(topology.ARMS), runs, records)
    print(write_report(out, results))
    print(f"[topology] {time.monotonic() - started:.0f}s wall for this invocation", flush=True)
    return 0


# -- report ----------------------------------------------------------------------------------------


def _runs(results: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    order = {arm: i for i, arm in enumerate(topology.ARMS)}
    return sorted(results["runs"], key=lambda r: (order.get(r["arm"], 99), *study.key(r)[1:]))


def _seed(run: Mapping[str, Any]) -> str:
    """A run's seed cell: the seed, and which run of it when it is a repeat."""
    return f"{run['seed']}" + (f" (repeat {run['repeat']})" if run.get("repeat") else "")


def _pct(share: float | None) -> str:
    return MISSING if share is None else f"{100 * share:.0f} %"


def markdown(results: Mapping[str, Any]) -> str:
    p = results["params"]
    layout, fabric = p["layout"], p["fabric"]
    lines = [
        f"Trace: {p['jobs']} jobs per seed, Poisson arrivals every {p['mean_interarrival_s']} s "
        f"on average, gangs of {'/'.join(map(str, p['pods']))} pods × "
        f"{'/'.join(map(str, p['gpus_per_pod']))} GPUs up to {p['max_gpus']} GPUs, running "
        f"{p['duration_min'][0]:g}–{p['duration_min'][1]:g} simulated minutes once whole. "
        f"Cluster: {len(layout['zones'])} zones × {layout['blocks_per_zone']} blocks "
        f"(`{layout['block_label']}`) × {layout['nodes_per_block']} nodes × "
        f"{layout['gpus_per_node']} GPUs = {p['capacity_gpus']} GPUs. Offered load: "
        + ", ".join(f"seed {s} {v:.2f}×" for s, v in sorted(p["offered_load"].items()))
        + f". Runs: {results['wall_s'] / 60:.1f} min wall in all on {results['machine']['cpus']} "
        f"CPUs, at {_sources(results)}. Cost model: intra-node {fabric['intra_node_gbs']:g}, "
        f"intra-block {fabric['intra_block_gbs']:g}, cross-block "
        f"{fabric['intra_block_gbs'] / fabric['cross_block_oversubscription']:g} GB/s per GPU; "
        f"all-reduce {100 * fabric['comm_share']:.0f} % of a step at the tightest placement.",
        "",
        "#### Outcomes",
        "",
        *table(
            "arm | seed | jobs | finished | split across zones | failed attempts: timed out / "
            "split | wait p50 / p95 (sim min) | stranded GPU-h | useful GPU-h | useful / capacity",
            map(_outcomes, _runs(results)),
        ),
        "",
        "#### How tightly each gang was packed (gangs that ran whole in one zone)",
        "",
        *table(
            "arm | seed | gangs | in one block | of those that fit one block: in one | at fewest "
            "blocks | at fewest nodes | gangs by blocks spanned 1 / 2 / 3 / 4+ | nodes per gang "
            "mean (fewest possible) | all-reduce time × tightest, GPU-weighted mean / p95 "
            "| step time × tightest",
            map(_packing, _runs(results)),
        ),
    ]
    if goals := goal(results):
        lines += [
            "",
            f"#### The goal: `{TOPOLOGY_ARM}` against `{QUEUE_ARM}` and `{HOLD_ARM}`, seed by seed",
            "",
            *table(
                f"seed | gangs in one block ≥ {QUEUE_ARM}'s | of the gangs that fit one block, "
                f"in one ≥ {QUEUE_ARM}'s | finished ≥ {HOLD_ARM}'s − "
                f"{FINISHED_SLACK} | useful / capacity ≥ {HOLD_ARM}'s | met",
                goals,
            ),
        ]
    return "\n".join(lines) + "\n"


def _sources(results: Mapping[str, Any]) -> str:
    at: dict[str, list[str]] = {}
    for run in _runs(results):
        source = run.get("source") or results["source"]
        key = source["commit"][:7] + (
            f" with {source['changed_files']} files changed" if source["changed_files"] else ""
        )
        if run["arm"] not in at.setdefault(key, []):
            at[key].append(run["arm"])
    if len(at) == 1:
        return f"commit {next(iter(at))}"
    return "commits " + "; ".join(f"{k} ({', '.join(v)})" for k, v in at.items())


def _outcomes(run: Mapping[str, Any]) -> str:
    m = run["metrics"]
    return row(
        run["arm"],
        _seed(run),
        m["jobs"],
        m["finished"],
        m["split_jobs"],
        f"{m['failed_timeout']} / {m['failed_split']}",
        f"{num(m['wait_p50_min'])} / {num(m['wait_p95_min'])}",
        num(m["stranded_gpu_h"]),
        num(m["useful_gpu_h"]),
        _pct(m["useful_share"]),
    )


def _packing(run: Mapping[str, Any]) -> str:
    m = run["metrics"]
    hist = m["blocks_hist"]
    return row(
        run["arm"],
        _seed(run),
        m["gangs"],
        f"{m['one_block']} ({_pct(m['one_block_share'])})",
        f"{m['fit_block_one_block']} of {m['fit_block']}",
        m["fewest_blocks"],
        m["fewest_nodes"],
        " / ".join(str(hist.get(k, 0)) for k in ("1", "2", "3", "4+")),
        f"{num(m['nodes_mean'])} ({num(m['fewest_nodes_mean'])})",
        f"{num(m['comm_ratio_mean'], 2)} / {num(m['comm_ratio_p95'], 2)}",
        num(m["step_ratio_mean"], 2),
    )


def _count(value: float) -> str:
    """A count, or a mean of counts to one decimal."""
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def _check(ok: bool | None, figures: str) -> tuple[str, bool | None]:
    return f"{figures} {MISSING if ok is None else ('yes' if ok else '**no**')}", ok


def goal(results: Mapping[str, Any]) -> list[str]:
    """One row per seed the topology arm ran: each criterion with both arms' figures — the mean
    over a seed's runs where it was run more than once (``--repeat``), each run's after it; a
    criterion whose other arm did not run that seed is neither met nor failed."""
    by: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in _runs(results):
        by.setdefault((r["arm"], r["seed"]), []).append(r["metrics"])
    rows = []
    for seed in sorted(s for a, s in by if a == TOPOLOGY_ARM):
        topo, queue, hold = (by.get((arm, seed), []) for arm in (TOPOLOGY_ARM, QUEUE_ARM, HOLD_ARM))
        checks = [
            *(
                _against(topo, queue, share, _pct)
                for share in ("one_block_share", "fit_block_share")
            ),
            _against(topo, hold, "finished", _count, slack=FINISHED_SLACK),
            _against(topo, hold, "useful_share", _pct),
        ]
        met = sum(ok is True for _, ok in checks)
        judged = sum(ok is not None for _, ok in checks)
        rows.append(row(seed, *(cell for cell, _ in checks), f"{met} of {judged}"))
    return rows


def _against(
    mine: Sequence[Mapping[str, Any]],
    theirs: Sequence[Mapping[str, Any]],
    metric: str,
    show: Callable[[float], str],
    slack: float = 0,
) -> tuple[str, bool | None]:
    """One criterion: the mean of ``metric`` over my runs at least theirs less ``slack``."""

    def figures(runs: Sequence[Mapping[str, Any]]) -> tuple[float | None, str]:
        values = [m[metric] for m in runs if m.get(metric) is not None]
        if not values:
            return None, MISSING
        mean = sum(values) / len(values)
        each = f" ({', '.join(map(show, values))})" if len(values) > 1 else ""
        return mean, show(mean) + each

    (a, said_a), (b, said_b) = figures(mine), figures(theirs)
    return _check(None if a is None or b is None else a >= b - slack, f"{said_a} vs {said_b}")
