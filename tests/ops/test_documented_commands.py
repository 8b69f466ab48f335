"""Every ``podium …`` command the docs and the alerts tell a person to run exists (issue 29
item 5): parsed by the real CLI's click parser (``typer.main.get_command``), nothing executed.
A runbook once suggested ``podium release --zone``, an option that never existed.

Where commands are found:

* Markdown (``DOCS``): code blocks, line by line (continuation lines joined, ``#`` comments and
  what follows a pipe or ``;``/``&&``/``||`` cut off, a ``podium`` after a pipe taken too), and
  inline code spans that start with ``podium`` or ``kubectl podium`` (the kubectl plugin). A
  span with a usage synopsis (``[-n NS]``) is skipped: it is not a command line. A span that is
  only options (``--unpinned``) is taken as options of the podium command the same sentence
  named last, until a span of anything else (a path, another tool's command).
* Alert rules (``ALERTS``): prose, so from each ``podium <command>`` only the command and the
  options that follow it (with their values) are taken.

A command that leaves out a required argument is a mention (``podium release --unpinned``),
accepted; an unknown command or option, or a bad value, is not. To cover another file (the
README), add it to ``DOCS``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

# typer bundles its own click (webhook/ops/kubectl.py says so too): its errors are these.
from typer._click import exceptions as click_errors

from webhook.ops import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
    ROOT / "manifests" / "README.md",
    ROOT / "charts" / "podium" / "README.md",
    ROOT / "charts" / "podium" / "templates" / "NOTES.txt",
]
ALERTS = [
    ROOT / "charts" / "podium" / "files" / "prometheus-rules.yaml",
    ROOT / "manifests" / "components" / "monitoring" / "prometheusrule.yaml",
]

COMMAND: Any = typer.main.get_command(cli.app)
#: The CLI's commands: a word after ``podium`` that is not one of them is prose ("podium is").
NAMES = frozenset(COMMAND.commands)
assert {"doctor", "release", "certs"} <= NAMES
START = re.compile(r"(?:^|(?<=[\s|;&(]))(?:kubectl )?podium (?=(" + "|".join(NAMES) + r")\b)")
#: Where a sentence ends in Markdown prose: a blank line, a list item, a full stop before the next.
SENTENCES = re.compile(r"\n\s*\n|\n\s*(?:[*-]|\d+\.)\s|(?<=[.!?:])\s+(?=[A-Z*`(])")
#: Where a shell command's own arguments end; an ellipsis stands for more of them.
REDIRECTIONS = frozenset({">", ">>", "<", "2>", "&>", "2>&1"})
CUT = re.compile(r"\s(?:\|\|?|;|&&)\s")


def _from_line(line: str) -> Iterator[str]:
    """The podium command lines of one shell line (each part of a pipeline on its own)."""
    for part in CUT.split(line):
        match = START.match(part.strip())
        if match:
            yield part.strip()


def from_markdown(text: str) -> Iterator[str]:
    for block in re.findall(r"```[^\n]*\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            yield from _from_line(line)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for sentence in SENTENCES.split(prose):
        last = None  # the podium command this sentence last named: `--unpinned` is its option
        for span in re.findall(r"`([^`\n]+)`", sentence):
            if START.match(span) and "[" not in span:
                yield from _from_line(span)
                words = span.split()
                last = " ".join(words[: 3 if words[1] == "podium" or words[1] == "certs" else 2])
            elif span.startswith("-") and last is not None:
                yield f"{last} {span}"
            else:
                last = None  # a path, a value, another tool's command: what follows is not


def from_prose(text: str) -> Iterator[str]:
    """``podium <command>`` and the options right after it (each with its value, if it takes
    one); the rest of the sentence is not the command's."""
    for match in START.finditer(text):
        words = text[match.end() :].split()
        name, rest = words[0].strip(".,:;)"), words[1:]
        command = COMMAND.commands[name]
        taken = [name]
        if _is_group(command) and rest and rest[0] in command.commands:
            command = command.commands[rest[0]]
            taken.append(rest.pop(0))
        takes_value = False
        for word in rest:
            if takes_value:
                taken.append(word.rstrip(".,:;)"))
                takes_value = False
            elif word.startswith("-"):
                option = word.rstrip(".,:;)")
                taken.append(option)
                takes_value = _takes_value(command, option)
            else:
                break
        yield "podium " + " ".join(taken)


def _is_group(command: Any) -> bool:
    return hasattr(command, "commands")


def _takes_value(command: Any, option: str) -> bool:
    for param in command.params:
        if param.param_type_name == "option" and option.split("=", maxsplit=1)[0] in param.opts:
            return not param.is_flag and "=" not in option
    return False


def from_yaml(text: str) -> Iterator[str]:
    def strings(node: Any) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for value in node.values():
                yield from strings(value)
        elif isinstance(node, list):
            for value in node:
                yield from strings(value)

    for text_ in strings(yaml.safe_load(text)):
        yield from from_prose(text_)


def commands(path: Path) -> list[str]:
    text = path.read_text()
    found = from_yaml(text) if path.suffix == ".yaml" else from_markdown(text)
    return sorted(set(found))


def parse(line: str) -> None:
    """Parse ``line`` (``podium …`` or ``kubectl podium …``) as the CLI would, down to the
    subcommand; raises click's error when it would refuse it. Nothing runs: ``make_context``
    parses and converts, it does not invoke."""
    words = shlex.split(line, comments=True)
    words = words[words.index("podium") + 1 :]
    redirected = [i for i, w in enumerate(words) if w in REDIRECTIONS]
    words = [w for w in words[: redirected[0] if redirected else None] if w not in ("…", "...")]
    command = COMMAND
    ctx = command.make_context("podium", words, resilient_parsing=False)
    while _is_group(command):
        args = [*ctx._protected_args, *ctx.args]
        if not args:
            return
        name, found, rest = command.resolve_command(ctx, args)
        assert found is not None and name is not None
        command = found
        ctx = command.make_context(name, rest, parent=ctx)


def refusal(line: str) -> str | None:
    """Why the CLI would refuse ``line``; None when it parses (or only leaves out a required
    argument: a mention of a command, not a command line)."""
    try:
        parse(line)
    except (click_errors.MissingParameter, click_errors.NoArgsIsHelpError):
        return None  # `podium certs`: a group named, `podium release --unpinned`: no KIND/NAME
    except click_errors.BadOptionUsage as err:
        last = shlex.split(line, comments=True)[-1]
        if err.option_name == last and "requires an argument" in err.format_message():
            return None  # `podium certs issue --dir`: an option named, not given
        return str(err.format_message())
    except click_errors.ClickException as err:
        return str(err.format_message())
    return None


@pytest.mark.parametrize("path", DOCS + ALERTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_documented_podium_command_parses(path: Path) -> None:
    refused = {line: why for line in commands(path) if (why := refusal(line)) is not None}
    assert refused == {}


def test_the_docs_do_document_commands() -> None:
    """The extraction finds what is there (a test of the test)."""
    found = {line for path in DOCS for line in commands(path)}
    assert "podium release KIND/NAME -n NS --unpinned" in found
    assert "podium audit 'audit-*.jsonl.gz' -n team-a --outcome fail-open --since 2h -o json" in (
        found
    )
    assert "podium certs secret --dir certs/ --name podium-tls --namespace podium-system" in found
    assert len(found) > 20


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ("podium release pytorchjob/llama --zone zone-a", "No such option: --zone"),
        ("podium doctor -o csv", "'csv' is not one of"),
        ("podium audit --outcome held-ish", "'held-ish' is not one of"),
        ("podium rewind", "No such command 'rewind'"),
        ("podium certs rotate --dri certs/", "No such option: --dri"),
        ("kubectl podium -n ml doctor", None),
        ("podium snapshot > cluster.json", None),
        ("podium certs …", None),
        ("podium release --unpinned", None),  # a mention: KIND/NAME left out
        ("podium certs", None),  # a group named
        ("podium certs issue --dir", None),  # an option named
        ("podium certs issue --dir --service x", "unexpected extra argument"),
        ("podium certs issue --dir certs/ --service podium --namespace podium-system", None),
    ],
)
def test_the_parser_refuses_what_the_cli_refuses(line: str, refused: str | None) -> None:
    why = refusal(line)
    assert (why is None) if refused is None else (why is not None and refused in why), why


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (
            "`podium release <job>` releases one by hand (`--zone`, or `--unpinned`)",
            ["podium release <job>", "podium release --zone", "podium release --unpinned"],
        ),
        ("`podium doctor` then `kubectl get pods` (`-o wide`)", ["podium doctor"]),
        ("`podium doctor`\n\nAnother paragraph: `--zone`", ["podium doctor"]),
        ("`podium doctor` says so. In Helm `--set x=y`", ["podium doctor"]),
        ("* `podium doctor` lists them\n* `--set x=y` in Helm", ["podium doctor"]),
        (
            "```sh\nkubectl logs deploy/podium | podium audit -f   # follow\n```",
            ["podium audit -f"],
        ),
        ("```\npodium certs issue --dir c/ \\\n  --namespace p\n```", ["podium certs issue"]),
        ("helm install podium charts/podium; `podium is here`", []),
        ("`podium audit [FILE…] [-n NS]`", []),
    ],
)
def test_what_counts_as_a_command_in_markdown(text: str, found: list[str]) -> None:
    got = list(from_markdown(text))
    assert [g[: len(f)] for g, f in zip(got, found, strict=False)] == found
    assert len(got) == len(found)


def test_the_runbook_that_suggested_release_zone_would_fail() -> None:
    """The PodiumGangsHeldTooLong runbook before issue 29, word for word."""
    old = (
        "why it waits; `podium release <job>` releases one by hand (`--zone`, or `--unpinned`). "
        "Free room\nin a zone, or, where an autoscaler can grow the GPU nodes, set "
        "`hold-timeout-seconds` (default 0,\nnever)"
    )
    refused = {line: why for line in from_markdown(old) if (why := refusal(line)) is not None}
    assert list(refused) == ["podium release --zone"]


def test_in_alert_prose_only_the_command_and_its_options_count() -> None:
    text = "run podium release pytorchjob/x --zone a and podium doctor, which names the jobs"
    assert list(from_prose(text)) == ["podium release", "podium doctor"]
    text = "podium release --zone zone-a, or podium certs rotate --dir certs/ now"
    assert list(from_prose(text)) == ["podium release --zone", "podium certs rotate --dir certs/"]
    assert str(refusal("podium release --zone")).startswith("No such option: --zone")
