"""``kubectl podium …``: podium as a kubectl plugin, by krew's conventions.

kubectl runs a plugin as the executable ``kubectl-podium`` on PATH, with the words after
``podium`` and kubectl's environment (``KUBECONFIG`` among it); flags kubectl itself would take
(``--kubeconfig``, ``--context``, ``-n``) reach the plugin as words, so they are accepted before
the command too (``kubectl podium -n ml doctor``) and handed down to every command that has them.
For ``kubectl podium <TAB>`` kubectl's own completion (``source <(kubectl completion bash)``)
calls ``kubectl_complete-podium`` on PATH with the same words, the last one being the word to
complete, and reads cobra's answer: a candidate per line (``value<TAB>help``), then
``:<directive>``. Both executables are console scripts of the wheel, so ``pip install`` is the
whole installation.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

# typer bundles its own click and exports neither its classes nor its completion engine.
from typer._click import shell_completion

#: How the plugin names itself in help and usage lines.
PROG_NAME = "kubectl podium"
#: The variable click's completion reads (``_KUBECTL_PODIUM_COMPLETE=complete_bash``).
COMPLETE_VAR = "_KUBECTL_PODIUM_COMPLETE"
#: cobra's ShellCompDirective: 0 lets the shell complete file names, 4 (NoFileComp) does not.
FILES_DIRECTIVE = 0
NO_FILES_DIRECTIVE = 4
#: typer's own options that print or install a completion script for the program's name: not
#: for ``kubectl podium`` (a two-word name no shell completes), which kubectl's completion covers.
_SCRIPT_OPTIONS = {"install_completion", "show_completion"}


def cluster_defaults(command: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """click's ``default_map`` for ``command``'s subcommands (nested for groups): each
    subcommand that has an option named in ``given`` gets its value as the default, so its own
    flag still wins. ``namespace`` goes only where ``-n`` spells it: ``serve --namespace`` is
    podium's own namespace, not a scope."""
    values = {name: value for name, value in given.items() if value is not None}
    found: dict[str, Any] = {}
    for name, sub in (getattr(command, "commands", None) or {}).items():
        if getattr(sub, "commands", None):
            nested = cluster_defaults(sub, values)
            if nested:
                found[name] = nested
            continue
        own = {p.name: p for p in sub.params}
        chosen = {
            key: _as_param(own[key], value)
            for key, value in values.items()
            if key in own and (key != "namespace" or "-n" in own[key].opts)
        }
        if chosen:
            found[name] = chosen
    return found


def _as_param(param: Any, value: Any) -> Any:
    """A value as ``param`` takes it: a one-item list for a repeatable option."""
    return [value] if param.multiple else value


def command() -> Any:
    """podium's click command as the plugin runs it: without typer's completion-script options."""
    import typer  # noqa: PLC0415

    from webhook.ops import cli  # noqa: PLC0415

    root = typer.main.get_command(cli.app)
    root.params = [p for p in root.params if p.name not in _SCRIPT_OPTIONS]
    return root


def main() -> None:
    """``kubectl-podium``: podium's CLI, naming itself ``kubectl podium``."""
    command()(prog_name=PROG_NAME, complete_var=COMPLETE_VAR)


class CobraComplete(shell_completion.ShellComplete):
    """click's completion engine answering as a cobra program (kubectl) expects of a plugin:
    for the words after ``podium``, the last one being completed."""

    name = "cobra"
    source_template = ""

    def __init__(self, words: list[str]) -> None:
        super().__init__(command(), {}, PROG_NAME, COMPLETE_VAR)
        self.words = words or [""]

    def source_vars(self) -> dict[str, Any]:
        return {}

    def get_completion_args(self) -> tuple[list[str], str]:
        *args, incomplete = self.words
        return args, incomplete

    def format_completion(self, item: Any) -> str:
        return str(item.value) + (f"\t{' '.join(item.help.split())}" if item.help else "")

    def complete(self) -> str:
        """Plain candidates, then the directive: with none (a path, a name to type) the shell
        completes file names, as typer's own bash script does (``complete -o default``)."""
        items = self.get_completions(*self.get_completion_args())
        lines = [self.format_completion(item) for item in items if item.type == "plain"]
        lines.append(f":{NO_FILES_DIRECTIVE if lines else FILES_DIRECTIVE}")
        return "".join(line + "\n" for line in lines)


def complete() -> None:
    """``kubectl_complete-podium``: what kubectl's shell completion asks a plugin."""
    sys.stdout.write(CobraComplete(sys.argv[1:]).complete())
