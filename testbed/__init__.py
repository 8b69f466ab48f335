"""The test bed: the real world podium is proven against, as one package.

A real control plane on 127.0.0.1 (kube-apiserver, kube-scheduler, kube-controller-manager, etcd
and KWOK playing fake GPU nodes), seven real training operators, helm and two builds of Cilium's
policy engine — all built from the Go module proxy — and podium itself run as a user runs it.
The e2e tests, ``scripts/demo.py``, ``scripts/controlplane.py`` and the placement study in
``bench/`` share it. It is not part of podium's wheel.

Parts:

* `testbed.paths` — the repository, the build cache, the upstream CRDs (``testbed/crds``).
* `testbed.build` — one builder for every Go-built component (``python -m testbed.build``),
  pinned by the wrapper modules under ``testbed/modules/``.
* `testbed.processes` — child processes: free ports, dying with the parent, start/stop/log tail.
* `testbed.controlplane` — `LocalCluster`: flags, certificates, the apiserver client, objects.
* `testbed.operators` — the real operators as processes beside a cluster (one module per family),
  their upstream examples (``frameworks``) and the golden-file tool (``capture``).
* `testbed.podium` — ``podium serve`` as a real process, registered with the shipped webhook.
* `testbed.observe` — what the operators made of a submitted job, from watches and the audit log.
* `testbed.faultproxy` — a TCP forwarder that stalls or refuses, between a client and the
  apiserver.
"""
