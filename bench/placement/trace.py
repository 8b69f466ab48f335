"""The seeded job trace every arm replays: Poisson arrivals, gang sizes, GPUs per pod, durations.

Pure: the same seed gives the same trace, byte for byte, whatever arm replays it. Times are in
*real* seconds of the run; `SIM_MINUTES_PER_SECOND` says how many simulated minutes one of them
stands for (the same compression for every arm).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Time compression: one real second of the run is this many simulated minutes.
SIM_MINUTES_PER_SECOND = 1.0

#: The study's cluster: zone -> number of 8-GPU nodes (200 GPUs, unequal zones).
ZONE_NODES: Mapping[str, int] = {"zone-a": 12, "zone-b": 8, "zone-c": 5}
GPUS_PER_NODE = 8


def zones() -> dict[str, list[int]]:
    """``LocalCluster.create_fake_nodes`` input for `ZONE_NODES`."""
    return {zone: [GPUS_PER_NODE] * n for zone, n in ZONE_NODES.items()}


def capacity() -> int:
    return GPUS_PER_NODE * sum(ZONE_NODES.values())


def largest_zone() -> int:
    return GPUS_PER_NODE * max(ZONE_NODES.values())


@dataclass(frozen=True)
class TraceSpec:
    """What a trace is drawn from. Gang sizes and GPUs per pod are weighted choices; a job whose
    demand exceeds the largest zone is drawn again (it could not run in one zone in any arm)."""

    jobs: int = 150
    #: Mean time between two submissions, real seconds (Poisson arrivals).
    mean_interarrival_s: float = 0.7
    pods: Mapping[int, float] = dataclasses.field(
        default_factory=lambda: {2: 0.30, 4: 0.25, 8: 0.20, 16: 0.15, 32: 0.10}
    )
    gpus_per_pod: Mapping[int, float] = dataclasses.field(
        default_factory=lambda: {1: 0.15, 2: 0.20, 4: 0.30, 8: 0.35}
    )
    #: Job run time once the whole gang is running, simulated minutes (uniform).
    duration_min: tuple[float, float] = (3.0, 11.0)
    max_gpus: int = dataclasses.field(default_factory=largest_zone)


@dataclass(frozen=True)
class TraceJob:
    index: int
    name: str
    #: Submission time, real seconds after the run starts.
    arrival_s: float
    pods: int
    gpus_per_pod: int
    #: How long the job runs once its whole gang is running, real seconds.
    duration_s: float

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


def _choice(rng: random.Random, weights: Mapping[int, float]) -> int:
    keys = sorted(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def generate(seed: int, spec: TraceSpec | None = None) -> list[TraceJob]:
    """The trace for ``seed``: `TraceSpec.jobs` jobs in arrival order."""
    spec = spec or TraceSpec()
    rng = random.Random(seed)
    jobs: list[TraceJob] = []
    t = 0.0
    for index in range(spec.jobs):
        t += rng.expovariate(1.0 / spec.mean_interarrival_s)
        while True:
            pods, gpus = _choice(rng, spec.pods), _choice(rng, spec.gpus_per_pod)
            if pods * gpus <= spec.max_gpus:
                break
        minutes = rng.uniform(*spec.duration_min)
        jobs.append(
            TraceJob(
                index=index,
                name=f"job-{index:03d}",
                arrival_s=round(t, 3),
                pods=pods,
                gpus_per_pod=gpus,
                duration_s=round(minutes / SIM_MINUTES_PER_SECOND, 3),
            )
        )
    return jobs


def offered_load(jobs: Sequence[TraceJob]) -> float:
    """GPU-seconds the trace asks for over its arrival window, as a fraction of the cluster's."""
    if not jobs:
        return 0.0
    window = jobs[-1].arrival_s
    return sum(j.gpus * j.duration_s for j in jobs) / (capacity() * window)
