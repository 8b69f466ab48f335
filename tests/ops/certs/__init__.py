"""Tests for ``webhook.ops.certs``, one module per module, and for ``podium certs``."""
