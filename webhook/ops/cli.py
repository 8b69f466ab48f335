"""The ``podium`` command: ``serve``, ``review``, ``audit``, ``doctor`` and ``certs``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console

from webhook.core.settings import Settings, SettingsError
from webhook.ops import auditview, certs_cli, offline

app = typer.Typer(
    name="podium",
    help="Keep every pod of a distributed training job in one zone, and let only its pods talk.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="Settings file (YAML).", exists=False)
]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"podium: {message}", err=True)
    return typer.Exit(2)


def _settings(config: Path | None) -> Settings:
    try:
        return Settings.load(config)
    except SettingsError as err:
        raise _fail(str(err)) from err


@app.command()
def review(
    input_file: Annotated[
        Path,
        typer.Argument(metavar="INPUT", help="AdmissionReview or Pod (JSON/YAML; - for stdin)."),
    ],
    cluster: Annotated[
        Path, typer.Option("--cluster", help="ClusterView: a v1 List or YAML documents.")
    ],
    config: ConfigOption = None,
) -> None:
    """Decide one admission offline against a cluster snapshot; print the result as JSON."""
    settings = _settings(config)
    try:
        review_doc = offline.load_review(input_file)
        objects = offline.load_snapshot_objects(cluster)
        result = asyncio.run(offline.review(review_doc, objects, settings))
    except offline.InputError as err:
        raise _fail(str(err)) from err
    try:
        text = orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode()
    except TypeError:  # integers past 64 bits in a hand-made input
        text = json.dumps(result.as_dict(), indent=2, default=str)
    sys.stdout.write(text + "\n")


@app.command("audit")
def audit_command(
    files: Annotated[
        list[Path] | None, typer.Argument(help="JSON-lines files; stdin when none.")
    ] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    job: Annotated[str | None, typer.Option("--job", help="Job name or Kind/name.")] = None,
    zone: Annotated[str | None, typer.Option("--zone")] = None,
    outcome: Annotated[
        str | None, typer.Option("--outcome", help="pinned, unpinned, skipped, fail-open.")
    ] = None,
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
) -> None:
    """Review the audit trail: read podium's JSON lines (e.g. from kubectl logs) and filter them."""
    if output not in ("table", "json"):
        raise _fail(f"--output must be table or json, not {output!r}")
    lines: list[str] = []
    try:
        for path in files or []:
            lines.extend(path.read_text().splitlines())
    except (OSError, UnicodeDecodeError) as err:
        raise _fail(f"cannot read audit file: {err}") from err
    if not files:
        lines = sys.stdin.read().splitlines()
    records = [
        r
        for r in auditview.read(lines)
        if auditview.matches(
            r, namespace=namespace, job=job, zone=zone, outcome=outcome, reason=reason
        )
    ]
    if output == "json":
        for r in records:
            sys.stdout.write(orjson.dumps(r).decode() + "\n")
        return
    console = Console(width=max(Console().width, 140))
    console.print(auditview.table(records))
    console.print(auditview.summary(records))


@app.command()
def serve(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8443,
    cert_file: Annotated[
        Path | None, typer.Option("--cert-file", help="Serving certificate (PEM); reloaded live.")
    ] = None,
    key_file: Annotated[
        Path | None, typer.Option("--key-file", help="Its private key (PEM).")
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option("--kubeconfig", help="Kubeconfig; default: in-cluster, else ~/.kube/config."),
    ] = None,
    config: ConfigOption = None,
    audit_file: Annotated[
        Path | None,
        typer.Option("--audit-file", help="Also append audit JSON lines here (stdout always)."),
    ] = None,
    tls_min_version: Annotated[
        str, typer.Option("--tls-min-version", help="Lowest TLS version: 1.2 or 1.3.")
    ] = "1.2",
    client_ca_file: Annotated[
        Path | None,
        typer.Option("--client-ca-file", help="Require client certificates signed by these CAs."),
    ] = None,
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace", envvar="POD_NAMESPACE", help="podium's own namespace (never mutated)."
        ),
    ] = "podium-system",
    no_tls: Annotated[
        bool, typer.Option("--no-tls", help="Plain HTTP, for local use behind a port-forward.")
    ] = False,
) -> None:
    """Serve the admission webhook: watch the cluster, pin training pods, create their policies."""
    if tls_min_version not in ("1.2", "1.3"):
        raise _fail(f"--tls-min-version must be 1.2 or 1.3, not {tls_min_version!r}")
    if not no_tls and (cert_file is None or key_file is None):
        raise _fail("--cert-file and --key-file are required (or --no-tls for local use)")
    settings = dataclasses.replace(_settings(config), own_namespace=namespace)
    # Imported here: the web server and the Kubernetes client take a while to load, and the
    # other commands need neither.
    from webhook.kube import kubeapi  # noqa: PLC0415
    from webhook.serve import server  # noqa: PLC0415

    try:
        server.run(
            host=host,
            port=port,
            cert_file=cert_file,
            key_file=key_file,
            kubeconfig=kubeconfig,
            settings=settings,
            audit_file=audit_file,
            tls_min_version="1.3" if tls_min_version == "1.3" else "1.2",
            client_ca_file=client_ca_file,
            use_tls=not no_tls,
        )
    except kubeapi.ClientConfigError as err:
        raise _fail(str(err)) from err
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
        raise _fail(f"cannot serve: {err}") from err


@app.command()
def doctor(
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only jobs in this namespace.")
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json.")] = "table",
    kubeconfig: Annotated[
        Path | None,
        typer.Option("--kubeconfig", help="Kubeconfig; default: in-cluster, else ~/.kube/config."),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Check a live cluster's training jobs: split across zones, missing allow policies, Cilium
    deny or default-deny rules that select them, hostNetwork pods, pods podium did not pin.
    Exits 1 when something is wrong."""
    if output not in ("table", "json"):
        raise _fail(f"--output must be table or json, not {output!r}")
    settings = _settings(config)
    # Imported here, like serve: the Kubernetes client takes a while to load.
    from rich.progress import Progress  # noqa: PLC0415

    from webhook.kube import kubeapi, kubeops  # noqa: PLC0415
    from webhook.ops import doctor as checks  # noqa: PLC0415
    from webhook.serve import effects  # noqa: PLC0415

    try:
        api_client = kubeapi.load_client(kubeconfig)
    except kubeapi.ClientConfigError as err:
        raise _fail(str(err)) from err
    err_console = Console(stderr=True)
    with Progress(console=err_console, transient=True, disable=output == "json") as progress:
        reading = progress.add_task("listing the cluster", total=len(checks.kinds_to_read()))
        try:
            objects = asyncio.run(
                checks.collect(
                    kubeops.KubeObjects(api_client, timeout=60),
                    namespace=namespace,
                    on_kind=lambda kind: progress.update(
                        reading, advance=1, description=f"listing {kind}"
                    ),
                )
            )
        except effects.ApiError as err:
            raise _fail(f"cannot read the cluster: {err}") from err
        finally:
            api_client.close()  # type: ignore[no-untyped-call]
        pods = sum(1 for o in objects if o.get("kind") == "Pod")
        checking = progress.add_task("checking pods", total=pods, visible=pods >= 1000)
        result = checks.diagnose(
            objects,
            settings,
            namespace=namespace,
            progress=lambda n: progress.update(checking, completed=n),
        )
    if output == "json":
        sys.stdout.write(orjson.dumps(result.as_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        console = Console(width=max(Console().width, 160))
        console.print(checks.table(result))
        problems = len(result.findings)
        console.print("no problems found" if result.ok else f"{problems} problem(s) found")
    if not result.ok:
        raise typer.Exit(1)


app.add_typer(certs_cli.app, name="certs", help="Issue and rotate podium's certificates.")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
