"""Real training operators built from the Go module proxy and run beside the local control
plane (docs/operators.md); the harness is `testbed.operators` (build, run, frameworks, capture)
and `testbed.observe`."""
