"""``make demo`` end to end: scripts/demo.py runs the real training-operator, mpi-operator and
JobSet beside podium, submits examples/jobs/*.yaml, and every pod the operators create is pinned.

The demo runs as a user runs it (a subprocess of this Python, its own control plane and work dir);
its ``--json-summary`` is what its tables show. Opt-in like the other real-operator tests:
``PODIUM_E2E_OPERATORS=all`` (``make test`` sets it) or a list naming the three.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from testbed.operators import build

from .conftest import controlplane_or_skip
from .operators.conftest import needs

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
OPERATORS = ("trainingoperator", "mpioperator", "jobset")
#: Reasons that mean podium pinned the pod to a zone its whole gang fits in.
PINNED_REASONS = frozenset(
    {"best-fit", "most-free", "recorded", "members-placed", "coordinator-placed"}
)
#: job -> (kind, pods, zone): what examples/jobs/*.yaml say about themselves on the demo's
#: 8/16/64-GPU zones (each gang in the tightest zone it fits).
EXPECTED = {
    "llama-ft": ("PyTorchJob", 4, "zone-c"),
    "bert-hvd": ("MPIJob", 3, "zone-b"),
    "mnist-tj": ("JobSet", 2, "zone-a"),
}
#: The demo itself; any wait for another mpi-operator on this machine (port 8080, up to
#: 10 minutes) comes on top.
TIMEOUT = 1200


@needs(*OPERATORS)
def test_demo_pins_every_pod_the_real_operators_create(tmp_path: Path) -> None:
    controlplane_or_skip()  # skips without Go, as every e2e test does
    # Cold builds take long: done before the demo's clock starts.
    versions = {name: build(name).version for name in OPERATORS}
    summary_file = tmp_path / "summary.json"
    command = [sys.executable, "-m", "scripts.demo", "--workdir", str(tmp_path / "demo")]
    command += ["--json-summary", str(summary_file)]
    with subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        try:
            output, _ = process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)  # the demo stops podium, operators, cluster
            try:
                output, _ = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
            pytest.fail(f"scripts/demo.py did not finish in {TIMEOUT} s:\n{output}")
    print(output)
    assert process.returncode == 0, output
    assert not (tmp_path / "demo").exists()  # no CA key or admin kubeconfig left behind
    assert "Where every pod landed" in output
    assert "Every pod of the 3 jobs is pinned to its job's zone" in output

    summary = json.loads(summary_file.read_text())
    assert summary["ok"] is True, summary["problems"]
    assert summary["problems"] == []
    assert {o["version"] for o in summary["operators"].values()} == set(versions.values())

    pods = defaultdict(list)
    for row in summary["pods"]:
        pods[row["job"]].append(row)
        assert row["zone"], row
        assert row["reason"] in PINNED_REASONS, row
        assert row["node"], row  # every pod was bound (some may be deleted since)
        assert row["node_zone"] == row["zone"], row
        assert row["pod"] in output and row["reason"] in output
    assert sorted(pods) == sorted(EXPECTED)
    for job, (_, count, zone) in EXPECTED.items():
        assert len(pods[job]) == count, pods[job]
        assert {row["zone"] for row in pods[job]} == {zone}, pods[job]

    # One gang per job in the audit trail, all its admissions pinned to that zone.
    gangs = {g["job"]["name"]: g for g in summary["jobs"]}
    assert len(gangs) == len(summary["jobs"]) == len(EXPECTED)
    for job, (kind, count, zone) in EXPECTED.items():
        gang = gangs[job]
        assert gang["job"]["kind"] == kind
        assert gang["verdict"] == "ok", gang
        assert list(gang["zones"]) == [zone], gang
        # The default, zone-chooser: hold: admitted held, then released whole by the releaser
        # (a pod created after the release, such as an MPIJob's launcher, follows: pinned).
        assert {"held", "released"} <= set(gang["outcomes"]) <= {"held", "released", "pinned"}
        assert summary["releases"][job].startswith(f"{job}: "), summary["releases"]
        assert f"released into {zone}" in summary["releases"][job]
        assert summary["releases"][job] in output
        assert gang["admissions"] >= count, gang
    # One policy per job, owned by it.
    assert sorted(p["owner"] for p in summary["policies"]) == sorted(
        f"{kind}/{job}" for job, (kind, _, _) in EXPECTED.items()
    )
