"""``podium serve``'s certificate options: where the serving pair comes from.

``--certs files`` (what ``--cert-file``/``--key-file`` name: a Secret mounted by the chart, filled
by cert-manager or by ``podium certs``) or ``--certs self`` (the cluster keeps it:
`webhook.serve.selfcerts`, the chart's default). Without ``--certs``, files when
``--cert-file`` is given.
"""

from __future__ import annotations

import datetime
import enum
from pathlib import Path
from typing import Annotated

import typer

from webhook.certs import selfmanaged
from webhook.serve import selfcerts


class CertSource(enum.StrEnum):
    FILES = "files"
    SELF = "self"


Certs = Annotated[
    CertSource | None,
    typer.Option(
        "--certs",
        help="Serving certificate: files (--cert-file/--key-file) or self (kept in the cluster "
        "by the leader: a Secret and the webhook's caBundle).",
    ),
]
CertsSecret = Annotated[
    str,
    typer.Option(
        "--certs-secret", metavar="NAME", help="--certs self: the Secret (own namespace)."
    ),
]
WebhookConfiguration = Annotated[
    str,
    typer.Option(
        "--webhook-configuration",
        metavar="NAME",
        help="--certs self: the MutatingWebhookConfiguration whose caBundle podium keeps.",
    ),
]
Service = Annotated[
    str,
    typer.Option(
        "--service", metavar="NAME", help="--certs self: the Service the apiserver calls."
    ),
]
San = Annotated[
    list[str] | None,
    typer.Option(
        "--san", metavar="NAME", help="--certs self: another name or IP for the certificate."
    ),
]
CertsDir = Annotated[
    Path | None,
    typer.Option(
        "--certs-dir",
        metavar="DIR",
        help="--certs self: where the served pair is written (default: a private temp dir).",
    ),
]
CertsInterval = Annotated[
    float,
    typer.Option(
        "--certs-interval",
        metavar="SECONDS",
        min=0.1,
        help="--certs self: how often every replica reads the Secret (and the leader acts).",
    ),
]
CertsOverlap = Annotated[
    float,
    typer.Option(
        "--certs-overlap",
        metavar="SECONDS",
        min=0.0,
        help="--certs self: how long a new CA's certificate is out before the old CA is dropped.",
    ),
]

DEFAULT_OVERLAP = selfmanaged.DEFAULT_SELF_OVERLAP.total_seconds()


def options(
    *,
    namespace: str,
    secret: str,
    webhook_configuration: str,
    service: str,
    sans: list[str] | None,
    directory: Path | None,
    interval: float,
    overlap: float,
) -> selfcerts.Options:
    """The keeper's options; a bad ``--san`` raises `certs.InvalidSANError`."""
    result = selfcerts.Options(
        namespace=namespace,
        secret=secret,
        webhook_configuration=webhook_configuration,
        service=service,
        sans=tuple(sans or ()),
        directory=directory,
        interval=interval,
        min_overlap=datetime.timedelta(seconds=overlap),
    )
    result.policy()  # every name checked now
    return result
