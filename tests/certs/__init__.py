"""Tests for ``webhook.certs``, one module per module, and for ``podium certs``."""
