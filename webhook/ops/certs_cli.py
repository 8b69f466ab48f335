"""``podium certs``: issue, rotate, inspect and hand out the webhook's serving certificates.

The main CLI mounts `app` with ``add_typer(certs_cli.app, name="certs")``. The logic lives in
`webhook.certs`, the calls to the cluster in `webhook.ops.certs_cluster`; this module parses
options and prints. Exit codes are ``output``'s: 0 ok, 1 a finding (a rotation step that waits for
something to be done, a cluster that does not trust what podium serves), 2 could not run.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from cryptography import x509
from rich.console import Console

from webhook import certs
from webhook.ops import certs_cluster, output

app = typer.Typer(
    name="certs",
    help="Issue, rotate, inspect and hand out the webhook's serving certificates.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_out = Console(highlight=False, soft_wrap=True)


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
        "--dir",
        metavar="DIR",
        help="State directory (ca.pem, ca-key.pem, ca-bundle.pem, tls.crt, tls.key).",
    ),
]
DaysOption = Annotated[
    int,
    typer.Option("--days", min=1, metavar="DAYS", help="Lifetime of a serving certificate."),
]
CaDaysOption = Annotated[
    int, typer.Option("--ca-days", min=1, metavar="DAYS", help="Lifetime of a CA.")
]
KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        help="Kubeconfig; default: in-cluster, else $KUBECONFIG or ~/.kube/config.",
    ),
]
ContextOption = Annotated[
    str | None, typer.Option("--context", metavar="NAME", help="Kubeconfig context.")
]
WebhookConfigOption = Annotated[
    str, typer.Option("--name", metavar="NAME", help="MutatingWebhookConfiguration name.")
]
WebhookOption = Annotated[
    list[str] | None,
    typer.Option(
        "--webhook",
        metavar="NAME",
        help=f"Webhook inside it; repeatable. [default: {certs.WEBHOOK_NAMES[0]}]",
        show_default=False,
    ),
]
SecretOption = Annotated[
    str,
    typer.Option(
        "--secret",
        metavar="NAMESPACE/NAME",
        help="The Secret podium serves from; '' to not read it.",
    ),
]
DEFAULT_SECRET = f"{certs.SECRET_NAMESPACE}/{certs.SECRET_NAME}"


@app.command()
def issue(
    state_dir: DirOption = Path("certs"),
    service: Annotated[
        str, typer.Option(metavar="NAME", help="Service the webhook is reached by.")
    ] = "podium",
    namespace: Annotated[
        str, typer.Option(metavar="NAMESPACE", help="Namespace of that Service.")
    ] = "podium-system",
    san: Annotated[
        list[str] | None,
        typer.Option(
            "--san",
            metavar="NAME",
            help="Extra DNS name or IP; repeat or comma-separate (e.g. 127.0.0.1,localhost).",
            callback=_check_sans,
        ),
    ] = None,
    days: DaysOption = certs.DEFAULT_LEAF_LIFETIME.days,
    ca_days: CaDaysOption = certs.DEFAULT_CA_LIFETIME.days,
    cluster_domain: Annotated[
        str,
        typer.Option(
            metavar="DOMAIN", help="Cluster DNS domain for the long Service name; '' leaves it out."
        ),
    ] = certs.DEFAULT_CLUSTER_DOMAIN,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing CA and certificate.")
    ] = False,
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
    _out.print(f"Next: podium certs secret --dir {state_dir} | kubectl apply -f -")
    _out.print(f"      podium certs inject --dir {state_dir}")


_EXPLAIN = {
    certs.Action.DROP_CA: "dropped the retired CA from ca-bundle.pem (nothing it signed is served)",
    certs.Action.PROMOTE_CA: "promoted the staged CA: it signs from now on",
    certs.Action.STAGE_CA: "staged a new CA in ca-bundle.pem; it signs nothing until the next step",
    certs.Action.RENEW_LEAF: "renewed the serving certificate",
}


DEFAULT_MIN_OVERLAP_HOURS = certs.DEFAULT_MIN_OVERLAP.total_seconds() / 3600
MinOverlapOption = Annotated[
    float,
    typer.Option(
        "--min-overlap-hours",
        min=0,
        metavar="HOURS",
        help="How long a new CA's serving certificate is served before the old CA is "
        "dropped; with --offline also how long a staged CA is trusted before it signs.",
    ),
]
OfflineOption = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Do not read the cluster: promote a staged CA once it is --min-overlap-hours "
        "old, trusting that ca-bundle.pem was injected by then.",
    ),
]
ForceOption = Annotated[
    bool,
    typer.Option("--force", help="Take a step even when it is not safe yet (says why)."),
]


@app.command()
def rotate(
    state_dir: DirOption = Path("certs"),
    days: DaysOption = certs.DEFAULT_LEAF_LIFETIME.days,
    ca_days: CaDaysOption = certs.DEFAULT_CA_LIFETIME.days,
    min_overlap_hours: MinOverlapOption = DEFAULT_MIN_OVERLAP_HOURS,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    name: WebhookConfigOption = certs.WEBHOOK_CONFIG,
    webhook: WebhookOption = None,
    secret: SecretOption = DEFAULT_SECRET,
    offline: OfflineOption = False,
    force: ForceOption = False,
) -> None:
    """Do one rotation step: renew what is due, move the CA along when it is safe.

    A staged CA is promoted only once the webhook configuration's caBundle in the cluster holds
    it (read through --kubeconfig/--context; with --offline, once it is --min-overlap-hours
    old); the old CA is dropped only once the serving certificate is signed by the new one (also
    in the Secret) and has been for --min-overlap-hours. Safe to run every minute. Exits 1 when
    a step waits for something to be done (inject, apply the Secret).
    """
    try:
        certs.load_state(state_dir)  # a missing directory fails before the cluster is asked
    except certs.CertError as error:
        _fail(error)
    trust: certs.ClusterTrust | None = None
    if not offline:
        trust = _read_cluster(
            kubeconfig, context, name, webhook, secret, hint=" (or rotate on time alone: --offline)"
        ).trust
    try:
        rotation = certs.rotate(
            state_dir,
            leaf_lifetime=_days(days),
            ca_lifetime=_days(ca_days),
            min_overlap=datetime.timedelta(hours=min_overlap_hours),
            cluster=trust,
            force=force,
        )
    except certs.CertError as error:
        _fail(error)
    _print_rotation(rotation)
    _print_what_to_apply(set(rotation.actions), state_dir)
    needs_doing = [h for h in rotation.held if not h.waiting]
    cluster_warnings = not force and rotation.warnings
    if needs_doing or cluster_warnings:
        raise typer.Exit(output.FINDINGS)


def _print_rotation(rotation: certs.Rotation) -> None:
    """What the step did and held back, and what is served now (or when the next step is due)."""
    for warning in rotation.warnings:
        output.note(f"Warning: {warning}")
    for action in rotation.actions:
        _out.print(f"{action}: {_EXPLAIN[action]}")
    for hold in rotation.held:
        _out.print(f"{hold.action} held: {hold.reason}")
    if not rotation.actions:
        due = min(
            certs.renewal_time(rotation.state.leaf.cert), certs.renewal_time(rotation.state.ca.cert)
        )
        if not rotation.held:
            _out.print(f"Nothing due. Next renewal at {_when(due)}.")
    else:
        serial = rotation.state.leaf.cert.serial_number
        trusted = len(rotation.state.bundle)
        _out.print(f"Serving certificate serial {serial:x}; CAs trusted: {trusted}")


def _print_what_to_apply(done: set[certs.Action], state_dir: Path) -> None:
    """Which changed file the cluster must be given, and how."""
    if done & {certs.Action.RENEW_LEAF, certs.Action.PROMOTE_CA}:
        _out.print(
            f"tls.crt changed: apply it (podium certs secret --dir {state_dir} | kubectl apply "
            "-f -).",
            style="bold",
        )
    if done & {certs.Action.STAGE_CA, certs.Action.DROP_CA}:
        _out.print(
            f"ca-bundle.pem changed: inject it (podium certs inject --dir {state_dir}) before "
            "the next step.",
            style="bold",
        )


#: The files `show` looks at, in the order it lists them; ``ca.crt`` is a mounted Secret's bundle.
_SHOWN = (certs.LEAF_CERT, certs.CA_CERT, certs.NEXT_CA_CERT, certs.BUNDLE, "ca.crt")


@app.command()
def show(
    state_dir: DirOption = Path("certs"),
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="Also what the cluster holds: the webhook's caBundle and the Secret, and "
            "whether the one trusts the other.",
        ),
    ] = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    name: WebhookConfigOption = certs.WEBHOOK_CONFIG,
    webhook: WebhookOption = None,
    secret: SecretOption = DEFAULT_SECRET,
    output_format: output.FormatOption = output.Format.TABLE,
) -> None:
    """List the certificates in a state directory (or a mounted TLS Secret) and, with --cluster,
    in the cluster. Exits 1 when a row is in error (a file that is not PEM; with --cluster, an
    empty caBundle or no Secret) or, with --cluster, when the caBundle does not trust the
    Secret's serving certificate; 2 when the cluster cannot be read."""
    now = datetime.datetime.now(datetime.UTC)
    rows: list[dict[str, Any]] = []
    if state_dir.is_dir() or not cluster:
        rows = _rows_on_disk(state_dir, now)
        if not rows and not cluster:
            _fail(certs.CertStateError(f"no certificates in {state_dir}"))
    checks: list[dict[str, Any]] = []
    if cluster:
        held = _read_cluster(kubeconfig, context, name, webhook, secret)
        rows += _rows_in_cluster(held, now)
        if held.secret_leaf is not None:
            verified = held.trust.verifies(held.secret_leaf)
            checks.append(
                {
                    "check": "caBundle trusts the Secret's serving certificate",
                    "ok": verified,
                    "fix": None if verified else "podium certs inject --dir <state dir>",
                }
            )
    if not output_format.tabular:
        doc = {"certificates": rows, "checks": checks}
        sys.stdout.write(output.dump(doc, output_format))
    else:
        title = f"Certificates (times in UTC, as of {_when(now)})"
        _show_table(rows, checks, title=title, now=now, wide=output_format is output.Format.WIDE)
    if not all(c["ok"] for c in checks) or any("error" in row for row in rows):
        raise typer.Exit(output.FINDINGS)


def _rows_on_disk(state_dir: Path, now: datetime.datetime) -> list[dict[str, Any]]:
    """A row per certificate in the files ``show`` looks at (a row with the error for a file
    that is not PEM)."""
    rows: list[dict[str, Any]] = []
    for file_name in _SHOWN:
        path = state_dir / file_name
        if not path.is_file():
            continue
        try:
            cert_list = certs.certs_from_pem(path.read_bytes())
        except certs.CertError as error:
            rows.append({"source": str(path), "error": str(error)})
            continue
        rows += [_describe(str(path), cert, now) for cert in cert_list]
    return rows


def _rows_in_cluster(held: certs.ClusterCerts, now: datetime.datetime) -> list[dict[str, Any]]:
    """A row per certificate each webhook's caBundle and the Secret hold, and one per thing
    missing (an empty caBundle, no Secret)."""
    rows: list[dict[str, Any]] = []
    for hook, bundle in held.bundles.items():
        where = f"MutatingWebhookConfiguration {held.webhook_config} {hook} caBundle"
        rows += [_describe(where, cert, now) for cert in bundle]
        if not bundle:
            rows.append({"source": where, "error": "empty: nothing is trusted"})
    if held.secret and not held.secret_found:
        rows.append({"source": f"Secret {held.secret}", "error": "does not exist"})
    if held.secret_leaf is not None:
        rows.append(_describe(f"Secret {held.secret} tls.crt", held.secret_leaf, now))
        rows += [_describe(f"Secret {held.secret} ca.crt", c, now) for c in held.secret_bundle]
    return rows


def _describe(source: str, cert: x509.Certificate, now: datetime.datetime) -> dict[str, Any]:
    info = certs.summarize(cert)
    status = "ok"
    if now >= info.not_after:
        status = "expired"
    elif now < info.not_before:
        status = "not yet valid"
    elif now >= info.renew_at:
        status = "renewal due"
    return {
        "source": source,
        "subject": info.subject,
        "issuer": info.issuer,
        "serial": f"{info.serial:x}",
        "isCA": info.is_ca,
        "sans": info.sans,
        "notBefore": info.not_before.isoformat(),
        "notAfter": info.not_after.isoformat(),
        "renewAt": info.renew_at.isoformat(),
        "status": status,
    }


def _show_table(
    rows: Sequence[dict[str, Any]],
    checks: Sequence[dict[str, Any]],
    *,
    title: str,
    now: datetime.datetime,
    wide: bool = False,
) -> None:
    """The certificates, one row each: by default in 80 columns (the file's name, the subject,
    when it expires and is due for renewal as kubectl says a duration); ``wide`` adds the path,
    the SANs and the times themselves."""
    plain = not output.is_terminal()
    table = output.table(title, plain=plain)
    table.add_column("source", overflow="fold")
    table.add_column("subject, then SANs" if wide else "subject", overflow="fold", min_width=24)
    for column in ("not after", "renewal due") if wide else ("expires in", "renew in"):
        table.add_column(column, no_wrap=not plain)
    table.add_column("status", no_wrap=not plain)
    for row in rows:
        source = row["source"] if wide else _short_source(row["source"])
        if "error" in row:
            table.add_row(source, row["error"], "", "", "error")
            continue
        subject = row["subject"] + (" (CA)" if row["isCA"] else "")
        if wide:
            names = (
                "\n".join([subject, *row["sans"]])
                if not plain
                else ", ".join([subject, *row["sans"]])
            )
            times = [row[k][:16].replace("T", " ") for k in ("notAfter", "renewAt")]
        else:
            names = subject
            times = [_until(row[k], now) for k in ("notAfter", "renewAt")]
        table.add_row(source, names, *times, row["status"])
    lines = [
        f"{'ok' if c['ok'] else 'PROBLEM'}: {c['check']}"
        + (f" (fix: {c['fix']})" if c["fix"] else "")
        for c in checks
    ]
    output.render([table, *lines], plain=plain, wide=wide)


def _short_source(source: str) -> str:
    """A source in a few words (``-o wide`` says it whole): a file by its name, the webhook's
    bundle as ``caBundle <webhook>``, the Secret without its namespace."""
    words = source.split()
    if words[0] == "MutatingWebhookConfiguration" and len(words) == 4:
        return f"caBundle {words[2]}"
    if words[0] == "Secret" and len(words) >= 2:
        return " ".join(["Secret", words[1].rpartition("/")[2], *words[2:]])
    return Path(source).name


def _until(moment: str, now: datetime.datetime) -> str:
    """How long until ``moment`` (ISO), as kubectl says a duration; ``-`` once it has passed."""
    when = datetime.datetime.fromisoformat(moment)
    return output.age(now, when) if when > now else "-"


@app.command()
def secret(
    state_dir: DirOption = Path("certs"),
    name: Annotated[str, typer.Option(metavar="NAME", help="Secret name.")] = certs.SECRET_NAME,
    namespace: Annotated[
        str, typer.Option(metavar="NAMESPACE", help="Secret namespace.")
    ] = certs.SECRET_NAMESPACE,
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
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    name: WebhookConfigOption = certs.WEBHOOK_CONFIG,
    webhook: WebhookOption = None,
) -> None:
    """Server-side-apply ca-bundle.pem as the webhooks' caBundle (field manager podium-certs)."""
    webhooks = tuple(webhook or certs.WEBHOOK_NAMES)
    try:
        bundle = _read(state_dir / certs.BUNDLE)
        count = len(certs.certs_from_pem(bundle))
    except certs.CertError as error:
        _fail(error)
    from kubernetes import client  # noqa: PLC0415

    from webhook.ops import connect  # noqa: PLC0415

    try:
        api_client = connect.api_client(kubeconfig, context)
    except connect.ConnectError as error:
        _fail(error)
    with api_client:
        try:
            certs_cluster.apply_ca_bundle(api_client, name, bundle, webhook_names=webhooks)
        except client.ApiException as error:
            if error.status == 404:
                _fail(f"MutatingWebhookConfiguration {name} does not exist (pass --name)")
            _fail(f"cannot inject the caBundle: {connect.describe(error, api_client)}")
        except Exception as error:  # urllib3's connection errors and timeouts
            _fail(f"cannot inject the caBundle: {connect.describe(error, api_client)}")
    _out.print(f"caBundle of {name} ({', '.join(webhooks)}) now trusts {count} CA(s)")


def _read_cluster(
    kubeconfig: Path | None,
    context: str | None,
    name: str,
    webhook: list[str] | None,
    secret: str,
    *,
    hint: str = "",
) -> certs.ClusterCerts:
    from webhook.ops import connect  # noqa: PLC0415

    where: tuple[str, str] | None = None
    if secret:
        namespace, _, secret_name = secret.rpartition("/")
        if not namespace or not secret_name:
            _fail(f"--secret must be NAMESPACE/NAME, not {secret!r}")
        where = (namespace, secret_name)
    try:
        api_client = connect.api_client(kubeconfig, context)
    except connect.ConnectError as error:
        _fail(f"{error}{hint}")
    with api_client:
        try:
            return certs_cluster.read_cluster(
                api_client,
                name=name,
                webhook_names=tuple(webhook or certs.WEBHOOK_NAMES),
                secret=where,
            )
        except certs.ClusterReadError as error:
            _fail(f"cannot read what the cluster trusts: {error}{hint}")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise certs.CertStateError(f"cannot read {path}: {error.strerror}") from error


def _when(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _fail(error: Exception | str) -> NoReturn:
    raise output.fail(str(error))
