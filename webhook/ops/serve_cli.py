"""``podium serve``: the admission webhook's server, with its TLS and certificate options."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from webhook.ops import output, serve_certs
from webhook.ops.cli_options import (
    ConfigOption,
    ContextOption,
    KubeconfigOption,
    load_settings,
)


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
    self_certs = _self_certs(certs, cert_file, key_file, no_tls=no_tls)
    settings = dataclasses.replace(load_settings(config), own_namespace=namespace)
    if not no_tls and not self_certs and cert_file is not None and key_file is not None:
        _check_pair(cert_file, key_file)
    keeping = None
    if self_certs:
        with _naming("--san"):
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
    # Imported here: the web server and the Kubernetes client take a while to load, and the
    # other commands need neither.
    from webhook.serve import server  # noqa: PLC0415

    with _serving_errors():
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


def _self_certs(
    certs: serve_certs.CertSource | None,
    cert_file: Path | None,
    key_file: Path | None,
    *,
    no_tls: bool,
) -> bool:
    """Whether the cluster keeps the serving certificate (``--certs self``, with TLS); refuses a
    pair given beside it, and TLS with neither a pair nor ``--certs self``."""
    self_certs = certs is serve_certs.CertSource.SELF and not no_tls
    if self_certs and (cert_file is not None or key_file is not None):
        raise output.fail("--certs self makes its own certificate: drop --cert-file/--key-file")
    if not no_tls and not self_certs and (cert_file is None or key_file is None):
        raise output.fail(
            "--cert-file and --key-file are required (or --certs self to have the cluster keep "
            "the certificate, or --no-tls for local use)"
        )
    return self_certs


@contextlib.contextmanager
def _naming(flag: str) -> Iterator[None]:
    """A bad value (``ValueError``) inside is one line that names ``flag``."""
    try:
        yield
    except ValueError as err:
        raise output.fail(f"{flag}: {err}") from err


@contextlib.contextmanager
def _serving_errors() -> Iterator[None]:
    """Around the server's run: what stops it from starting (the cluster's configuration, TLS,
    a file or an address) is one line, not a traceback."""
    from webhook.kube import client  # noqa: PLC0415

    try:
        yield
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
