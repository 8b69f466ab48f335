"""``latency.md`` from ``latency.json`` (``bench.latency.burst``): the apiserver's histogram of
the webhook in each arm's burst (the no-op's and podium's modes), side by side, each mode's mean
as a multiple of the no-op's and beside podium's own (its handler's time: the rest is the call,
TLS, HTTP and podium's event loop busy with other work), and the writes each burst caused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.report import MISSING, Markers

#: The bucket the study reports: admissions the apiserver saw answered within 5 ms.
FAST_LE = "0.005"
#: The arm of the no-op webhook: the floor the others are read against.
NOOP = "noop"


def _bound(le: str) -> float:
    return float("inf") if le == "+Inf" else float(le)


def share_within(histogram: Mapping[str, Any], le: str = FAST_LE) -> float | None:
    """The share of calls in the cumulative bucket ``le``; None with no calls (or no such
    bucket: then the table says so rather than guess)."""
    count = histogram["count"]
    buckets = histogram["buckets"]
    if not count or le not in buckets:
        return None
    return float(buckets[le]) / float(count)


def mean_ms(histogram: Mapping[str, Any]) -> float | None:
    return histogram["sum"] / histogram["count"] * 1000 if histogram["count"] else None


def own_mean_ms(run: Mapping[str, Any]) -> float | None:
    """podium's own mean (``podium_admission_duration_seconds``: parsed request to answer), ms;
    None for the no-op and for runs made before the bench read it."""
    own = run.get("podium_histogram")
    return None if own is None else mean_ms(own)


def floor_ms(runs: Sequence[Mapping[str, Any]]) -> float | None:
    """The no-op webhook's mean, ms; None when the run had no no-op arm (or it had no calls)."""
    return next((mean_ms(run["histogram"]) for run in runs if run["mode"] == NOOP), None)


def times(value: float | None, floor: float | None) -> str:
    """``value`` as a multiple of ``floor``."""
    return MISSING if value is None or not floor else f"{value / floor:.2f}×"


def _pct(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1%}"


def _ms(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}"


def _writes(run: Mapping[str, Any]) -> str:
    writes = run["writes"]
    return ", ".join(f"{n} {what}" for what, n in sorted(writes.items())) or "none"


def _per_admission(run: Mapping[str, Any]) -> str:
    return f"{sum(run['writes'].values()) / run['pods']:.3f}"


def markdown(results: Mapping[str, Any]) -> str:
    spec, runs = results["spec"], results["runs"]
    les = sorted({le for run in runs for le in run["histogram"]["buckets"]}, key=_bound)
    lines = [
        f"Run: {results['machine']['cpus']} CPUs, Python {results['machine']['python']}; "
        f"{spec['gangs']} PyTorchJobs × {spec['pods']} pods × {spec['gpus']} GPUs created at once "
        f"from {spec['threads']} client threads into one opted-in namespace per arm; zones "
        + ", ".join(f"{z} ({n} × 8 GPUs)" for z, n in results["zones"].items())
        + ": no gang fits any zone.",
        "",
        "| arm | pods | calls | ≤ 5 ms | mean ms | × no-op mean | podium's own mean ms | burst s "
        "| outcomes | writes besides the bench's own | writes per admission "
        "| effects of held admissions | load (1 min) before → after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    floor = floor_ms(runs)
    for run in runs:
        hist = run["histogram"]
        outcomes = ", ".join(f"{n} {o}" for o, n in sorted(run["outcomes"].items()))
        lines.append(
            f"| {run['mode']} | {run['pods']:,} | {hist['count']:,.0f} | "
            f"{_pct(share_within(hist))} | {_ms(mean_ms(hist))} | "
            f"{times(mean_ms(hist), floor)} | {_ms(own_mean_ms(run))} | {run['seconds']:.1f} | "
            f"{outcomes} | {_writes(run)} | {_per_admission(run)} | {run['held_effects']} | "
            f"{run['load_before'][0]:.1f} → {run['load_after'][0]:.1f} |"
        )
    lines += [
        "",
        "The apiserver's buckets (cumulative share of calls, `le` in seconds):",
        "",
        "| arm | " + " | ".join(f"≤ {le}" for le in les) + " |",
        "|---|" + "---|" * len(les),
    ]
    for run in runs:
        hist = run["histogram"]
        cells = " | ".join(_pct(share_within(hist, le)) for le in les)
        lines.append(f"| {run['mode']} | {cells} |")
    return "\n".join(lines) + "\n"


#: Where ``latency.md`` holds the tables: ``python -m bench burst`` rewrites only this block.
MARKERS = Markers(
    begin="<!-- tables written by python -m bench burst: edit bench/latency/report.py -->",
    end="<!-- end of the burst tables -->",
)


def document(results: Mapping[str, Any], existing: str | None) -> str:
    """``latency.md`` with the tables of ``results``: the hand-written text kept around them."""
    tables = markdown(results)
    if existing is None or MARKERS.begin not in existing:
        return "# Admission latency where the apiserver measures it\n\n" + MARKERS.block(tables)
    return MARKERS.embed(existing, tables)
