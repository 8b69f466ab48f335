"""The ``podium`` command: ``serve``, ``review``, ``audit``, ``doctor``, ``release``,
``report`` and ``certs``.

Each command lives with its kin: ``review_cli`` (review, snapshot), ``audit_cli`` (audit),
``serve_cli`` (serve), ``cluster_cli`` (doctor, release, report), ``probe`` and ``certs_cli``;
``cli_options`` holds what they share. Here they are registered, in the order ``podium --help``
lists them."""

from __future__ import annotations

import importlib.metadata
from typing import Annotated

import typer

from webhook.ops import (
    audit_cli,
    certs_cli,
    cluster_cli,
    kubectl,
    output,
    review_cli,
    serve_cli,
)
from webhook.ops import probe as probe_cli
from webhook.ops.cli_options import ContextOption, KubeconfigOption

app = typer.Typer(
    name="podium",
    no_args_is_help=True,
    # --show-completion / --install-completion (bash, zsh, fish); `kubectl podium` completes
    # through kubectl instead (webhook.ops.kubectl).
    add_completion=True,
    pretty_exceptions_enable=False,
    # Plain help and errors, as kubectl prints them: flags shown as flags, one "Error: …" line.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"podium {importlib.metadata.version('podium')}")
        raise typer.Exit()


@app.callback()
def _options(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            metavar="NS",
            help="The namespace, for every command that takes -n (as kubectl takes it here).",
        ),
    ] = None,
) -> None:
    """Keep every pod of a distributed training job in one zone, and let only its pods talk.

    Exit status, for every command: 0 ok; 1 it ran and found something wrong (doctor: a broken
    job; audit: a job split across zones; certs rotate: a step waits for something to be done;
    certs show: a row in error); 2 it could not run (a bad argument, an unreadable input, an
    input without audit records, an unreachable cluster), with one "Error:" line on stderr.

    --kubeconfig, --context and -n before the command are the defaults of every command that
    takes them (`kubectl podium -n ml doctor`); the command's own flags win.
    """
    ctx.default_map = kubectl.cluster_defaults(
        ctx.command, {"kubeconfig": kubeconfig, "context": context, "namespace": namespace}
    )


app.command(cls=output.Command)(review_cli.review)
app.command("audit", cls=output.Command)(audit_cli.audit_command)
app.command()(serve_cli.serve)
app.command()(review_cli.snapshot)
app.command()(cluster_cli.doctor)
app.command("release", cls=output.Command)(cluster_cli.release_command)
app.command("report", cls=output.Command)(cluster_cli.report_command)
app.add_typer(certs_cli.app, name="certs", help="Issue and rotate podium's certificates.")
app.command("probe")(probe_cli.command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
