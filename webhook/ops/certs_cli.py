"""``podium certs``: issue, rotate, inspect and hand out the webhook's serving certificates.

The main CLI mounts `app` with ``add_typer(certs_cli.app, name="certs")``. The logic lives in
`webhook.ops.certs`; this module parses options and prints.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
import yaml
from rich.console import Console
from rich.table import Table

from webhook.ops import certs

app = typer.Typer(
    name="certs",
    help="Issue, rotate, inspect and hand out the webhook's serving certificates.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _check_sans(values: list[str] | None) -> list[str]:
    values = values or []
    try:
        certs.parse_sans(values)
    except certs.InvalidSANError as error:
        raise typer.BadParameter(str(error)) from error
    return values


def _days(value: int) -> datetime.timedelta:
    return datetime.timedelta(days=value)


DirOption = Annotated[
    Path,
    typer.Option(
        "--dir", help="State directory (ca.pem, ca-key.pem, ca-bundle.pem, tls.crt, tls.key)."
    ),
]
DaysOption = Annotated[
    int, typer.Option("--days", min=1, help="Lifetime of a serving certificate, in days.")
]
CaDaysOption = Annotated[int, typer.Option("--ca-days", min=1, help="Lifetime of a CA, in days.")]


@app.command()
def issue(
    state_dir: DirOption = Path("certs"),
    service: Annotated[str, typer.Option(help="Service the webhook is reached by.")] = "podium",
    namespace: Annotated[str, typer.Option(help="Namespace of that Service.")] = "podium-system",
    san: Annotated[
        list[str] | None,
        typer.Option(
            "--san",
            help="Extra DNS name or IP; repeat or comma-separate (e.g. 127.0.0.1,localhost).",
            callback=_check_sans,
        ),
    ] = None,
    days: DaysOption = certs.DEFAULT_LEAF_LIFETIME.days,
    ca_days: CaDaysOption = certs.DEFAULT_CA_LIFETIME.days,
    cluster_domain: Annotated[
        str, typer.Option(help="Cluster DNS domain for the long Service name; '' leaves it out.")
    ] = certs.DEFAULT_CLUSTER_DOMAIN,
    force: Annotated[bool, typer.Option(help="Replace an existing CA and certificate.")] = False,
) -> None:
    """Create a new CA and a serving certificate signed by it."""
    try:
        state = certs.issue(
            state_dir,
            service=service,
            namespace=namespace,
            extra_sans=san or [],
            leaf_lifetime=_days(days),
            ca_lifetime=_days(ca_days),
            cluster_domain=cluster_domain or None,
            overwrite=force,
        )
    except certs.CertError as error:
        _fail(error)
    summary = certs.summarize(state.leaf.cert)
    _out.print(f"Issued a CA and a serving certificate in {state_dir}")
    _out.print(f"  SANs: {', '.join(summary.sans)}")
    _out.print(f"  valid until {_when(summary.not_after)}, renewal due {_when(summary.renew_at)}")
    _out.print(f"Next: podium certs inject --dir {state_dir} (or podium certs secret …)")


_EXPLAIN = {
    certs.Action.DROP_CA: "dropped the retired CA from ca-bundle.pem (nothing it signed is served)",
    certs.Action.PROMOTE_CA: "promoted the staged CA: it signs from now on",
    certs.Action.STAGE_CA: "staged a new CA in ca-bundle.pem; it signs nothing until the next step",
    certs.Action.RENEW_LEAF: "renewed the serving certificate",
}


@app.command()
def rotate(
    state_dir: DirOption = Path("certs"),
    days: DaysOption = certs.DEFAULT_LEAF_LIFETIME.days,
    ca_days: CaDaysOption = certs.DEFAULT_CA_LIFETIME.days,
    min_overlap_hours: Annotated[
        float,
        typer.Option(min=0, help="Promote a staged CA only once it is at least this old."),
    ] = 0.0,
) -> None:
    """Do one rotation step: renew what is due, move the CA along (see `webhook.ops.certs`)."""
    try:
        rotation = certs.rotate(
            state_dir,
            leaf_lifetime=_days(days),
            ca_lifetime=_days(ca_days),
            min_overlap=datetime.timedelta(hours=min_overlap_hours),
        )
    except certs.CertError as error:
        _fail(error)
    if not rotation.actions:
        due = min(
            certs.renewal_time(rotation.state.leaf.cert), certs.renewal_time(rotation.state.ca.cert)
        )
        _out.print(f"Nothing due. Next renewal at {_when(due)}.")
        return
    for action in rotation.actions:
        _out.print(f"{action}: {_EXPLAIN[action]}")
    serial = rotation.state.leaf.cert.serial_number
    _out.print(f"Serving certificate serial {serial:x}; CAs trusted: {len(rotation.state.bundle)}")
    if {certs.Action.STAGE_CA, certs.Action.DROP_CA} & set(rotation.actions):
        _out.print(
            "ca-bundle.pem changed: inject it (podium certs inject) before the next step.",
            style="bold",
        )


#: The files `show` looks at, in the order it lists them; ``ca.crt`` is a mounted Secret's bundle.
_SHOWN = (certs.LEAF_CERT, certs.CA_CERT, certs.NEXT_CA_CERT, certs.BUNDLE, "ca.crt")


@app.command()
def show(state_dir: DirOption = Path("certs")) -> None:
    """List the certificates in a state directory (or a mounted TLS Secret)."""
    now = datetime.datetime.now(datetime.UTC)
    table = Table(title=f"Certificates in {state_dir} (times in UTC)")
    table.add_column("file", overflow="fold")
    table.add_column("subject, then SANs", overflow="fold", min_width=24)
    for column in ("not before", "not after", "renewal due"):
        table.add_column(column, no_wrap=True)
    found = False
    for name in _SHOWN:
        path = state_dir / name
        if not path.is_file():
            continue
        try:
            cert_list = certs.certs_from_pem(path.read_bytes())
        except certs.CertError as error:
            table.add_row(name, f"[red]{error}[/red]", "", "", "")
            continue
        found = True
        for cert in cert_list:
            info = certs.summarize(cert)
            due = _when(info.renew_at, short=True)
            if now >= info.not_after:
                due = "[red]expired[/red]"
            elif now >= info.renew_at:
                due = f"[yellow]now[/yellow] ({due})"
            table.add_row(
                name,
                "\n".join([info.subject + (" (CA)" if info.is_ca else ""), *info.sans]),
                _when(info.not_before, short=True),
                _when(info.not_after, short=True),
                due,
            )
    if not found:
        _fail(certs.CertStateError(f"no certificates in {state_dir}"))
    _out.print(table)


@app.command()
def secret(
    state_dir: DirOption = Path("certs"),
    name: Annotated[str, typer.Option(help="Secret name.")] = "podium-tls",
    namespace: Annotated[str, typer.Option(help="Secret namespace.")] = "podium-system",
) -> None:
    """Print a kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt = the CA bundle) as YAML."""
    try:
        manifest = certs.secret_manifest(
            name=name,
            namespace=namespace,
            tls_crt=_read(state_dir / certs.LEAF_CERT),
            tls_key=_read(state_dir / certs.LEAF_KEY),
            ca_crt=_read(state_dir / certs.BUNDLE),
        )
    except certs.CertError as error:
        _fail(error)
    # Plain stdout, not rich: the output is meant for `kubectl apply -f -`.
    sys.stdout.write(yaml.safe_dump(manifest, sort_keys=False))


@app.command()
def inject(
    state_dir: DirOption = Path("certs"),
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig file; default: in-cluster or ~/.kube/config.")
    ] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context.")] = None,
    name: Annotated[
        str, typer.Option(help="MutatingWebhookConfiguration name.")
    ] = certs.WEBHOOK_CONFIG,
    webhook: Annotated[
        list[str] | None, typer.Option(help="Webhook inside it; repeatable.")
    ] = None,
) -> None:
    """Server-side-apply ca-bundle.pem as the webhooks' caBundle (field manager podium-certs)."""
    webhooks = tuple(webhook or certs.WEBHOOK_NAMES)
    try:
        bundle = _read(state_dir / certs.BUNDLE)
        count = len(certs.certs_from_pem(bundle))
    except certs.CertError as error:
        _fail(error)
    # Imported here: the client costs most of a second to import and only this command needs it.
    from kubernetes import client, config  # noqa: PLC0415

    try:
        if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            api_client = client.ApiClient()
        else:
            api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig else None, context=context
            )
        with api_client:
            certs.apply_ca_bundle(api_client, name, bundle, webhook_names=webhooks)
    except (client.ApiException, config.ConfigException) as error:
        _fail(error)
    _out.print(f"caBundle of {name} ({', '.join(webhooks)}) now trusts {count} CA(s)")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise certs.CertStateError(f"cannot read {path}: {error.strerror}") from error


def _when(moment: datetime.datetime, *, short: bool = False) -> str:
    return moment.strftime("%Y-%m-%d\n%H:%M" if short else "%Y-%m-%d %H:%M:%SZ")


def _fail(error: Exception) -> NoReturn:
    _err.print(f"[red]error:[/red] {error}")
    raise typer.Exit(code=1)
