"""What every ``podium`` command shares: --version, -h, flags shown as flags, one error format
and exit code 2 when it cannot run, help without the package's own module names."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from webhook.ops.cli import app

runner = CliRunner()

COMMANDS = [
    ["review"],
    ["audit"],
    ["serve"],
    ["snapshot"],
    ["doctor"],
    ["certs"],
    ["certs", "issue"],
    ["certs", "rotate"],
    ["certs", "show"],
    ["certs", "secret"],
    ["certs", "inject"],
]


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (
        0,
        f"podium {importlib.metadata.version('podium')}\n",
    )


def test_top_level_help_documents_the_exit_codes() -> None:
    text = " ".join(runner.invoke(app, ["-h"]).stdout.split())
    assert "0 ok; 1 it ran and found something wrong" in text
    assert "2 it could not run" in text and '"Error:" line on stderr' in text


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "-h"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "<bool>" not in text and "/ --no-" not in text  # a flag is shown as a flag
    # an argument is shown as in the usage line, not with typer's type label
    assert not re.search(r"<(list\[\w+\]|path|str)>", text), text
    assert not re.search(r"\bwebhook\.|ClusterView|kubeapi|kubeops", text), text
    assert "Usage: podium " in text


def test_audit_help_names_its_files_as_the_usage_line_does() -> None:
    text = runner.invoke(app, ["audit", "-h"], env={"COLUMNS": "100"}).stdout
    assert "Usage: podium audit [OPTIONS] [FILE]..." in text
    assert "\n  [FILE]...  Log files of podium" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "No such command 'nope'"),
        (["audit", "--outcome", "x"], "'x' is not one of"),
        (["doctor", "-o", "xml"], "'xml' is not one of 'table', 'wide', 'json', 'yaml'"),
        (["review", "pod.yaml"], "Missing option '--cluster'"),
        (["serve"], "--cert-file and --key-file are required"),
        (["serve", "--certs", "files"], "or --certs self"),
        (["serve", "--certs", "self", "--cert-file", "c.pem"], "drop --cert-file/--key-file"),
        (["serve", "--certs", "self", "--san", "*.podium"], "--san: '*.podium' is neither"),
        (["serve", "--certs", "self", "--certs-interval", "0"], "--certs-interval"),
        (["serve", "--no-tls", "--config", "/nonexistent.yaml"], "cannot read settings file"),
    ],
)
def test_cannot_run_is_exit_2_and_an_error_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, args, input="")
    assert result.exit_code == 2, result.output
    assert "Error: " in result.stderr and message in result.stderr
    assert "Traceback" not in result.output and "╭" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--no-tls"],
        ["serve", "--certs", "self"],
        ["snapshot"],
        ["doctor"],
        ["release", "pytorchjob/ft"],
        ["certs", "show", "--cluster"],
        ["certs", "rotate"],
        ["certs", "inject"],
    ],
    ids=" ".join,
)
def test_a_missing_kubeconfig_is_named_as_not_found(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command that takes --kubeconfig says the file is not there, not that it is invalid."""
    from webhook import certs  # noqa: PLC0415

    certs.issue(tmp_path / "certs", service="podium", namespace="podium-system")
    monkeypatch.chdir(tmp_path)  # certs commands read ./certs
    missing = tmp_path / "nonexist"
    result = runner.invoke(app, [*args, "--kubeconfig", str(missing)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: kubeconfig {missing} not found"), line
