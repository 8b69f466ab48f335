"""The placement study's tables (Markdown, from ``placement.json``) and plots (from the raw run
records). ``docs/benchmarks/placement.md`` holds the tables between `MARKERS`; a run rewrites
only that block."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.placement import analysis
from bench.report import MISSING, Markers, num, pyplot, row, save, table

MARKERS = Markers(
    begin="<!-- placement tables, written by python -m bench placement: edit the report code -->",
    end="<!-- end of placement tables -->",
)


#: Round two's goal (docs/benchmarks/placement.md): the hold, with kube-scheduler's gang gates off,
#: against kube-scheduler's own gang placement (gates on) and Kueue's TAS, seed by seed.
HOLD_ARM, GANG_ARM, QUEUE_ARM = "podium-hold", "scheduler", "kueue-tas"
#: The most GPU-hours the hold may strand per seed.
STRANDED_LIMIT_GPU_H = 10.0
#: The gang size whose wait p95 the hold must keep no worse than kube-scheduler's.
BIG_GANG = 32


def _runs(results: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    order = {arm: i for i, arm in enumerate(results["arms"])}
    return sorted(results["runs"], key=lambda r: (order.get(r["arm"], 99), r["seed"]))


def markdown(results: Mapping[str, Any]) -> str:
    params = results["params"]
    lines = [
        f"Trace: {params['jobs']} jobs per seed, Poisson arrivals every "
        f"{params['mean_interarrival_s']} s on average, gangs of "
        f"{'/'.join(map(str, params['pods']))} pods × "
        f"{'/'.join(map(str, params['gpus_per_pod']))} GPUs, running "
        f"{params['duration_min'][0]:g}–{params['duration_min'][1]:g} simulated minutes "
        "once whole; "
        f"{params['sim_minutes_per_second']:g} simulated minute per real second. Cluster: "
        + ", ".join(f"{z} {n} nodes" for z, n in params["zone_nodes"].items())
        + f" × 8 GPUs = {params['capacity_gpus']} GPUs. A gang not whole "
        f"{params['timeout_sim_minutes']:g} simulated minutes after its first pod was bound, or "
        "whole but split across zones, fails and is created anew. Offered load over the arrival "
        "window: "
        + ", ".join(f"seed {s} {load:.2f}×" for s, load in sorted(params["offered_load"].items()))
        + f" of capacity. Runs: {results['wall_s'] / 60:.1f} min wall in all on "
        f"{results['machine']['cpus']} CPUs, podium and the harness at {_sources(results)}.",
        "",
        "### Placement outcomes",
        "",
        *table(
            "arm | seed | jobs | ran split across zones | whole in one zone | finished "
            "| failed attempts: timed out / split | wait p50 / p95 (sim min) | stuck partial > "
            f"{analysis.STUCK_SIM_MINUTES:g} min | stranded GPU-h | useful GPU-h "
            "| useful / capacity",
            map(_outcomes, _runs(results)),
        ),
        "",
        "### What placing costs the control plane",
        "",
        *table(
            "arm | seed | pods created | webhook calls | webhook p50 / p99 / mean ms (apiserver) "
            "| scheduled | unschedulable attempts | scheduled / s | peak binds / s "
            "| bound → Running p50 s | run (sim min) | errors",
            map(_costs, _runs(results)),
        ),
    ]
    lines += [
        "",
        "### Waiting: by gang size, for room, and where an autoscaler could see it",
        "",
        *table(
            "arm | seed | "
            + " | ".join(f"wait p50 / p95, {n} pods" for n in analysis.GANG_SIZES)
            + " | room → last bind p50 / p95 (gangs) | held at end | held GPU-h (gated) "
            "| pending GPU-h (visible)",
            map(_waiting, _runs(results)),
        ),
    ]
    if goals := goal(results):
        lines += [
            "",
            f"### The goal: `{HOLD_ARM}` (gates off) against `{GANG_ARM}` (gates on) and "
            f"`{QUEUE_ARM}`, seed by seed",
            "",
            *table(
                "seed | finished ≥ scheduler's | stranded GPU-h ≤ "
                f"{STRANDED_LIMIT_GPU_H:g} | split = 0 | stuck partial > "
                f"{analysis.STUCK_SIM_MINUTES:g} min = 0 | {BIG_GANG}-pod wait p95 ≤ "
                "scheduler's (sim min) | useful / capacity > kueue-tas's | met, of those judged",
                goals,
            ),
        ]
    hooked = [r for r in _runs(results) if r["metrics"].get("webhook_buckets")]
    if hooked:
        bounds = sorted({le for r in hooked for le in r["metrics"]["webhook_buckets"]}, key=_bound)
        lines += [
            "",
            "### The apiserver's histogram of the arm's pod webhook (CREATE): calls per bucket",
            "",
            *table(
                "arm | seed | calls | " + " | ".join(_bucket_label(b, bounds) for b in bounds),
                (_histogram(r, bounds) for r in hooked),
            ),
        ]
    queued = [r for r in _runs(results) if r["metrics"].get("queue_workloads")]
    if queued:
        lines += [
            "",
            "Kueue's own times (its Workloads, one per attempt, as the arm watched them):",
            "",
        ]
        lines += [_queue_line(r) for r in queued]
    reasons = [r for r in _runs(results) if r["metrics"]["reasons"]]
    if reasons:
        lines += ["", "podium's decisions (first pod of each job, `podium.dev/reason`):", ""]
        for run in reasons:
            counts = ", ".join(f"{k} {v}" for k, v in run["metrics"]["reasons"].items())
            lines.append(f"* {run['arm']} seed {run['seed']}: {counts}")
    return "\n".join(lines) + "\n"


def _sources(results: Mapping[str, Any]) -> str:
    """The commit the runs were made at, or each commit and the arms run at it."""
    arms_at: dict[str, list[str]] = {}
    for run in _runs(results):
        source = run.get("source") or results["source"]
        at = f"{source['commit'][:7]}" + (
            f" with {source['changed_files']} files changed" if source["changed_files"] else ""
        )
        if run["arm"] not in arms_at.setdefault(at, []):
            arms_at[at].append(run["arm"])
    if len(arms_at) == 1:
        return f"commit {next(iter(arms_at))}"
    return "commits " + "; ".join(f"{at} ({', '.join(names)})" for at, names in arms_at.items())


def _check(ok: bool | None, figures: str) -> tuple[str, bool | None]:
    return f"{figures} {MISSING if ok is None else ('yes' if ok else '**no**')}", ok


def goal(results: Mapping[str, Any]) -> list[str]:
    """One row per seed the hold ran: each criterion with its figures (the hold's first, then the
    arm it is held against) and whether it is met; a criterion whose other arm did not run that
    seed, or whose figure is missing, is neither met nor failed."""
    by = {(r["arm"], r["seed"]): r["metrics"] for r in results["runs"]}
    rows = []
    for seed in sorted(s for a, s in by if a == HOLD_ARM):
        hold, gang, queue = (
            by[(HOLD_ARM, seed)],
            by.get((GANG_ARM, seed)),
            by.get((QUEUE_ARM, seed)),
        )

        def big_p95(m: Mapping[str, Any] | None) -> float | None:
            return ((m or {}).get("wait_by_size", {}).get(str(BIG_GANG)) or {}).get("p95_min")

        hold_p95, gang_p95 = big_p95(hold), big_p95(gang)
        checks = [
            _check(
                None if gang is None else hold["finished"] >= gang["finished"],
                f"{hold['finished']} vs {gang['finished'] if gang else MISSING}",
            ),
            _check(hold["stranded_gpu_h"] <= STRANDED_LIMIT_GPU_H, num(hold["stranded_gpu_h"])),
            _check(hold["split_jobs"] == 0, str(hold["split_jobs"])),
            _check(hold["stuck_partial"] == 0, str(hold["stuck_partial"])),
            _check(
                None if hold_p95 is None or gang_p95 is None else hold_p95 <= gang_p95,
                f"{num(hold_p95)} vs {num(gang_p95)}",
            ),
            _check(
                None if queue is None else hold["useful_share"] > queue["useful_share"],
                f"{100 * hold['useful_share']:.0f} % vs "
                + (f"{100 * queue['useful_share']:.0f} %" if queue else MISSING),
            ),
        ]
        met = sum(ok is True for _, ok in checks)
        judged = sum(ok is not None for _, ok in checks)
        rows.append(row(seed, *(cell for cell, _ in checks), f"{met} of {judged}"))
    return rows


def _outcomes(run: Mapping[str, Any]) -> str:
    m = run["metrics"]
    return row(
        run["arm"],
        run["seed"],
        m["jobs"],
        f"{m['split_jobs']} ({m['split_pct']:.0f} %)",
        m["whole_one_zone"],
        m["finished"],
        f"{m['failed_timeout']} / {m['failed_split']}",
        f"{num(m['wait_p50_min'])} / {num(m['wait_p95_min'])}",
        m["stuck_partial"],
        num(m["stranded_gpu_h"]),
        num(m["useful_gpu_h"]),
        f"{100 * m['useful_share']:.0f} %",
    )


def _costs(run: Mapping[str, Any]) -> str:
    m = run["metrics"]
    hook = (
        f"{num(m['webhook_p50_ms'])} / {num(m['webhook_p99_ms'])} / {num(m['webhook_mean_ms'])}"
        if m["webhook_calls"]
        else MISSING
    )
    return row(
        run["arm"],
        run["seed"],
        m["pods_created"],
        m["webhook_calls"],
        hook,
        m["scheduler_scheduled"],
        m["scheduler_unschedulable"],
        f"{m['scheduler_scheduled_per_s']:.1f}",
        m["bound_peak_per_s"],
        num(m["bind_to_running_p50_s"], 2),
        f"{m['run_min']:.0f}",
        run["errors"],
    )


def _waiting(run: Mapping[str, Any]) -> str:
    m = run["metrics"]
    sizes = [m["wait_by_size"].get(str(n)) or {} for n in analysis.GANG_SIZES]
    return row(
        run["arm"],
        run["seed"],
        *(f"{num(w.get('p50_min'))} / {num(w.get('p95_min'))}" for w in sizes),
        f"{num(m['room_to_bind_p50_min'])} / {num(m['room_to_bind_p95_min'])} ({m['room_waited']})",
        m["held_at_end"],
        num(m["held_gpu_h"]),
        num(m["pending_gpu_h"]),
    )


def _queue_line(run: Mapping[str, Any]) -> str:
    m = run["metrics"]
    return (
        f"* {run['arm']} seed {run['seed']}: {m['queue_workloads']} Workloads, "
        f"{m['queue_admitted']} admitted; created → Admitted p50 / p95 "
        f"{num(m['queue_admit_wait_p50_min'])} / {num(m['queue_admit_wait_p95_min'])} sim min; "
        f"Admitted → last pod ungated p50 / p95 {num(m['queue_ungate_after_admit_p50_s'], 2)} / "
        f"{num(m['queue_ungate_after_admit_p95_s'], 2)} s"
    )


def _bound(le: str) -> float:
    return float("inf") if le == "+Inf" else float(le)


def _bucket_label(le: str, bounds: Sequence[str]) -> str:
    if le == "+Inf":
        return f"> {_ms(bounds[-2])}" if len(bounds) > 1 else "all"
    return f"≤ {_ms(le)}"


def _ms(le: str) -> str:
    value = 1000 * float(le)
    return f"{value:g} ms" if value < 1000 else f"{value / 1000:g} s"


def _histogram(run: Mapping[str, Any], bounds: Sequence[str]) -> str:
    """Calls per bucket (the apiserver's buckets are cumulative)."""
    buckets = run["metrics"]["webhook_buckets"]
    counts, below = [], 0.0
    for le in bounds:
        cumulative = float(buckets.get(le, below))
        counts.append(int(cumulative - below))
        below = cumulative
    return row(run["arm"], run["seed"], run["metrics"]["webhook_calls"], *counts)


def plots(records: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    """One timeline per arm (a column per seed): GPUs held usefully and stranded, GPUs of jobs
    not yet running whole, and how full each zone is. Returns the files written."""
    plt = pyplot()
    by_arm: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        by_arm.setdefault(record["arm"], []).append(record)
    written = []
    for arm, unordered in by_arm.items():
        runs = sorted(unordered, key=lambda r: r["seed"])
        fig, axes = plt.subplots(
            2,
            len(runs),
            figsize=(6 * len(runs), 6),
            squeeze=False,
            sharex="col",
            gridspec_kw={"height_ratios": [2, 1]},
        )
        for col, record in enumerate(runs):
            series = analysis.timeline(record)
            t = series["t_min"]
            top, bottom = axes[0][col], axes[1][col]
            top.stackplot(
                t,
                series["useful"],
                series["stranded"],
                labels=["useful (whole gang, one zone)", "stranded (partial or split)"],
                colors=["#3a923a", "#d62728"],
                alpha=0.8,
            )
            top.axhline(record["capacity_gpus"], color="black", lw=0.8)
            top.set_ylim(0, 1.1 * record["capacity_gpus"])
            backlog = top.twinx()
            backlog.plot(t, series["waiting"], color="#555555", lw=0.8, ls="--")
            backlog.set_ylim(0, max(1.1 * max(series["waiting"]), record["capacity_gpus"]))
            backlog.set_ylabel("asked by jobs not yet whole (dashed)", fontsize=8)
            top.set_title(f"{arm}, seed {record['seed']}")
            top.set_ylabel("GPUs")
            for zone, gpus in sorted(record["zones"].items()):
                bottom.plot(t, [100 * g / gpus for g in series[f"zone:{zone}"]], lw=0.9, label=zone)
            bottom.set_ylim(0, 105)
            bottom.set_ylabel("zone held %")
            bottom.set_xlabel("simulated minutes")
        axes[0][0].legend(loc="upper left", fontsize=8)
        axes[1][0].legend(loc="lower right", fontsize=8)
        written.append(save(fig, out / f"placement-{arm}.png", dpi=90))
    return written
