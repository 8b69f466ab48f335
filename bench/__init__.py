"""podium's benchmarks: ``python -m bench`` (see docs/benchmarks/README.md)."""
