"""``make demo`` (scripts/demo.py): its tables say things in words, not as Python values, and it
removes its work directory (CA key, admin kubeconfig) unless ``--keep``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from scripts import demo
from testbed import processes


@pytest.mark.parametrize(
    ("spec", "cell"),
    [
        ({"enableDefaultDeny": {"ingress": False, "egress": False}}, "off"),  # podium's own
        ({"enableDefaultDeny": {"ingress": True, "egress": True}}, "on"),
        ({"enableDefaultDeny": {"ingress": True, "egress": False}}, "ingress on, egress off"),
        ({"enableDefaultDeny": {"egress": False}}, "ingress default, egress off"),
        ({}, "Cilium's default"),
    ],
)
def test_the_policy_tables_default_deny_column_is_words(spec: dict[str, Any], cell: str) -> None:
    assert demo.default_deny(spec) == cell


def demo_files(work: Path) -> None:
    """What a demo run leaves in its work directory: the CA key, an admin kubeconfig, ..."""
    for path in ("cluster/pki/ca.key", "cluster/admin.kubeconfig", "operators/x.log", "podium/t"):
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text("secret")


def test_the_demo_removes_its_work_directory(tmp_path: Path) -> None:
    work = tmp_path / "podium-demo-x"
    demo_files(work)
    demo.clean_up(work)
    assert not work.exists()


def test_a_workdir_of_the_users_keeps_what_the_demo_did_not_write(tmp_path: Path) -> None:
    demo_files(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    demo.clean_up(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(("keep", "left"), [(False, False), (True, True)])
def test_main_cleans_up_unless_keep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: bool, left: bool
) -> None:
    """Whatever the run ends with (here: it fails), the work directory goes unless --keep."""
    work = tmp_path / "demo"

    def failing_run(_args: object, _bin: Path, workdir: Path) -> int:
        demo_files(workdir)
        raise RuntimeError("the cluster did not start")

    monkeypatch.setattr(demo.signal, "signal", lambda *_: None)  # not this process's SIGTERM
    monkeypatch.setattr(demo, "build_controlplane", lambda: tmp_path / "bin")
    monkeypatch.setattr(demo, "run", failing_run)
    argv = ["demo", "--workdir", str(work), *(["--keep"] if keep else [])]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(RuntimeError):
        demo.main()
    assert (work / "cluster" / "pki" / "ca.key").exists() is left


# -- a kept demo --------------------------------------------------------------------------------

#: A kept demo's wait, as a process of its own: started with SIGINT ignored, as a shell starts a
#: background job (`make demo DEMO_ARGS=--keep &`), with a stand-in podium that says what it did.
KEPT_DEMO = """
import sys, time
from scripts import demo

class Podium:
    token_minted, token_seconds, process = None, 3600, None
    def stop(self): print("podium stopped", flush=True)
    def renew_token(self): print("token renewed", flush=True)
    def start(self): print("podium started", flush=True)
    url = log_file = "-"

demo.install_signals()
try:
    print("waiting", flush=True)
    demo.wait_kept(Podium(), poll=0.05)
except KeyboardInterrupt:
    print("stopped", flush=True)
"""


def _kept_demo() -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", KEPT_DEMO, "scripts.demo"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # noqa: PLW1509
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "waiting\n"
    return process


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_a_kept_demo_in_the_background_stops_on_sigint_and_sigterm(signum: int) -> None:
    process = _kept_demo()
    process.send_signal(signum)
    out, _ = process.communicate(timeout=30)
    assert (process.returncode, out.splitlines()[-1:]) == (0, ["stopped"]), out


def test_a_kept_demo_restarts_podium_with_a_new_token_on_sigusr1() -> None:
    process = _kept_demo()
    assert process.stdout is not None
    process.send_signal(signal.SIGUSR1)
    lines = [process.stdout.readline() for _ in range(3)]
    assert lines == ["podium stopped\n", "token renewed\n", "podium started\n"]
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=30)
    assert "stopped" in out


def test_podiums_token_is_renewed_before_it_expires() -> None:
    day = 24 * 3600
    assert day <= demo.TOKEN_SECONDS  # not the tests' hour
    assert not demo.renewal_due(1000.0, day, 1000.0 + 0.79 * day)
    assert demo.renewal_due(1000.0, day, 1000.0 + 0.8 * day)
    assert not demo.renewal_due(None, day, 10 * day)  # podium as the cluster's admin


def test_demo_stop_stops_every_kept_demo_and_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "STATE_DIR", tmp_path)
    assert demo.stop_kept() == 0  # none: nothing to do
    process = _kept_demo()
    (tmp_path / f"{process.pid}.json").write_text(
        json.dumps({"pid": process.pid, "work": "/tmp/w", "kubeconfig": "k"})
    )
    (tmp_path / "1.json").write_text(json.dumps({"pid": 1, "work": "-", "kubeconfig": "-"}))
    stopper = threading.Thread(target=demo.stop_kept, kwargs={"timeout": 30})
    stopper.start()
    out, _ = process.communicate(timeout=30)  # reaps it, so that stop_kept sees it gone
    stopper.join(timeout=30)
    assert not stopper.is_alive() and "stopped" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{process.pid}.json"]  # pid 1: not ours
    assert demo.signal_kept(signal.SIGUSR1, "asked") == 1  # it is gone now
    assert list(tmp_path.iterdir()) == []


def test_a_lock_a_kept_demo_holds_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test run beside a kept demo does not wait ten minutes for mpi-operator's port: it is
    told at once who holds it and how to end that."""
    monkeypatch.setattr(processes, "lock_path", lambda name: tmp_path / f"{name}.lock")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from testbed import processes\n"
            f"processes.lock_path = lambda name: __import__('pathlib').Path({str(tmp_path)!r}) "
            "/ f'{name}.lock'\n"
            "with processes.machine_lock('x', timeout=5):\n"
            "    processes.describe_holder('x', processes.KEPT + 'a kept podium demo (pid 7)')\n"
            "    print('held', flush=True)\n"
            "    sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == "held\n"
    try:
        with (
            pytest.raises(TimeoutError, match=r"held by a kept podium demo \(pid 7\)$"),
            processes.machine_lock("x", timeout=600),
        ):
            pass
    finally:
        holder.communicate("\n", timeout=30)
    with processes.machine_lock("x", timeout=5):  # free again: taken at once
        assert processes.lock_holder("x").startswith(f"pid {os.getpid()} ")
    assert processes.lock_holder("x") == ""  # released: nobody is named
