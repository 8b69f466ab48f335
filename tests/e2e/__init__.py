"""End-to-end tests against a real control plane (see docs/e2e.md)."""
