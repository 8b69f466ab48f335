"""``python -m bench``: podium's studies, one command each, in the style of ``podium``'s CLI.

    python -m bench                               # = python -m bench throughput
    python -m bench throughput [--quick] [--profile] [--report-only] …
    python -m bench placement [--arms …] [--seeds …] [--report-only] …
    python -m bench burst [--gangs N] [--report-only] …
    python -m bench hold-order [--hours 12] [--seed 1]

``throughput`` is the default command: ``python -m bench`` and ``python -m bench --quick`` run it,
as they did before the placement study joined. Each command writes its results, tables and plots
into ``--out`` (docs/benchmarks by default); ``--report-only`` runs nothing and rewrites the tables
and plots from the results already there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperGroup

from bench import holdorder
from bench.latency import burst as latency
from bench.placement import arms, runner, study, topology, topostudy, trace
from bench.throughput import study as throughput_study

if TYPE_CHECKING:
    from typer._click import Context  # the click typer bundles: its Context is what it passes

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"
DEFAULT_COMMAND = "throughput"
SEEDS = ",".join(map(str, study.DEFAULT_SEEDS))


class _ThroughputByDefault(TyperGroup):
    """A group whose arguments, when they name no command (none, or options only), go to
    `DEFAULT_COMMAND`; ``-h``/``--help`` alone still shows the group's help."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if not args or (args[0].startswith("-") and args[0] not in ctx.help_option_names):
            args = [DEFAULT_COMMAND, *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="bench",
    cls=_ThroughputByDefault,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="podium's benchmarks: the throughput study and the placement study. Without a command, "
    "or with options only (python -m bench --quick), runs throughput. See "
    "docs/benchmarks/README.md and docs/benchmarks/placement.md.",
)

OutOption = Annotated[
    Path,
    typer.Option(
        "--out",
        metavar="DIR",
        help="Where the results, tables and plots are read and written.",
        show_default="docs/benchmarks",
    ),
]
QuickOption = Annotated[bool, typer.Option("--quick", help="A short smoke run.")]
SeedsOption = Annotated[
    str, typer.Option("--seeds", metavar="SEED,…", help="Comma-separated trace seeds.")
]
JobsOption = Annotated[int, typer.Option("--jobs", metavar="N", help="Jobs in each seed's trace.")]
StudyWorkOption = Annotated[
    Path | None, typer.Option("--work", metavar="DIR", help="Keep the clusters' files here.")
]
FreshOption = Annotated[
    bool, typer.Option("--fresh", help="Drop earlier runs in --out instead of merging.")
]
ReportOnlyOption = Annotated[
    bool,
    typer.Option(
        "--report-only", help="Run nothing: rewrite the tables and plots from the results in --out."
    ),
]


@app.command(short_help="podium's server against the limit and kopf; the view at scale.")
def throughput(
    out: OutOption = DOCS,
    quick: QuickOption = False,
    profile: Annotated[
        bool, typer.Option("--profile", help="Also profile podium under load (pyinstrument).")
    ] = False,
    seconds: Annotated[
        float, typer.Option("--seconds", metavar="S", help="Length of each load phase.")
    ] = 3.0,
    server_nodes: Annotated[
        int, typer.Option("--server-nodes", metavar="N", help="Nodes in podium's view.")
    ] = 1000,
    report_only: ReportOnlyOption = False,
) -> None:
    """podium serve against the bare-ASGI limit and kopf under wrk, and the cluster view against
    cluster size (~4 minutes on 2 cores; --quick: shorter phases, smaller views).

    Writes results.json, results.md (and its tables into the README in --out) and load.png,
    scale.png. Needs wrk (Debian package wrk) and the bench extra (kopf, matplotlib,
    pyinstrument).
    """
    if report_only:
        raise typer.Exit(throughput_study.report_only(out))
    raise typer.Exit(
        throughput_study.run(
            out=out, quick=quick, profile=profile, seconds=seconds, server_nodes=server_nodes
        )
    )


def _arms(value: str, known: Mapping[str, object]) -> list[str]:
    names = [name for name in value.split(",") if name]
    if unknown := [name for name in names if name not in known]:
        raise typer.BadParameter(
            f"unknown arms {unknown}; known: {list(known)}", param_hint="--arms"
        )
    return names


def _seeds(value: str) -> list[int]:
    try:
        return [int(seed) for seed in value.split(",") if seed]
    except ValueError as err:
        raise typer.BadParameter(
            f"{value!r} is not a comma-separated list of integers", param_hint="--seeds"
        ) from err


@app.command(short_help="Each way of placing a job's pods, on a real scheduler.")
def placement(
    arm_names: Annotated[
        str,
        typer.Option(
            "--arms", metavar="ARM,…", help=f"Comma-separated, of {', '.join(arms.ARMS)}."
        ),
    ] = ",".join(arms.DEFAULT_ARMS),
    seeds: SeedsOption = SEEDS,
    jobs: JobsOption = trace.TraceSpec.jobs,
    interarrival: Annotated[
        float,
        typer.Option("--interarrival", metavar="S", help="Mean real seconds between submissions."),
    ] = trace.TraceSpec.mean_interarrival_s,
    drain: Annotated[
        float,
        typer.Option(
            "--drain",
            metavar="S",
            help="Real seconds after the last submission before the run is cut.",
        ),
    ] = runner.DRAIN_S,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="MIN",
            help="Simulated minutes before a partial or split gang fails and is retried "
            "(0: never).",
        ),
    ] = runner.TIMEOUT_SIM_MINUTES,
    out: OutOption = DOCS,
    work: StudyWorkOption = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="30 jobs, seed 1, short drain: a smoke run (use another --out)."
        ),
    ] = False,
    fresh: FreshOption = False,
    report_only: ReportOnlyOption = False,
) -> None:
    """What each way of placing a training job's pods does to a real scheduler under a seeded job
    trace (the default: 7 arms × seeds 1, 2 and 3, ~100 minutes on 2 cores, after Kueue's
    build: python -m testbed.build kueue).

    Each (arm, seed) runs on a fresh local control plane. Runs of other (arm, seed) pairs already
    in --out are kept when the trace is the same, so an arm can be added or re-run alone. Writes
    placement.json, placement-runs.json.gz, the tables into placement.md and placement-ARM.png;
    --report-only recomputes the metrics from the raw runs first.
    """
    if report_only:
        raise typer.Exit(study.report_only(out))
    raise typer.Exit(
        study.run(
            _arms(arm_names, arms.ARMS),
            _seeds(seeds),
            spec=trace.TraceSpec(jobs=jobs, mean_interarrival_s=interarrival),
            drain_s=drain,
            timeout_min=timeout,
            out=out,
            work=work,
            quick=quick,
            fresh=fresh,
        )
    )


@app.command(
    name="placement-topology", short_help="The placement study on a cluster with network blocks."
)
def placement_topology(
    arm_names: Annotated[
        str,
        typer.Option(
            "--arms", metavar="ARM,…", help=f"Comma-separated, of {', '.join(topology.ARMS)}."
        ),
    ] = ",".join(topology.DEFAULT_ARMS),
    seeds: SeedsOption = SEEDS,
    jobs: JobsOption = trace.TraceSpec.jobs,
    drain: Annotated[
        float,
        typer.Option("--drain", metavar="S", help="Real seconds after the last submission."),
    ] = runner.DRAIN_S,
    out: OutOption = DOCS,
    work: StudyWorkOption = None,
    fresh: FreshOption = False,
    report_only: ReportOnlyOption = False,
    repeat: Annotated[
        int,
        typer.Option(
            "--repeat",
            metavar="K",
            min=0,
            help="Write these runs as the K-th repeat of each arm and seed, beside the runs "
            "already there (0: the first run); the goal is judged on each seed's mean.",
        ),
    ] = 0,
) -> None:
    """The placement study's trace on 2 zones × 4 blocks × 4 8-GPU nodes labelled with EKS's
    network layers: podium's hold with and without topology-levels, Kueue TAS and
    kube-scheduler's PodGroup topology placement; how many blocks and nodes each gang spans and
    what that costs its all-reduce (~3 minutes per arm and seed). Writes
    placement-topology.json, placement-topology-runs.json.gz and its tables into placement.md."""
    if report_only:
        raise typer.Exit(topostudy.report_only(out))
    raise typer.Exit(
        topostudy.run(
            _arms(arm_names, topology.ARMS),
            _seeds(seeds),
            jobs=jobs,
            drain_s=drain,
            timeout_min=runner.TIMEOUT_SIM_MINUTES,
            out=out,
            work=work,
            fresh=fresh,
            repeat=repeat,
        )
    )


@app.command(short_help="The apiserver's webhook latency: podium (hold, pin) and a no-op.")
def burst(
    gangs: Annotated[
        int, typer.Option("--gangs", metavar="N", help="PyTorchJobs in each burst.")
    ] = latency.GANGS,
    pods: Annotated[int, typer.Option("--pods", metavar="N", help="Pods per job.")] = latency.PODS,
    threads: Annotated[
        int, typer.Option("--threads", metavar="N", help="Client threads creating the pods.")
    ] = latency.THREADS,
    out: OutOption = DOCS,
    work: Annotated[
        Path | None,
        typer.Option("--work", metavar="DIR", help="Keep the cluster's files here."),
    ] = None,
    report_only: ReportOnlyOption = False,
) -> None:
    """A burst of pod creations (125 jobs × 8 pods by default) on the local control plane with
    a no-op webhook (allowed, no patch: the floor), then podium in zone-chooser: hold, then in
    pin mode, each registered the same way; reads the apiserver's own admission-duration
    histogram for the webhook and the writes each burst caused (~7 minutes on 2 cores). Writes
    latency.json and the tables into latency.md in --out."""
    if report_only:
        raise typer.Exit(latency.report_only(out))
    spec = latency.Spec(gangs=gangs, pods=pods, threads=threads)
    raise typer.Exit(latency.study(out, work, spec))


@app.command(
    name="hold-order", short_help="Gang waits by size, with and without the head reservation."
)
def hold_order(
    out: OutOption = DOCS,
    hours: Annotated[
        float, typer.Option("--hours", help="Simulated hours per trace.", min=1)
    ] = 12.0,
    seed: Annotated[int, typer.Option("--seed", help="The mixed trace's seed.")] = 1,
) -> None:
    """How long held gangs of each size wait (zone-chooser: hold), with the releaser's head
    reservation and without it: a deterministic simulation of release.plan on a simulated clock
    (bench/holdorder.py; seconds of CPU, no cluster). Writes hold-order.json (the raw rows) and
    hold-order.md (the table), and prints the table."""
    result = holdorder.study(horizon_s=int(hours * 3600), seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "hold-order.json").write_text(json.dumps(result, indent=1) + "\n")
    text = holdorder.markdown(result)
    (out / "hold-order.md").write_text(text)
    typer.echo(text)


def main() -> None:
    app(prog_name="python -m bench")
