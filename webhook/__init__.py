"""podium: keep every pod of a distributed training job in one zone, and let only its own pods talk.

Layers, from the inside out (each imports only the ones above it):

* ``labels``, ``settings``, ``resources``, ``selectors`` — vocabulary and small pure helpers;
* ``snapshot`` — a point-in-time view of the cluster that decisions read;
* ``adapters`` — one module per job framework: "which gang is this pod in";
* ``zones``, ``mutation``, ``policies``, ``reviews``, ``engine`` — the pure decision;
* ``effects``, ``kubeapi``, ``cache``, ``audit``, ``admission``, ``server``, ``cli`` — the I/O
  at the edges.
"""

__version__ = "0.1.0"
