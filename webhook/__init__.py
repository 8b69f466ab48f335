"""podium: keep every pod of a distributed training job in one zone, and let only its own pods talk.

Four floors, each importing only the ones below it (``[tool.importlinter]`` in pyproject.toml):

* ``webhook.core`` — the decision, pure: adapters (one per framework), zones, mutation, policies,
  the cluster view; no Kubernetes client, web framework or terminal UI;
* ``webhook.kube`` — the Kubernetes edge: client, errors, watch cache, leader election, twins;
* ``webhook.serve`` — the running webhook: server, admission, effects, audit, events, metrics,
  reconciler, TLS;
* ``webhook.ops`` — the commands people run: cli, offline review, audit viewer, doctor, certs.

Beside them, ``webhook.certs`` — issuing and rotating the serving certificates — imports none of
the four (nor any Kubernetes client, web framework or terminal UI).
"""

__version__ = "0.1.0"
