"""``make demo`` (scripts/demo.py): its tables say things in words, not as Python values, and it
removes its work directory (CA key, admin kubeconfig) unless ``--keep``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scripts import demo


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
