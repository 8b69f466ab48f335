"""The throughput study's Markdown tables (from ``results.json``), its targets and its PNG plots.
``docs/benchmarks/README.md`` holds the tables between `MARKERS`; a run rewrites only that block
(and ``results.md`` whole)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import Markers, num, pyplot, row, save, table

#: The targets of issue 4, checked against each run.
LIMIT_RATIO = 0.35
P99_MS_AT_4 = 2.0
KOPF_RATIO = 2.0
SCALE_RATIO = 1.2
MEMORY_MIB = 200
#: Keep-alive connections of the load phases.
CONCURRENCY = (1, 4, 16)


#: Where ``docs/benchmarks/README.md`` holds ``results.md``: ``python -m bench`` rewrites what is
#: between the two lines, so the README shows the run's own tables.
MARKERS = Markers(
    begin="<!-- results.md, written by python -m bench: edit the report code, not these tables -->",
    end="<!-- end of results.md -->",
)


def _ms(us: float) -> str:
    return f"{us / 1000:.2f}"


def _latencies(stats: dict[str, Any]) -> list[str]:
    """A load phase's last cells: p50, p99 and max in ms, its requests, the failed ones."""
    return [
        _ms(stats["p50_us"]),
        _ms(stats["p99_us"]),
        _ms(stats["max_us"]),
        f"{stats['requests']:,}",
        str(stats["errors"] + stats["non_200"]),
    ]


def _steady_row(name: str, stats: dict[str, Any], limit: dict[str, Any] | None) -> str:
    ratio = f"{stats['rps'] / limit['rps']:.2f}×" if limit else ""
    cpu = f"{stats['cpu_us']:.0f}" if "cpu_us" in stats else ""
    return row(name, stats["connections"], num(stats["rps"], 0), ratio, cpu, *_latencies(stats))


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"Run: {results['machine']['cpus']} CPUs, Python {results['machine']['python']}, "
        f"{results['seconds_per_phase']:g} s per load phase, podium's view "
        f"{results['server_nodes']} nodes × 30 pods, whole run {results['wall_s']:.0f} s.",
        *_steady(results["load"]),
        *_first_pods(results["load"]),
        *_breakdown(results.get("breakdown") or {}),
        *_scale(results["scale"]),
        "",
        "### Targets",
        "",
        *table(
            "target | measured | met",
            (row(t, m, "yes" if ok else "**no**") for t, m, ok in targets(results)),
        ),
    ]
    return "\n".join(lines) + "\n"


def _steady(load: dict[str, Any]) -> list[str]:
    limit, podium, kopf = load["limit"], load["podium"], load["kopf"]
    rows = []
    for c in CONCURRENCY:
        key = f"later-c{c}"
        rows.append(_steady_row("limit (bare ASGI)", limit[key], None))
        rows.append(_steady_row("podium", podium[key], limit[key]))
        rows.append(_steady_row("kopf", kopf[key], limit[key]))
    lines = [
        "",
        "### Load: steady state (later pods of recorded jobs), TLS keep-alive",
        "",
        *table(
            "server | conns | req/s | vs limit | CPU µs/req | p50 ms | p99 ms | max ms "
            "| requests | errors",
            rows,
        ),
    ]
    top = f"later-c{CONCURRENCY[-1]}"
    if all("cpu_us" in runs[top] for runs in (limit, podium, kopf)):
        cpu = {name: runs[top]["cpu_us"] for name, runs in load.items()}
        lines += [
            "",
            f"Server CPU per request at {CONCURRENCY[-1]} connections: "
            f"limit {cpu['limit']:.0f} µs, podium {cpu['podium']:.0f} µs, "
            f"kopf {cpu['kopf']:.0f} µs. On a core of its own, "
            f"podium's throughput would be {cpu['limit'] / cpu['podium']:.2f}× the limit's and "
            f"{cpu['kopf'] / cpu['podium']:.2f}× kopf's.",
        ]
    return lines


def _first_pods(load: dict[str, Any]) -> list[str]:
    rows = []
    for name in ("podium", "kopf"):
        for key in ("first-c1", "first-c4", "first-c16", "burst-c16"):
            stats = load[name][key]
            scenario = "first pod" if key.startswith("first") else "1,000-pod burst"
            rows.append(
                row(name, scenario, stats["connections"], num(stats["rps"], 0), *_latencies(stats))
            )
    return [
        "",
        "### Load: first pod of a new job each request (record + policy created), and a "
        "1,000-pod gang burst",
        "",
        *table(
            "server | scenario | conns | req/s | p50 ms | p99 ms | max ms | requests | errors", rows
        ),
    ]


def _scale(sized: list[dict[str, Any]]) -> list[str]:
    rows = (
        row(
            f"{r['nodes']:,}",
            f"{r['pods']:,}",
            f"{r['memory_bytes'] / 2**20:.1f}",
            f"{r['memory_bytes'] / 1024 / r['pods']:.2f}",
            f"{r['sync_s']:.2f}",
            f"{r['later_us']:.0f}",
            f"{r['first_us']:.0f}",
            f"{r['first_cold_us']:.0f}",
        )
        for r in sized
    )
    return [
        "",
        "### The cluster view against cluster size (30 pods per node)",
        "",
        *table(
            "nodes | pods | memory MiB | KiB/pod | cold sync s | later pod µs | first pod µs "
            "| first pod, cold cache µs",
            rows,
        ),
    ]


#: The breakdown's servers, in order, and what each adds to the one before it.
STAGES = (
    ("limit", "the limit: TLS, HTTP, the event loop, fixed answer bytes"),
    ("podium-answer", "podium's `/mutate` reading the body and sending a canned answer"),
    ("podium-parse", "+ `reviews.parse` (orjson and shape checks)"),
    ("podium-decide", "+ `engine.decide` (adapter, record, zone, patch)"),
    ("podium", "+ audit record, metrics, response: all of podium"),
)


def _breakdown(stages: dict[str, Any]) -> list[str]:
    if not all(kind in stages for kind, _ in STAGES):
        return []
    rows = []
    before = None
    for kind, what in STAGES:
        cpu = stages[kind]["cpu_us"]
        added = f"+{cpu - before:.0f}" if before is not None else ""
        rows.append(row(what, f"{cpu:.0f}", added, num(stages[kind]["rps"], 0)))
        before = cpu
    return [
        "",
        "### Where a later pod's CPU goes, inside the server (4 connections)",
        "",
        *table("server | CPU µs/req | added | req/s", rows),
    ]


def targets(results: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Each load target is checked at every concurrency and met only if it holds at all of them."""
    load, sized = results["load"], results["scale"]
    cells = [f"later-c{c}" for c in CONCURRENCY]

    def ratios(peer: str) -> list[float]:
        return [load["podium"][k]["rps"] / load[peer][k]["rps"] for k in cells]

    def each(values: list[float]) -> str:
        joined = " / ".join(f"{v:.2f}×" for v in values)
        return f"{joined} at {' / '.join(str(c) for c in CONCURRENCY)} conns"

    limit, kopf = ratios("limit"), ratios("kopf")
    p99 = load["podium"]["later-c4"]["p99_us"] / 1000
    limit_p99 = load["limit"]["later-c4"]["p99_us"] / 1000
    small, big = sized[0], sized[-1]
    later = big["later_us"] / small["later_us"]
    first = big["first_us"] / small["first_us"]
    memory = big["memory_bytes"] / 2**20
    return [
        (
            f"steady throughput ≥ {LIMIT_RATIO}× the bare-ASGI limit",
            each(limit),
            min(limit) >= LIMIT_RATIO,
        ),
        (
            f"p99 ≤ {P99_MS_AT_4:g} ms at 4 connections",
            f"{p99:.2f} ms (the limit's own: {limit_p99:.2f} ms)",
            p99 <= P99_MS_AT_4,
        ),
        (f"≥ {KOPF_RATIO:g}× kopf's throughput", each(kopf), min(kopf) >= KOPF_RATIO),
        (
            f"view ≤ {MEMORY_MIB} MiB at {big['nodes']:,} nodes",
            f"{memory:.0f} MiB",
            memory <= MEMORY_MIB,
        ),
        (
            f"admission at {big['nodes']:,} nodes ≤ {SCALE_RATIO}× at {small['nodes']} "
            "(later pod / first pod)",
            f"{later:.2f}× / {first:.2f}×",
            later <= SCALE_RATIO and first <= SCALE_RATIO,
        ),
    ]


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    """Throughput and p99 against the peers (``load.png``), the view against cluster size
    (``scale.png``). Returns the files written."""
    plt = pyplot()
    load, sized = results["load"], results["scale"]
    conns = (1, 4, 16)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.27
    for i, kind in enumerate(("limit", "podium", "kopf")):
        xs = [j + (i - 1) * width for j in range(len(conns))]
        ax1.bar(xs, [load[kind][f"later-c{c}"]["rps"] for c in conns], width, label=kind)
        ax2.bar(xs, [load[kind][f"later-c{c}"]["p99_us"] / 1000 for c in conns], width, label=kind)
    for ax, title in ((ax1, "throughput (req/s)"), (ax2, "p99 latency (ms)")):
        ax.set_xticks(range(len(conns)), [f"{c} conn" for c in conns])
        ax.set_title(title)
        ax.legend()
    ax2.axhline(P99_MS_AT_4, color="grey", linestyle=":", linewidth=1)
    fig.suptitle("Pod AdmissionReview, TLS keep-alive, steady state (later pods of a job)")
    written = [save(fig, out / "load.png", dpi=110)]

    nodes = [r["nodes"] for r in sized]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(nodes, [r["memory_bytes"] / 2**20 for r in sized], marker="o")
    ax1.axhline(MEMORY_MIB, color="grey", linestyle=":", linewidth=1)
    ax1.set_title("view memory (MiB, tracemalloc)")
    ax2.plot(nodes, [r["later_us"] for r in sized], marker="o", label="later pod")
    ax2.plot(nodes, [r["first_us"] for r in sized], marker="o", label="first pod (warm)")
    ax2.set_title("engine.decide median (µs)")
    ax2.set_ylim(bottom=0)
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("nodes (30 pods each)")
    written.append(save(fig, out / "scale.png", dpi=110))
    return written
