"""The throughput study: podium's server against the bare-ASGI limit and kopf under ``wrk``, and
its cluster view against cluster size (``python -m bench``; docs/benchmarks/README.md).

* `workload` — synthetic clusters and AdmissionReviews; `servers` — the three servers under load,
  each in its own process; ``load.lua`` — what ``wrk`` sends;
* `scale` — the view's memory, cold sync and decision time at 10 to 5,000 nodes;
* `study` — the load phases, the breakdown and the scale phases of one run; `report` — its tables,
  targets and plots.
"""
