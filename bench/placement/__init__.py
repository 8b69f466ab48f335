"""The placement study: what each way of placing a training job's pods does to a real scheduler
under a seeded job trace (``python -m bench placement``; docs/benchmarks/placement.md).

* `trace` — the seeded job trace and the cluster's zones; `arms` — the ways of placing (the
  default scheduler, self-affinity, podium, the scheduler's gang placement, …);
* `runner` — one (arm, seed) on a fresh local control plane, recorded pod by pod;
* `analysis` — the metrics and timelines computed from a run's raw record;
* `study` — every asked-for run, merged with the earlier ones, saved; `report` — its tables and
  plots.
"""
