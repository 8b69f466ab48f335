"""``podium probe``: send a serving podium one dry-run AdmissionReview, as the kube-apiserver
would, and check the answer. The chart's ``helm test`` hook runs it in a pod against podium's
Service, verifying the serving certificate with the CA of podium's TLS Secret and the Service's
DNS name (what the apiserver checks), so a passing test means the apiserver can call podium.

The review creates a plain pod (no owner, no podium label) in ``namespace`` with ``dryRun``
set: podium writes nothing for a dry run (its webhook's sideEffects are NoneOnDryRun). The answer
must be a v1 AdmissionReview for the same uid that allows the pod; a patch, if any, must be a
JSON Patch (a list, base64-encoded).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import http.client
import json
import ssl
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from webhook.core import reviews


class ProbeError(Exception):
    """What went wrong, in words, with what to check next."""


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    uid: str
    seconds: float
    patch_operations: int
    warnings: tuple[str, ...]


def review(namespace: str, uid: str) -> dict[str, Any]:
    """The dry-run AdmissionReview ``probe`` sends."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"podium-probe-{uid[:8]}", "namespace": namespace},
        "spec": {"containers": [{"name": "probe", "image": "podium-probe"}]},
    }
    return reviews.review_for_pod(pod, uid=uid, dry_run=True)


def _context(url: str, ca_file: Path | None) -> ssl.SSLContext | None:
    if not url.startswith("https://"):
        return None
    try:
        return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    except ssl.SSLError as err:
        raise ProbeError(f"cannot use the CA file {ca_file}: it holds no PEM certificate") from err
    except OSError as err:
        words = err.strerror or "cannot read it"
        raise ProbeError(f"cannot use the CA file {ca_file}: {words}") from err


def check(doc: Any, uid: str) -> tuple[int, tuple[str, ...]]:
    """The answer's patch length and warnings, or ``ProbeError`` saying what is wrong with it."""
    if not isinstance(doc, dict):
        raise ProbeError("the answer is not a JSON object")
    if (doc.get("apiVersion"), doc.get("kind")) != (reviews.API_VERSION, reviews.KIND):
        raise ProbeError(
            f"the answer is not an {reviews.API_VERSION} {reviews.KIND} "
            f"(apiVersion {doc.get('apiVersion')!r}, kind {doc.get('kind')!r})"
        )
    response = doc.get("response")
    if not isinstance(response, dict):
        raise ProbeError("the answer has no response")
    if response.get("uid") != uid:
        raise ProbeError(f"the answer is for uid {response.get('uid')!r}, not {uid!r}")
    if response.get("allowed") is not True:
        status = response.get("status")
        message = status.get("message") if isinstance(status, dict) else None
        raise ProbeError(f"podium refused the pod: {message or 'no message'}")
    operations = 0
    if "patch" in response:
        if response.get("patchType") != "JSONPatch":
            raise ProbeError("the answer has a patch without patchType JSONPatch")
        try:
            patch = json.loads(base64.b64decode(str(response["patch"]), validate=True))
        except (binascii.Error, ValueError) as err:
            raise ProbeError(f"the answer's patch is not base64 JSON: {err}") from err
        if not isinstance(patch, list):
            raise ProbeError("the answer's patch is not a JSON Patch (a list)")
        operations = len(patch)
    warnings = response.get("warnings") or []
    if not isinstance(warnings, list):
        raise ProbeError("the answer's warnings are not a list")
    return operations, tuple(str(w) for w in warnings)


class _Connection(http.client.HTTPSConnection):
    """HTTPS to ``host`` whose certificate is checked against ``server_name`` (SNI and the
    hostname check): the Service's name through a port-forward to localhost."""

    def __init__(
        self, host: str, port: int, *, timeout: float, context: ssl.SSLContext, server_name: str
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls = context
        self._server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._server_name)


def _post(
    url: str,
    body: bytes,
    *,
    context: ssl.SSLContext | None,
    server_name: str | None,
    timeout: float,
) -> tuple[int, str, bytes]:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    connection: http.client.HTTPConnection
    if context is not None:
        connection = _Connection(
            host,
            parts.port or 443,
            timeout=timeout,
            context=context,
            server_name=server_name or host,
        )
    else:
        connection = http.client.HTTPConnection(host, parts.port or 80, timeout=timeout)
    try:
        connection.request(
            "POST", parts.path or "/", body=body, headers={"Content-Type": "application/json"}
        )
        reply = connection.getresponse()
        return reply.status, reply.reason, reply.read()
    finally:
        connection.close()


def probe(
    url: str,
    *,
    ca_file: Path | None = None,
    namespace: str = "default",
    timeout: float = 10.0,
    server_name: str | None = None,
) -> Answer:
    """Send the dry-run review to ``url`` (podium's ``/mutate``); the answer, checked.
    ``server_name``: the name the serving certificate must carry, when it is not the URL's host
    (a port-forward)."""
    if not url.startswith(("https://", "http://")):
        raise ProbeError(f"{url} is not an https:// (or http://) URL")
    uid = str(uuid.uuid4())
    body = json.dumps(review(namespace, uid)).encode()
    context = _context(url, ca_file)
    started = time.perf_counter()
    try:
        status, reason, raw = _post(
            url, body, context=context, server_name=server_name, timeout=timeout
        )
    except ssl.SSLCertVerificationError as err:
        raise ProbeError(
            f"podium's serving certificate does not verify: {err.verify_message}. "
            "The apiserver checks it the same way: is the Secret's ca.crt the CA in the "
            "webhook configuration's caBundle, and does the certificate name the Service?"
        ) from err
    except TimeoutError as err:
        raise ProbeError(f"podium at {url} did not answer within {timeout:g} s") from err
    except (OSError, http.client.HTTPException) as err:
        words = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ProbeError(
            f"cannot reach podium at {url}: {words or type(err).__name__}. Are its pods ready "
            "(kubectl get pods -l app.kubernetes.io/name=<release's name>)?"
        ) from err
    seconds = time.perf_counter() - started
    if status != 200:
        raise ProbeError(f"podium answered HTTP {status} {reason}")
    try:
        doc = json.loads(raw)
    except ValueError as err:
        raise ProbeError(f"the answer is not JSON: {raw[:80]!r}") from err
    operations, warnings = check(doc, uid)
    return Answer(uid=uid, seconds=seconds, patch_operations=operations, warnings=warnings)


def command(
    url: Annotated[
        str, typer.Argument(help="podium's /mutate, e.g. https://podium.podium-system.svc/mutate")
    ],
    ca_file: Annotated[
        Path | None,
        typer.Option(help="The CA that signed podium's serving certificate (the Secret's ca.crt)."),
    ] = None,
    pod_namespace: Annotated[
        str,
        typer.Option(help="The namespace of the reviewed pod (the hook: podium's own)."),
    ] = "default",
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 10.0,
    server_name: Annotated[
        str | None,
        typer.Option(
            help="The name the certificate must carry when it is not the URL's host, e.g. "
            "podium.podium-system.svc through a port-forward to localhost."
        ),
    ] = None,
) -> None:
    """Send podium a dry-run AdmissionReview and check its answer (the chart's helm test)."""
    try:
        answer = probe(
            url, ca_file=ca_file, namespace=pod_namespace, timeout=timeout, server_name=server_name
        )
    except ProbeError as err:
        typer.echo(f"podium probe: {err}", err=True)
        raise typer.Exit(1) from err
    patched = (
        f"{answer.patch_operations} patch operations" if answer.patch_operations else "no patch"
    )
    typer.echo(
        f"podium at {url} allowed the dry-run review {answer.uid} "
        f"in {answer.seconds * 1000:.0f} ms ({patched})"
    )
    for warning in answer.warnings:
        typer.echo(f"  warning: {warning}")
