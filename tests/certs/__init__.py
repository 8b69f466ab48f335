"""Tests for ``webhook.certs``, one module per module, and for what uses it on the commands'
floor: ``podium certs`` (``webhook.ops.certs_cli``) and its cluster calls
(``webhook.ops.certs_cluster``)."""
