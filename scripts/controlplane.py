"""Run podium's local e2e control plane by hand (see docs/e2e.md).

    python scripts/controlplane.py up [--keep] [--workdir DIR]

Builds the binaries if needed (tests/e2e/controlplane/build.sh, or $PODIUM_CONTROLPLANE_BIN),
starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1 with
kwok nodes in zone-a/zone-b/zone-c and the shared CRDs, and prints the kubeconfig path. With
--keep it runs until Ctrl-C; without, it tears the cluster down right away (a smoke test).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.e2e.cluster import ZONES, LocalCluster, crd_files  # noqa: E402


def bin_dir() -> Path:
    if from_env := os.environ.get("PODIUM_CONTROLPLANE_BIN"):
        return Path(from_env)
    build = REPO_ROOT / "tests" / "e2e" / "controlplane" / "build.sh"
    result = subprocess.run(["bash", str(build)], stdout=subprocess.PIPE, text=True, check=True)
    return Path(result.stdout.strip().splitlines()[-1])


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def up(*, keep: bool, workdir: Path | None) -> None:
    binaries = bin_dir()
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
