"""Run podium's local e2e control plane by hand (see docs/e2e.md).

    python -m scripts.controlplane up [--keep] [--workdir DIR]      (from the repository root)

Builds the binaries if needed (`testbed.build`, or $PODIUM_CONTROLPLANE_BIN),
starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1 with
kwok nodes in zone-a/zone-b/zone-c and the upstream CRDs (testbed/crds), and prints the
kubeconfig path. With --keep it runs until Ctrl-C; without, it tears the cluster down right away
(a smoke test).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

from testbed.build import controlplane_bin_dir
from testbed.controlplane import ZONES, LocalCluster, crd_files


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def up(*, keep: bool, workdir: Path | None) -> None:
    binaries = controlplane_bin_dir()
    work = workdir or Path(tempfile.mkdtemp(prefix="podium-controlplane-"))
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    with LocalCluster(binaries, work) as cluster:
        nodes = cluster.create_fake_nodes(ZONES)
        crds = cluster.install_crds(crd_files())
        print(f"server:    {cluster.server}")
        print(f"nodes:     {len(nodes)} kwok nodes in {', '.join(ZONES)}; {len(crds)} CRDs")
        print(f"audit log: {cluster.audit_log}")
        print(f"logs:      {cluster.logs_dir}")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print(cluster.kubeconfig, flush=True)
        if keep:
            print("running; Ctrl-C to stop", file=sys.stderr, flush=True)
            try:
                signal.pause()
            except KeyboardInterrupt:
                print("stopping", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start the control plane")
    start.add_argument("--keep", action="store_true", help="keep running until Ctrl-C")
    start.add_argument("--workdir", type=Path, help="work dir (default: a new temp dir)")
    args = parser.parse_args(argv)
    if args.command == "up":
        up(keep=args.keep, workdir=args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
