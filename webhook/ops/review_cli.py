"""``podium review`` and ``podium snapshot``: decide one admission offline against a snapshot of
the cluster, and capture that snapshot from a live cluster."""

from __future__ import annotations

import asyncio
import enum
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from webhook.core.objects import parse_time
from webhook.ops import cli_options, offline, output
from webhook.ops.cli_options import (
    ConfigOption,
    ContextOption,
    KubeconfigOption,
    dump,
    load_settings,
)

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
    settings = load_settings(config)
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
    sys.stdout.write(dump(result.as_dict(), output_format))


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


class SnapshotFormat(enum.StrEnum):
    JSON = "json"
    YAML = "yaml"


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
    settings = load_settings(config)
    from rich.progress import Progress  # noqa: PLC0415

    from webhook.ops import snapshot as capture  # noqa: PLC0415

    api_client, objects_api = cli_options.connect_cluster(kubeconfig, context)
    err_console = Console(stderr=True)
    try:
        with (
            cli_options.reading(api_client),
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
        sys.stdout.write(dump(doc, output.Format.YAML))
    else:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
    output.note(f"captured {capture.counts(objects)}")
