"""CPU per later-pod admission, in process, of several commits side by side:

    python -m bench.throughput.compare b1da935 02eadbb HEAD WORKTREE HEAD:hold

Each commit is extracted (``git archive``) into a scratch directory; ``WORKTREE`` is this
checkout as it is; ``:MODE`` sets ``zone-chooser``. One worker process per entry
(`compare_worker`, run inside that tree, with this interpreter) builds the throughput study's
podium admitter over a 1,000-node view; then rounds of N admissions go to each worker in turn,
so that load from other processes falls on every entry alike. Prints the least and the median
CPU µs per admission of each and its ratio to the first. No server, no TLS: the admission only.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("compare_worker.py")


def _has(rev: str, path: str) -> bool:
    found = subprocess.run(["git", "cat-file", "-e", f"{rev}:{path}"], cwd=ROOT, check=False)
    return found.returncode == 0


def _tree(rev: str, scratch: Path) -> Path:
    if rev == "WORKTREE":
        return ROOT
    tree = scratch / rev.replace("/", "_")
    if not tree.exists():
        tree.mkdir()
        # The benchmark imports the test bed (its free_port) since it has one.
        paths = [p for p in ("webhook", "bench", "testbed") if _has(rev, p)]
        archive = subprocess.run(
            ["git", "archive", rev, *paths], cwd=ROOT, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def main(
    entries: Annotated[list[str], typer.Argument(metavar="REV[:MODE]...")],
    rounds: Annotated[int, typer.Option("--rounds", metavar="N")] = 10,
    admissions: Annotated[int, typer.Option("--admissions", metavar="N")] = 1000,
    nodes: Annotated[int, typer.Option("--nodes", metavar="N")] = 1000,
) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="podium-compare-"))
    try:
        workers: dict[str, subprocess.Popen[str]] = {}
        for entry in entries:
            rev, _, mode = entry.partition(":")
            tree = _tree(rev, scratch)
            bodies = scratch / f"bodies-{len(workers)}"
            bodies.mkdir()
            workers[entry] = subprocess.Popen(
                [sys.executable, str(WORKER), str(nodes), mode, str(bodies)],
                cwd=tree,
                env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        for entry, proc in workers.items():
            assert proc.stdout is not None
            print(entry, proc.stdout.readline().strip(), flush=True)
        cpu: dict[str, list[float]] = {entry: [] for entry in entries}
        for _ in range(rounds):
            for entry, proc in workers.items():
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{admissions}\n")
                proc.stdin.flush()
                cpu[entry].append(float(proc.stdout.readline()))
        for proc in workers.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
        first = min(cpu[entries[0]])
        for entry in entries:
            least, median = min(cpu[entry]), statistics.median(cpu[entry])
            print(
                f"{entry:20s} least {least:6.1f} µs  median {median:6.1f} µs  {least / first:.2f}×"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    typer.run(main)
