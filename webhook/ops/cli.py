"""The ``podium`` command: ``serve``, ``review``, ``audit``, ``doctor``, ``release``,
``report`` and ``certs``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import enum
import importlib.metadata
import ssl
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import orjson
import typer
from rich.console import Console, RenderableType
from rich.markup import escape

from webhook.core.audit import AuditEntry, Outcome
from webhook.core.objects import parse_time
from webhook.core.settings import Settings, SettingsError
from webhook.kube import errors
from webhook.ops import auditview, certs_cli, kubectl, offline, output, serve_certs
from webhook.ops import probe as probe_cli

if TYPE_CHECKING:
    from webhook.ops import doctor as doctor_checks
    from webhook.ops import report as shadow_report

T = TypeVar("T")

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

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", metavar="FILE", help="Settings file (YAML).", exists=False),
]
# One spelling of the cluster options for every command (certs declares them for its own).
KubeconfigOption = certs_cli.KubeconfigOption
ContextOption = certs_cli.ContextOption


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


def _settings(config: Path | None) -> Settings:
    try:
        return Settings.load(config)
    except SettingsError as err:
        raise output.fail(str(err)) from err


# ``podium review``'s options, one name each.
SnapshotOption = Annotated[
    list[Path],
    typer.Option(
        "--cluster",
        metavar="SNAPSHOT",
        help="The cluster: a v1 List or YAML documents (`podium snapshot` makes one).",
    ),
]
#: ``summary``: what review's table format was called before every command took -o table.
ReviewFormatOption = Annotated[
    output.Format, output.format_option({"summary": output.Format.TABLE})
]
AtOption = Annotated[
    str | None,
    typer.Option(
        "--at",
        metavar="TIME",
        help="zone-chooser: hold — judge the held gangs as of this RFC 3339 time (how long "
        "each has waited, hold-timeout); default: now.",
        show_default=False,
    ),
]


@app.command(cls=output.Command)
def review(
    input_file: Annotated[
        Path,
        typer.Argument(metavar="INPUT", help="AdmissionReview or Pod (JSON/YAML; - for stdin)."),
    ],
    cluster: SnapshotOption,
    config: ConfigOption = None,
    output_format: ReviewFormatOption = output.Format.TABLE,
    at: AtOption = None,
) -> None:
    """Decide one admission offline against a cluster snapshot, exactly as podium serve would.

    -o table (the default, piped or not; summary is its old name): a short summary (zone,
    reason, demand and zones, the patch, what gets created, warnings); wide: the same, lines
    unwrapped. -o json or yaml: {response, patchedObject, sideEffects, audit}; what the
    snapshot lacked goes to stderr as warnings. With zone-chooser: hold, also what
    podium's releaser would do with the snapshot's held gangs (the reviewed pod among them when
    admission holds it): a releaser section in the summary, a release list in json/yaml. Exits
    0 when a response was produced, 2 when an input is unusable.
    """
    if len(cluster) > 1:
        raise output.fail(
            f"--cluster was given {len(cluster)} times: a review reads one snapshot (put the "
            "objects in one file, or make it with `podium snapshot`)"
        )
    settings = _settings(config)
    now = parse_time(at) if at is not None else None
    if at is not None and now is None:
        raise output.fail(f"--at {at!r} is not an RFC 3339 time (e.g. 2026-12-01T12:00:00Z)")
    try:
        review_doc = offline.load_review(input_file)
        objects = offline.load_snapshot_objects(cluster[0])
        result = asyncio.run(offline.review(review_doc, objects, settings, now=now))
        _check_snapshot(cluster[0], objects)
    except offline.InputError as err:
        raise output.fail(str(err)) from err
    if output_format is output.Format.TABLE:
        summary = output.under_labels(offline.summary(result), gutter=offline.GUTTER)
        if output.is_terminal():
            Console(highlight=False).print(summary)
        else:
            output.render([summary], plain=True, width=output.TABLE_WIDTH)
        return
    if output_format is output.Format.WIDE:
        output.render([output.under_labels(offline.summary(result), gutter=0)], plain=True)
        return
    for note in result.notes:
        output.note(f"Warning: {note}")
    sys.stdout.write(_dump(result.as_dict(), output_format))


def _check_snapshot(path: Path, objects: list[Any]) -> None:
    """A snapshot without a single Node cannot place anything: most likely the pod file given
    as --cluster, or a list of one namespace's objects; say so instead of deciding "no room"."""
    if any(o.get("kind") == "Node" for o in objects):
        return
    kinds = sorted({str(o.get("kind")) for o in objects})
    held = f"only {', '.join(kinds)}" if kinds else "no objects"
    raise offline.InputError(
        f"--cluster {path} holds no Node ({held}): it must be a snapshot of the cluster "
        "(`podium snapshot > cluster.json`, or `kubectl get nodes,namespaces -o yaml` and the "
        "pods and jobs around the one reviewed)"
    )


# ``podium audit``'s options, one name each.
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
OnlyJob = Annotated[
    str | None,
    typer.Option(
        "--job",
        metavar="KIND/NAME",
        help="Only this job: NAME, KIND/NAME (kind in any case, e.g. pytorchjob/ft) or UID.",
    ),
]
OnlyPod = Annotated[str | None, typer.Option("--pod", metavar="NAME", help="Only this pod.")]
OnlyZone = Annotated[str | None, typer.Option("--zone", metavar="ZONE", help="Only this zone.")]
OnlyOutcome = Annotated[Outcome | None, typer.Option("--outcome", help="Only this outcome.")]
OnlyReason = Annotated[
    str | None, typer.Option("--reason", metavar="REASON", help="Only this reason.")
]
OnlyUser = Annotated[
    str | None,
    typer.Option("--user", metavar="NAME", help="Only requests by this user (or service account)."),
]
Since = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="WHEN",
        help="Only records at or after WHEN: a duration back from now (90s, 15m, 2h, 1d) "
        "or a timestamp (2026-11-29T12:00:00Z; local time without a zone).",
    ),
]
Until = Annotated[
    str | None,
    typer.Option("--until", metavar="WHEN", help="Only records at or before WHEN (as --since)."),
]
Follow = Annotated[
    bool,
    typer.Option(
        "--follow", "-f", help="Keep reading: print records as they are appended (Ctrl-C ends)."
    ),
]
ShowOwnReleases = Annotated[
    bool,
    typer.Option(
        "--show-own-releases",
        help="Also podium's own UPDATEs of the pods its releaser released (skipped "
        "own-release, one per pod; the releaser's released entry lists them).",
    ),
]
Utc = Annotated[bool, typer.Option("--utc", help="Times in UTC (default: local time).")]


@app.command("audit", cls=output.Command)
def audit_command(
    files: AuditFiles = None,
    namespace: OnlyNamespace = None,
    job: OnlyJob = None,
    pod: OnlyPod = None,
    zone: OnlyZone = None,
    outcome: OnlyOutcome = None,
    reason: OnlyReason = None,
    user: OnlyUser = None,
    since: Since = None,
    until: Until = None,
    follow: Follow = False,
    output_format: output.FormatOption = output.Format.TABLE,
    utc: Utc = False,
    show_own_releases: ShowOwnReleases = False,
) -> None:
    """Review the audit trail: podium's records from its logs, filtered, with a per-job summary.

    Reads files or stdin, e.g. `kubectl -n podium-system logs -l app.kubernetes.io/name=podium
    --tail=-1 --prefix --timestamps | podium audit` (with -l, kubectl sends only the last 10
    lines of each pod unless --tail=-1). Jobs are grouped by gang (job UID, plus the group for
    group-wise jobs). Exits 1 when a job was split across zones, 0 otherwise (also when the
    filters leave no record), 2 when it cannot read its input or the input holds no audit record
    at all (the wrong file or log source). podium's own release UPDATEs (skipped own-release) are
    left out unless --show-own-releases.
    """
    now = datetime.datetime.now(datetime.UTC)

    def moment(text: str) -> datetime.datetime:
        return auditview.parse_moment(text, now=now)

    query = auditview.Filter(
        namespace=namespace,
        job=_parsed("--job", job, auditview.JobQuery.parse),
        pod=pod,
        zone=zone,
        outcome=outcome,
        reason=reason,
        user=user,
        since=_parsed("--since", since, moment),
        until=_parsed("--until", until, moment),
        hide_own_releases=not show_own_releases,
    )
    _check_window(since, until, query.since, query.until)
    tally = auditview.Tally()
    shown = TableShape(wide=output_format is output.Format.WIDE, namespace=namespace is None)
    try:
        specs = auditview.expand(files or [auditview.STDIN])
        _hint_stdin(specs, "podium audit")
        if follow:
            found = _follow_audit(specs, query, tally, output_format, utc=utc, shape=shown)
        else:
            loaded = list(auditview.load(specs, tally))
            if not loaded:
                raise output.fail(_no_records(specs, tally))
            entries = [r for r in loaded if query.matches(r)]
            found = _show_audit(entries, tally, output_format, utc=utc, shape=shown)
            hidden = sum(
                1
                for r in loaded
                if auditview.own_release(r)
                and dataclasses.replace(query, hide_own_releases=False).matches(r)
            )
            if hidden and query.hide_own_releases and output_format.tabular:
                output.note(
                    f"({hidden} of podium's own release UPDATEs hidden: --show-own-releases "
                    "shows them)"
                )
    except auditview.InputError as err:
        raise output.fail(str(err)) from err
    if tally.skipped:
        output.note(f"({tally.skipped} line(s) skipped: not podium audit records)")
    if found.split:
        raise typer.Exit(output.FINDINGS)


@dataclasses.dataclass(frozen=True, slots=True)
class TableShape:
    """Which columns a table shows: ``-o wide``'s, and NAMESPACE unless -n chose one."""

    wide: bool = False
    namespace: bool = True


#: How to feed ``podium audit`` (and ``report``) the cluster's whole log: without --tail=-1,
#: kubectl sends only the last 10 lines of each pod when it selects pods by label.
LOGS_HINT = (
    "kubectl -n podium-system logs -l app.kubernetes.io/name=podium --tail=-1 --prefix "
    "--timestamps | {command}"
)


def _hint_stdin(specs: list[str], command: str) -> None:
    """Reading stdin from a terminal waits for a person to type: say so, and how to pipe the
    log in, instead of waiting silently."""
    if auditview.STDIN in specs and output.stdin_is_terminal():
        output.note(
            "Reading podium's log from stdin (the terminal; Ctrl-D ends, Ctrl-C stops). "
            "Give log files, or pipe them: " + LOGS_HINT.format(command=command)
        )


def _check_window(
    since_text: str | None,
    until_text: str | None,
    since: datetime.datetime | None,
    until: datetime.datetime | None,
) -> None:
    """--since after --until leaves no moment to show: refuse it rather than print nothing."""
    if since is not None and until is not None and since > until:
        raise output.fail(
            f"--since {since_text} is later than --until {until_text}: no record can be in "
            f"both (--since is the older end of the window; did you mean --since {until_text} "
            f"--until {since_text}?)"
        )


def _no_records(specs: list[str], tally: auditview.Tally) -> str:
    """Why an input without a single audit record is an error, not an all-clear: it is most
    likely the wrong file or the wrong log source (another container, the wrong label), and
    ``podium audit … || alert`` must not pass on it. Filters that leave nothing of records that
    were there are fine (exit 0)."""
    read = ", ".join("stdin" if spec == auditview.STDIN else spec for spec in specs)
    if not tally.skipped:
        return f"no podium audit records in {read}: the input is empty"
    return (
        f"no podium audit records in {read}: {tally.skipped} line(s), none of them a podium "
        "audit record (is it podium's log? kubectl -n podium-system logs "
        "-l app.kubernetes.io/name=podium --tail=-1)"
    )


def _show_audit(
    entries: list[AuditEntry],
    tally: auditview.Tally,
    output_format: output.Format,
    *,
    utc: bool,
    shape: TableShape,
) -> auditview.Summary:
    grouped = auditview.summarize(entries)
    if not output_format.tabular:
        doc = auditview.document(entries, grouped, skipped=tally.skipped)
        sys.stdout.write(_dump(doc, output_format))
        return grouped
    if not entries:
        typer.echo("No audit records match.")  # the input had some: the filters left none
        return grouped
    plain = not output.is_terminal()
    wide, namespace = shape.wide, shape.namespace
    legend = auditview.legend(entries, grouped, wide=wide)
    output.render(
        [
            auditview.table(entries, wide=wide, utc=utc, plain=plain, namespace=namespace),
            "",
            auditview.summary(grouped, wide=wide, plain=plain, namespace=namespace),
            *(["", legend] if legend else []),
        ],
        plain=plain,
        wide=wide,
    )
    return grouped


def _follow_audit(
    specs: list[str],
    query: auditview.Filter,
    tally: auditview.Tally,
    output_format: output.Format,
    *,
    utc: bool,
    shape: TableShape,
) -> auditview.Summary:
    grouped = auditview.Summary()
    wide, namespace = shape.wide, shape.namespace
    tabular = output_format.tabular
    if tabular:
        typer.echo(auditview.stream_header(wide=wide, namespace=namespace))
    try:
        for entry in auditview.read(auditview.follow_lines(specs), tally):
            if not query.matches(entry):
                continue
            grouped.add(entry)
            if tabular:
                typer.echo(auditview.stream_line(entry, wide=wide, utc=utc, namespace=namespace))
            elif output_format is output.Format.JSON:
                typer.echo(orjson.dumps(entry).decode())
            else:
                sys.stdout.write("---\n" + _dump(entry, output_format))
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    if tabular and grouped.gangs:
        plain = not output.is_terminal()
        output.render(
            ["", auditview.summary(grouped, wide=wide, plain=plain, namespace=namespace)],
            plain=plain,
            wide=wide,
        )
    return grouped


def _parsed(flag: str, text: str | None, parse: Callable[[str], T]) -> T | None:
    """An option's value parsed, or an error naming the option."""
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as err:
        raise output.fail(f"{flag}: {err}") from err


def _dump(doc: Any, output_format: output.Format | None) -> str:
    """JSON (indented) or YAML, as ``-o`` asks; YAML keeps the keys in their order."""
    return output.dump(doc, output_format)


class TLSVersion(enum.StrEnum):
    V1_2 = "1.2"
    V1_3 = "1.3"


# ``podium serve``'s options, one name each.
Host = Annotated[str, typer.Option("--host", metavar="ADDRESS", help="Address to listen on.")]
Port = Annotated[int, typer.Option("--port", metavar="PORT", help="Port to listen on.")]
CertFile = Annotated[
    Path | None,
    typer.Option("--cert-file", metavar="FILE", help="Serving certificate (PEM); reloaded."),
]
KeyFile = Annotated[
    Path | None, typer.Option("--key-file", metavar="FILE", help="Its private key (PEM).")
]
AuditFile = Annotated[
    Path | None,
    typer.Option(
        "--audit-file",
        metavar="FILE",
        help="Also append audit JSON lines here (stdout always).",
    ),
]
TLSMinVersion = Annotated[TLSVersion, typer.Option("--tls-min-version", help="Lowest TLS version.")]
ClientCAFile = Annotated[
    Path | None,
    typer.Option(
        "--client-ca-file",
        metavar="FILE",
        help="Require client certificates signed by these CAs.",
    ),
]
OwnNamespace = Annotated[
    str,
    typer.Option(
        "--namespace",
        metavar="NS",
        envvar="POD_NAMESPACE",
        help="podium's own namespace (never mutated).",
    ),
]
NoTLS = Annotated[
    bool, typer.Option("--no-tls", help="Plain HTTP, for local use behind a port-forward.")
]


@app.command()
def serve(
    host: Host = "0.0.0.0",
    port: Port = 8443,
    cert_file: CertFile = None,
    key_file: KeyFile = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    config: ConfigOption = None,
    audit_file: AuditFile = None,
    tls_min_version: TLSMinVersion = TLSVersion.V1_2,
    client_ca_file: ClientCAFile = None,
    namespace: OwnNamespace = "podium-system",
    no_tls: NoTLS = False,
    certs: serve_certs.Certs = None,
    certs_secret: serve_certs.CertsSecret = "podium-tls",
    webhook_configuration: serve_certs.WebhookConfiguration = "podium",
    service: serve_certs.Service = "podium",
    san: serve_certs.San = None,
    certs_dir: serve_certs.CertsDir = None,
    certs_interval: serve_certs.CertsInterval = 5.0,
    certs_overlap: serve_certs.CertsOverlap = serve_certs.DEFAULT_OVERLAP,
) -> None:
    """Serve the admission webhook: watch the cluster, pin training pods, create their policies."""
    self_certs = certs is serve_certs.CertSource.SELF and not no_tls
    if self_certs and (cert_file is not None or key_file is not None):
        raise output.fail("--certs self makes its own certificate: drop --cert-file/--key-file")
    if not no_tls and not self_certs and (cert_file is None or key_file is None):
        raise output.fail(
            "--cert-file and --key-file are required (or --certs self to have the cluster keep "
            "the certificate, or --no-tls for local use)"
        )
    settings = dataclasses.replace(_settings(config), own_namespace=namespace)
    if not no_tls and not self_certs and cert_file is not None and key_file is not None:
        _check_pair(cert_file, key_file)
    keeping = None
    if self_certs:
        try:
            keeping = serve_certs.options(
                namespace=namespace,
                secret=certs_secret,
                webhook_configuration=webhook_configuration,
                service=service,
                sans=san,
                directory=certs_dir,
                interval=certs_interval,
                overlap=certs_overlap,
            )
        except ValueError as err:
            raise output.fail(f"--san: {err}") from err
    # Imported here: the web server and the Kubernetes client take a while to load, and the
    # other commands need neither.
    from webhook.kube import client  # noqa: PLC0415
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
            tls_min_version="1.3" if tls_min_version is TLSVersion.V1_3 else "1.2",
            client_ca_file=client_ca_file,
            use_tls=not no_tls,
            context=context,
            self_certs=keeping,
        )
    except client.ClientConfigError as err:
        raise output.fail(str(err)) from err
    except ssl.SSLError as err:
        raise output.fail(f"cannot serve TLS: {_tls_problem(err)}") from err
    except OSError as err:
        where = f" {err.filename}" if err.filename else ""
        raise output.fail(f"cannot serve: {err.strerror or err}{where}") from err
    except ValueError as err:
        raise output.fail(f"cannot serve: {err}") from err


def _check_pair(cert_file: Path, key_file: Path) -> None:
    """The serving pair, read once before anything starts: a missing file, something that is
    not PEM, or a key of another certificate is one line that names the flag."""
    from cryptography import x509  # noqa: PLC0415
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    try:
        cert = x509.load_pem_x509_certificates(cert_file.read_bytes())[0]
    except OSError as err:
        raise output.fail(f"--cert-file {cert_file}: {err.strerror}") from err
    except ValueError as err:
        raise output.fail(f"--cert-file {cert_file} holds no PEM certificate") from err
    try:
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except OSError as err:
        raise output.fail(f"--key-file {key_file}: {err.strerror}") from err
    except (ValueError, TypeError) as err:
        raise output.fail(f"--key-file {key_file} holds no unencrypted PEM private key") from err
    if cert.public_key() != key.public_key():
        raise output.fail(
            f"--key-file {key_file} is not the private key of --cert-file {cert_file} (the "
            "certificate's public key belongs to another key; were they issued together?)"
        )


def _tls_problem(err: ssl.SSLError) -> str:
    """An OpenSSL error in words (``[X509: KEY_VALUES_MISMATCH] key values mismatch``)."""
    known = {
        "KEY_VALUES_MISMATCH": "the private key does not belong to the certificate",
        "PEM_LIB": "a file is not PEM",
        "NO_START_LINE": "a file is not PEM",
        "CA_MD_TOO_WEAK": "a certificate is signed with a digest OpenSSL refuses",
        "EE_KEY_TOO_SMALL": "the key is too small for OpenSSL's security level",
    }
    return known.get(str(err.reason or ""), str(err.reason or err.strerror or err).lower())


class SnapshotFormat(enum.StrEnum):
    JSON = "json"
    YAML = "yaml"


@app.command()
def snapshot(
    namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--namespace",
            "-n",
            metavar="NS",
            help="Only this namespace (repeatable), opted in or not; default: every namespace "
            "that opted in.",
            show_default=False,
        ),
    ] = None,
    output_format: Annotated[
        SnapshotFormat, typer.Option("--output", "-o", help="Output format.")
    ] = SnapshotFormat.JSON,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    config: ConfigOption = None,
) -> None:
    """Capture what `podium review` needs of a live cluster, as one v1 List on stdout.

    The nodes; the namespaces that opted in (or -n); in them the pods, the job objects and
    podium's decision records and policies. Then: podium review pod.yaml --cluster FILE.
    """
    settings = _settings(config)
    from rich.progress import Progress  # noqa: PLC0415

    from webhook.ops import snapshot as capture  # noqa: PLC0415

    api_client, objects_api = _connect(kubeconfig, context)
    err_console = Console(stderr=True)
    try:
        with (
            _reading(api_client),
            Progress(
                console=err_console, transient=True, disable=not err_console.is_terminal
            ) as progress,
        ):
            task = progress.add_task("listing", total=None)
            objects = asyncio.run(
                capture.capture(
                    objects_api,
                    settings,
                    namespaces=namespace or (),
                    on_kind=lambda kind: progress.update(task, description=f"listing {kind}"),
                )
            )
    except capture.SnapshotError as err:
        raise output.fail(f"{err} (-n)") from err
    doc = capture.as_list(objects)
    if output_format is SnapshotFormat.YAML:
        sys.stdout.write(_dump(doc, output.Format.YAML))
    else:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
    output.note(f"captured {capture.counts(objects)}")


def _connect(kubeconfig: Path | None, context: str | None) -> tuple[Any, Any]:
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
def _reading(api_client: Any) -> Iterator[None]:
    """Around the calls that read the cluster through ``api_client`` (``_connect``'s): an API
    error is the one line "cannot read the cluster: …" (exit 2); the client is closed after."""
    from webhook.ops import connect  # noqa: PLC0415

    try:
        yield
    except errors.ApiError as err:
        raise output.fail(f"cannot read the cluster: {connect.describe(err, api_client)}") from err
    finally:
        api_client.close()


@app.command()
def doctor(
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", metavar="NS", help="Only jobs in this namespace."),
    ] = None,
    output_format: output.FormatOption = output.Format.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    config: ConfigOption = None,
) -> None:
    """Check a live cluster's training jobs: split across zones, missing allow policies, Cilium
    deny or default-deny rules that select them, hostNetwork pods, pods podium did not pin,
    pods carrying a job's label they copied. Exits 1 when something is wrong, 2 when -n names a
    namespace that does not exist."""
    settings = _settings(config)
    quiet = not output_format.tabular or not Console(stderr=True).is_terminal
    result = _diagnose_live(
        settings, namespace=namespace, kubeconfig=kubeconfig, context=context, quiet=quiet
    )
    if not output_format.tabular:
        sys.stdout.write(_dump(result.as_dict(), output_format))
    else:
        _print_diagnosis(result, wide=output_format is output.Format.WIDE)
    if not result.ok:
        raise typer.Exit(output.FINDINGS)


def _diagnose_live(
    settings: Settings,
    *,
    namespace: str | None,
    kubeconfig: Path | None,
    context: str | None,
    quiet: bool,
) -> doctor_checks.Diagnosis:
    """List the cluster (a progress bar per kind on stderr, unless ``quiet``) and diagnose it."""
    # Imported here, like serve: the Kubernetes client takes a while to load.
    from rich.progress import Progress  # noqa: PLC0415

    from webhook.ops import doctor as checks  # noqa: PLC0415

    api_client, objects_api = _connect(kubeconfig, context)
    notes: list[str] = []
    with Progress(console=Console(stderr=True), transient=True, disable=quiet) as progress:
        reading = progress.add_task("listing the cluster", total=len(checks.kinds_to_read()))
        with _reading(api_client):
            objects = asyncio.run(
                checks.collect(
                    objects_api,
                    namespace=namespace,
                    own_namespace=settings.own_namespace,
                    on_kind=lambda kind: progress.update(
                        reading, advance=1, description=f"listing {kind}"
                    ),
                    notes=notes,
                )
            )
        if namespace is not None:
            try:
                note = checks.namespace_note(objects, settings, namespace)
            except checks.NamespaceNotFound as err:
                raise output.fail(str(err)) from err
            if note:
                output.note(note)
        for narrowed in notes:
            output.note(narrowed)
        pods = sum(1 for o in objects if o.get("kind") == "Pod")
        checking = progress.add_task("checking pods", total=pods, visible=pods >= 1000)
        return checks.diagnose(
            objects,
            settings,
            namespace=namespace,
            lease_read=True,
            progress=lambda n: progress.update(checking, completed=n),
        )


def _print_diagnosis(result: doctor_checks.Diagnosis, *, wide: bool) -> None:
    from webhook.ops import doctor as checks  # noqa: PLC0415

    plain = not output.is_terminal()
    table = checks.table(result) if wide else checks.short_table(result)
    if plain:
        output.make_plain(table)
    problems = len(result.findings)
    verdict = "no problems found" if result.ok else f"{problems} problem(s) found"
    lines = [] if wide else [escape(line) for line in checks.finding_lines(result)]
    # "  fix: " is the label its sentence wraps under
    findings: list[RenderableType] = (
        ["", output.under_labels(lines, gutter=len("  fix: "))] if lines else []
    )
    output.render(
        [table, *findings, verdict],
        plain=plain,
        wide=wide,
        width=output.PLAIN_WIDTH if wide else output.TABLE_WIDTH,
    )


@app.command("release", cls=output.Command)
def release_command(
    job: Annotated[
        str, typer.Argument(metavar="KIND/NAME", help="The job, e.g. pytorchjob/llama.")
    ],
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            metavar="NS",
            help="The job's namespace (default: the kubeconfig context's, as kubectl).",
            show_default=False,
        ),
    ] = None,
    unpinned: Annotated[
        bool, typer.Option("--unpinned", help="Release it into no zone (it may split).")
    ] = False,
    by: Annotated[
        str | None,
        typer.Option("--by", metavar="USER", help="Who asks (default: the kubeconfig's user)."),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
) -> None:
    """Release a job held by podium (zone-chooser: hold) now: into the best zone that fits, or the
    roomiest when none does, or unpinned. Asks podium's releaser through two annotations on the
    job (podium.dev/release, podium.dev/released-by); it releases the gang within one pass and
    audits it (podium audit --outcome released) naming who asked."""
    from webhook.core import adapters, labels  # noqa: PLC0415

    kind_text, _, name = job.partition("/")
    kinds = [k for k in adapters.KINDS if k.kind.lower() == kind_text.lower() and k.namespaced]
    if not name or not kinds:
        known = ", ".join(sorted({k.kind.lower() for k in adapters.KINDS}))
        raise output.fail(f"{job!r} is not KIND/NAME of a training job (kinds: {known})")
    kind = kinds[0]
    api_client, objects = _connect(kubeconfig, context)
    if namespace is None:
        namespace = _context_namespace(kubeconfig, context)

    async def ask() -> str:
        who = by
        if who is None:
            review = await objects.create(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
            )
            who = str(((review.get("status") or {}).get("userInfo") or {}).get("username") or "")
        asked = "unpinned" if unpinned else "zone"
        patch = {"metadata": {"annotations": {labels.RELEASE: asked, labels.RELEASED_BY: who}}}
        await objects.merge_patch(kind.api_version, kind.kind, namespace, name, patch)
        return who

    try:
        who = asyncio.run(ask())
    except errors.NotFound as err:
        raise output.fail(
            f"there is no {kind.kind} {name} in namespace {namespace} (kubectl -n {namespace} "
            f"get {kind.kind.lower()}s; another namespace: -n NS)"
        ) from err
    except errors.ApiError as err:
        raise output.fail(f"cannot ask for the release of {kind.kind}/{name}: {err}") from err
    finally:
        api_client.close()
    where = "unpinned" if unpinned else "into the best zone"
    Console().print(
        f"asked podium to release {kind.kind}/{name} in {namespace} {where} (by {who or '?'}); "
        "podium audit --outcome released shows it"
    )


def _context_namespace(kubeconfig: Path | None, context: str | None) -> str:
    """The namespace kubectl would use without -n: the kubeconfig context's (``--context``, else
    the current one), in a pod its service account's, else ``default``."""
    import os  # noqa: PLC0415

    from kubernetes import config as k8s_config  # noqa: PLC0415

    in_pod = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        with contextlib.suppress(OSError):
            return in_pod.read_text().strip() or "default"
    where = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or "~/.kube/config"
    try:
        contexts, current = k8s_config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=where
        )
    except (k8s_config.ConfigException, OSError, ValueError, TypeError):
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


@app.command("report", cls=output.Command)
def report_command(
    files: AuditFiles = None,
    namespace: OnlyNamespace = None,
    output_format: output.FormatOption = output.Format.TABLE,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    config: ConfigOption = None,
    from_cluster: Annotated[
        bool,
        typer.Option(
            "--from-cluster",
            help="Read podium's Reports (openreports.io, one per opted-in namespace) from the "
            "cluster instead of its logs: for when the logs are gone (docs/reports.md).",
        ),
    ] = False,
) -> None:
    """What enforcing podium would have saved: a shadow-mode audit trail beside the live cluster.

    Per job: the zone podium would have chosen, the zones its pods ran in, whether they split
    where podium would have kept them together, and the GPU-hours its pods held; per namespace
    the totals, those that would gain most first. Reads podium's logs as `podium audit` does
    (files or stdin) and the pods and nodes from the cluster. Exits 1 when a job split that
    podium would have kept in one zone, 0 otherwise, 2 when the input holds no shadow-mode
    decision or the cluster cannot be read.

    With --from-cluster: per job, the result in podium's Reports (fail: its pods run in more
    than one zone), in enforce and shadow namespaces alike; no logs needed. Exits 1 when a
    result fails, 2 when there is no Report to read.
    """
    from webhook.ops import report  # noqa: PLC0415

    if from_cluster:
        if files:
            raise output.fail("--from-cluster reads the cluster, not files: give one or the other")
        _report_from_cluster(namespace, output_format, kubeconfig, context)
        return
    settings = _settings(config)
    try:
        specs = auditview.expand(files or [auditview.STDIN])
        _hint_stdin(specs, "podium report")
        entries = auditview.load(specs)
    except auditview.InputError as err:
        raise output.fail(str(err)) from err
    if namespace is not None:
        entries = [e for e in entries if e.get("namespace") == namespace]
    namespaces = sorted({ns for ns, _ in report.intents(entries)})
    if not namespaces:
        raise output.fail(
            "no shadow-mode decision in the input: label a namespace "
            f"{settings.namespace_label}={settings.namespace_shadow_value} (or set mode: shadow) "
            "and read podium's logs once its jobs have run"
        )
    api_client, objects_api = _connect(kubeconfig, context)
    with _reading(api_client):
        objects = asyncio.run(report.collect(objects_api, namespaces))
    result = report.build(entries, objects, settings, now=datetime.datetime.now(datetime.UTC))
    if not output_format.tabular:
        sys.stdout.write(_dump(result.as_dict(), output_format))
    else:
        _print_report(result, wide=output_format is output.Format.WIDE)
    if result.split:
        raise typer.Exit(output.FINDINGS)


def _report_from_cluster(
    namespace: str | None,
    output_format: output.Format,
    kubeconfig: Path | None,
    context: str | None,
) -> None:
    """``podium report --from-cluster``: podium's Reports read back (``ops.clusterreports``)."""
    from webhook.core import reports  # noqa: PLC0415
    from webhook.ops import clusterreports  # noqa: PLC0415

    api_client, objects_api = _connect(kubeconfig, context)
    with _reading(api_client):
        try:
            found = asyncio.run(clusterreports.collect(objects_api, namespace))
        except errors.NotFound as err:
            raise output.fail(
                f"the cluster serves no {reports.API_VERSION} Report: install its CRD (the "
                "openreports.io chart does), then podium writes them (docs/reports.md)"
            ) from err
    rows = reports.rows(found)
    if not found:
        where = f"namespace {namespace}" if namespace else "any namespace"
        raise output.fail(
            f"no Report of podium's in {where}: podium writes one per opted-in namespace with "
            f"a job, where the {reports.PLURAL}.openreports.io CRD is installed (docs/reports.md)"
        )
    if not output_format.tabular:
        sys.stdout.write(_dump(clusterreports.as_dict(rows), output_format))
    else:
        plain = not output.is_terminal()
        wide = output_format is output.Format.WIDE
        now = datetime.datetime.now(datetime.UTC)
        failed = sum(1 for r in rows if r.result == "fail")
        verdict = f"{failed} job(s) run in more than one zone"
        table = clusterreports.table(rows, plain=plain, wide=wide, now=now)
        output.render([table, verdict], plain=plain, wide=wide)
    if any(r.result == "fail" for r in rows):
        raise typer.Exit(output.FINDINGS)


def _print_report(result: shadow_report.Report, *, wide: bool) -> None:
    from webhook.ops import report  # noqa: PLC0415

    plain = not output.is_terminal()
    split = len(result.split)
    verdict = f"{split} job(s) split where podium would have kept them in one zone"
    jobs = report.jobs_table(result, plain=plain, wide=wide)
    output.render(
        [jobs, "", report.namespaces_table(result, plain=plain), verdict], plain=plain, wide=wide
    )


app.add_typer(certs_cli.app, name="certs", help="Issue and rotate podium's certificates.")
app.command("probe")(probe_cli.command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
