"""Real training operators built from the Go module proxy and run beside the local control
plane (docs/operators.md): build.sh, runner.py (processes), frameworks.py (their examples),
observe.py and capture.py (golden files in tests/fixtures/operators/)."""
