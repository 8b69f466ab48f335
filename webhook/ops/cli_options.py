"""What the ``podium`` commands share: the options several of them take (one spelling each), and
the steps several of them take (load the settings, print JSON or YAML, reach the cluster)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from webhook.core.settings import Settings, SettingsError
from webhook.kube import errors
from webhook.ops import auditview, certs_cli, output

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", metavar="FILE", help="Settings file (YAML).", exists=False),
]
# One spelling of the cluster options for every command (certs declares them for its own).
KubeconfigOption = certs_cli.KubeconfigOption
ContextOption = certs_cli.ContextOption

# The log files ``podium audit`` and ``podium report`` read, and the namespace they keep.
AuditFiles = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="FILE",
        help="Log files of podium (JSON lines; globs and .gz too); - or none: stdin.",
        show_default=False,
    ),
]
OnlyNamespace = Annotated[
    str | None, typer.Option("--namespace", "-n", metavar="NS", help="Only this namespace.")
]

#: How to feed ``podium audit`` (and ``report``) the cluster's whole log: without --tail=-1,
#: kubectl sends only the last 10 lines of each pod when it selects pods by label.
LOGS_HINT = (
    "kubectl -n podium-system logs -l app.kubernetes.io/name=podium --tail=-1 --prefix "
    "--timestamps | {command}"
)


def hint_stdin(specs: list[str], command: str) -> None:
    """Reading stdin from a terminal waits for a person to type: say so, and how to pipe the
    log in, instead of waiting silently."""
    if auditview.STDIN in specs and output.stdin_is_terminal():
        output.note(
            "Reading podium's log from stdin (the terminal; Ctrl-D ends, Ctrl-C stops). "
            "Give log files, or pipe them: " + LOGS_HINT.format(command=command)
        )


def load_settings(config: Path | None) -> Settings:
    try:
        return Settings.load(config)
    except SettingsError as err:
        raise output.fail(str(err)) from err


def dump(doc: Any, output_format: output.Format | None) -> str:
    """JSON (indented) or YAML, as ``-o`` asks; YAML keeps the keys in their order."""
    return output.dump(doc, output_format)


def connect_cluster(kubeconfig: Path | None, context: str | None) -> tuple[Any, Any]:
    """The ``kubernetes`` client for ``--kubeconfig``/``--context``, and podium's object API on
    it (a command's calls may take a minute on a big cluster)."""
    from webhook.kube import client  # noqa: PLC0415
    from webhook.ops import connect  # noqa: PLC0415

    try:
        api_client = connect.api_client(kubeconfig, context)
    except connect.ConnectError as err:
        raise output.fail(str(err)) from err
    return api_client, client.KubeObjects(api_client, timeout=60)


@contextlib.contextmanager
def reading(api_client: Any) -> Iterator[None]:
    """Around the calls that read the cluster through ``api_client`` (``connect_cluster``'s): an
    API error is the one line "cannot read the cluster: …" (exit 2); the client is closed after."""
    from webhook.ops import connect  # noqa: PLC0415

    try:
        yield
    except errors.ApiError as err:
        raise output.fail(f"cannot read the cluster: {connect.describe(err, api_client)}") from err
    finally:
        api_client.close()
