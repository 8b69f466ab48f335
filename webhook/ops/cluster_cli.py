"""The commands about a live cluster's training jobs: ``podium doctor`` (what is wrong with them),
``podium release`` (ask podium's releaser to release a held one now) and ``podium report`` (what
enforcing podium would have saved, from its shadow-mode logs or its Reports in the cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, RenderableType
from rich.markup import escape

from webhook.core.audit import AuditEntry
from webhook.core.settings import Settings
from webhook.kube import errors
from webhook.ops import auditview, cli_options, output
from webhook.ops.cli_options import (
    AuditFiles,
    ConfigOption,
    ContextOption,
    KubeconfigOption,
    OnlyNamespace,
    dump,
    hint_stdin,
    load_settings,
)

if TYPE_CHECKING:
    from webhook.core.adapters.base import Kind
    from webhook.ops import doctor as doctor_checks
    from webhook.ops import report as shadow_report


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
    settings = load_settings(config)
    quiet = not output_format.tabular or not Console(stderr=True).is_terminal
    result = _diagnose_live(
        settings, namespace=namespace, kubeconfig=kubeconfig, context=context, quiet=quiet
    )
    if not output_format.tabular:
        sys.stdout.write(dump(result.as_dict(), output_format))
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

    api_client, objects_api = cli_options.connect_cluster(kubeconfig, context)
    notes: list[str] = []
    with Progress(console=Console(stderr=True), transient=True, disable=quiet) as progress:
        reading = progress.add_task("listing the cluster", total=len(checks.kinds_to_read()))
        with cli_options.reading(api_client):
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
    kind, name = _job_kind(job)
    api_client, objects = cli_options.connect_cluster(kubeconfig, context)
    if namespace is None:
        namespace = _context_namespace(kubeconfig, context)
    try:
        who = asyncio.run(_ask_release(objects, kind, namespace, name, by=by, unpinned=unpinned))
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


def _job_kind(job: str) -> tuple[Kind, str]:
    """``KIND/NAME`` as the kind of training job (any case) and the name; else an error that
    lists the kinds."""
    from webhook.core import adapters  # noqa: PLC0415

    kind_text, _, name = job.partition("/")
    kinds = [k for k in adapters.KINDS if k.kind.lower() == kind_text.lower() and k.namespaced]
    if not name or not kinds:
        known = ", ".join(sorted({k.kind.lower() for k in adapters.KINDS}))
        raise output.fail(f"{job!r} is not KIND/NAME of a training job (kinds: {known})")
    return kinds[0], name


async def _ask_release(
    objects: Any, kind: Kind, namespace: str, name: str, *, by: str | None, unpinned: bool
) -> str:
    """Annotate the job for podium's releaser (podium.dev/release, podium.dev/released-by) and
    return who asked: ``by``, else the user the cluster says the kubeconfig is."""
    from webhook.core import labels  # noqa: PLC0415

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
    settings = load_settings(config)
    entries, namespaces = _shadow_decisions(files, namespace, settings)
    api_client, objects_api = cli_options.connect_cluster(kubeconfig, context)
    with cli_options.reading(api_client):
        objects = asyncio.run(report.collect(objects_api, namespaces))
    result = report.build(entries, objects, settings, now=datetime.datetime.now(datetime.UTC))
    if not output_format.tabular:
        sys.stdout.write(dump(result.as_dict(), output_format))
    else:
        _print_report(result, wide=output_format is output.Format.WIDE)
    if result.split:
        raise typer.Exit(output.FINDINGS)


def _shadow_decisions(
    files: list[str] | None, namespace: str | None, settings: Settings
) -> tuple[list[AuditEntry], list[str]]:
    """podium's log records (of ``namespace``, or all) from ``files`` or stdin, and the
    namespaces of their shadow-mode decisions; none is an error that says how to get some."""
    from webhook.ops import report  # noqa: PLC0415

    try:
        specs = auditview.expand(files or [auditview.STDIN])
        hint_stdin(specs, "podium report")
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
    return entries, namespaces


def _report_from_cluster(
    namespace: str | None,
    output_format: output.Format,
    kubeconfig: Path | None,
    context: str | None,
) -> None:
    """``podium report --from-cluster``: podium's Reports read back (``ops.clusterreports``)."""
    from webhook.core import reports  # noqa: PLC0415
    from webhook.ops import clusterreports  # noqa: PLC0415

    api_client, objects_api = cli_options.connect_cluster(kubeconfig, context)
    with cli_options.reading(api_client):
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
        sys.stdout.write(dump(clusterreports.as_dict(rows), output_format))
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
