"""podium's modules the verdict matrix drives, on either package layout.

The webhook package is being reorganised (``webhook.policies`` → ``webhook.core.policies``, ...):
import from here, not from ``webhook`` directly.
"""

from __future__ import annotations

try:
    from webhook.core import engine, labels, policies, reviews, settings
    from webhook.core.view import ClusterView
except ImportError:  # the flat layout before webhook.core
    from webhook.snapshot import ClusterView  # type: ignore[no-redef]

    from webhook import engine, labels, policies, reviews, settings  # type: ignore[no-redef]

__all__ = ["ClusterView", "engine", "labels", "policies", "reviews", "settings"]
