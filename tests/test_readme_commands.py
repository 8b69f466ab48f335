"""README.md: the Quick start a newcomer reads in a minute, and commands that run as written.

Every ``podium …`` command in the README — in a code block, or in inline code — is parsed by the
real CLI (typer's click: the command, its subcommand, every option and argument, their types),
without running it. The Quick start stays short and names the three make targets, which exist.
The ``kubectl logs`` lines piped into podium read every replica's whole log.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from webhook.ops.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Shell words after which a new command starts.
SEPARATORS = re.compile(r"\|\||&&|\||;|\$\(|\)")
#: Quick start, heading included: what podium does in three sentences and three make targets.
QUICK_START_LINES = 15


def code_spans(text: str) -> list[str]:
    """The lines of the code blocks (a line ending in a backslash joined to the next), and the
    inline code spans outside them."""
    spans: list[str] = []
    in_block = False
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            spans.append(line)
        else:
            spans.extend(re.findall(r"`([^`]+)`", line))
    return spans


def commands(text: str) -> list[list[str]]:
    """Every ``podium …`` (or ``kubectl podium …``) command in ``text``, as its arguments."""
    found = []
    for span in code_spans(text):
        code = re.sub(r"(^|\s)#.*$", "", span)  # a shell comment
        for part in SEPARATORS.split(code):
            if not re.match(r"(kubectl )?podium( |$)", part.strip()):
                continue
            words = shlex.split(part.strip())
            if words[:2] == ["kubectl", "podium"]:
                words = words[1:]
            if words == ["podium"] or "…" in part:  # the program's name, or a synopsis
                continue
            args = words[1:]
            for redirect in (">", "<", "2>"):
                if redirect in args:
                    args = args[: args.index(redirect)]
            found.append(args)
    return found


def parse(args: list[str]) -> Any:
    """Parse ``podium ARGS`` as the CLI would, down to the last subcommand; run nothing."""
    command: Any = typer.main.get_command(app)
    context = command.make_context("podium", list(args))
    while hasattr(command, "resolve_command"):  # a group: podium, podium certs
        rest = [*context._protected_args, *context.args]
        if not rest:
            break
        name, command, rest = command.resolve_command(context, rest)
        context = command.make_context(name, rest, parent=context)
    return context


README_COMMANDS = commands(README.read_text())


def test_the_readme_has_podium_commands() -> None:
    subcommands = {args[0] for args in README_COMMANDS if args and not args[0].startswith("-")}
    assert {"review", "audit", "doctor", "report", "snapshot", "release", "certs"} <= subcommands


@pytest.mark.parametrize("args", README_COMMANDS, ids=[" ".join(a) for a in README_COMMANDS])
def test_every_podium_command_in_the_readme_parses(args: list[str]) -> None:
    context = parse(args)
    assert context.command is not None


@pytest.mark.parametrize(
    "args",
    [["review", "pod.yaml"], ["audit", "--since"], ["doctor", "--bogus"], ["certs", "nope"]],
    ids=["missing-option", "missing-value", "unknown-option", "unknown-subcommand"],
)
def test_a_command_that_would_not_run_does_not_parse(args: list[str]) -> None:
    """The check above can fail: what the CLI refuses, `parse` refuses too."""
    with pytest.raises(Exception, match=r"Missing|requires an argument|No such"):
        parse(args)


def test_commands_are_found_in_blocks_pipes_and_inline_code() -> None:
    text = (
        "Run `podium doctor -n a` or `podium.dev/enabled`.\n"
        "```sh\n"
        "kubectl logs -l x | podium audit --since 1h   # a comment\n"
        "kubectl podium -n ml doctor \\\n  --context c\n"
        "podium snapshot > cluster.json && podium review pod.yaml --cluster cluster.json\n"
        "```\n"
    )
    assert commands(text) == [
        ["doctor", "-n", "a"],
        ["audit", "--since", "1h"],
        ["-n", "ml", "doctor", "--context", "c"],
        ["snapshot"],
        ["review", "pod.yaml", "--cluster", "cluster.json"],
    ]


def quick_start() -> list[str]:
    lines = README.read_text().splitlines()
    start = lines.index("## Quick start")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    return lines[start:end]


def test_the_quick_start_is_short_and_names_the_three_targets() -> None:
    section = quick_start()
    while section and not section[-1].strip():
        section.pop()
    assert len(section) <= QUICK_START_LINES, "\n".join(section)
    text = "\n".join(section)
    for target in ("demo", "test", "demo-offline"):
        assert re.search(rf"^make {target}\b", text, flags=re.MULTILINE), target
        assert re.search(rf"^{target}:", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    # Three sentences say what podium does, before the commands.
    prose = text.split("```")[0].removeprefix("## Quick start").strip()
    assert len(re.findall(r"[.!?](\s|$)", prose)) == 3, prose


def test_make_test_is_what_ci_runs() -> None:
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), flags=re.MULTILINE)


def kubectl_logs_lines(text: str) -> list[str]:
    return [
        span
        for span in code_spans(text)
        if re.search(r"kubectl .*logs .*\| *podium", span) and "deploy/" not in span
    ]


@pytest.mark.parametrize("doc", ["README.md", "docs/commands.md"])
def test_logs_piped_into_podium_are_read_whole_from_every_replica(doc: str) -> None:
    """``kubectl logs -l …`` sends 10 lines per pod unless ``--tail=-1``; ``deploy/podium`` reads
    one replica of several."""
    text = (ROOT / doc).read_text()
    lines = kubectl_logs_lines(text)
    assert lines
    for line in lines:
        assert "--tail=-1" in line, line
    assert not re.search(r"logs[^`|]*deploy/podium[^`]*\| *podium", text)


def test_the_audit_help_and_hint_ask_for_every_line() -> None:
    runner = CliRunner()
    help_text = runner.invoke(app, ["audit", "--help"], env={"COLUMNS": "200"}).stdout
    assert "--tail=-1" in " ".join(help_text.split())
    result = runner.invoke(app, ["audit"], input="not an audit line\n")
    assert result.exit_code == 2 and "--tail=-1" in result.stderr
