"""Reaching a cluster from the command line: ``--kubeconfig`` and ``--context`` as kubectl takes
them, and one readable line for whatever goes wrong on the way (no traceback, no client internals).

The server side (``podium serve``) connects through ``webhook.kube``; the commands people run by
hand (``doctor``, ``snapshot``, ``certs``) connect here, because they also pick a context.
"""

from __future__ import annotations

import re
import socket
import ssl
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from webhook.kube import client, errors

#: Seconds to connect, and to wait for an answer, per request of a command.
TIMEOUT = (5.0, 60.0)


class ConnectError(RuntimeError):
    """No cluster to talk to; the message is one line."""


def api_client(kubeconfig: Path | None = None, context: str | None = None) -> k8s.ApiClient:
    """``client.load_client`` for a command (no retries: it says at once when the cluster cannot
    be reached); a configuration that cannot be loaded is a ``ConnectError``."""
    try:
        return client.load_client(kubeconfig, context, serving=False)
    except client.ClientConfigError as err:
        raise ConnectError(str(err)) from err


def describe(err: BaseException, api: Any = None) -> str:
    """One line for a failed call: the apiserver's own message for an HTTP error, where it
    tried and why for a connection that failed."""
    status = getattr(err, "status", None)
    if status and isinstance(err, errors.ApiError):  # podium's client: the message says it all
        return str(err)
    if status:
        return f"the Kubernetes API answered {status}: {_status_reason(err)}"
    host = str(getattr(getattr(api, "configuration", None), "host", "") or "")
    return f"cannot reach the Kubernetes API{' at ' + host if host else ''}: {_why(err)}"


def _why(err: BaseException) -> str:
    """The root of a connection failure in words: refused, timed out, a certificate problem."""
    pending: list[BaseException] = [err]
    seen: set[int] = set()
    while pending:
        cause = pending.pop(0)
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {cause.verify_message}"
        if isinstance(cause, OSError) and cause.strerror:
            return str(cause.strerror)
        if isinstance(cause, TimeoutError | socket.timeout):
            return "timed out"
        pending += [a for a in (getattr(cause, "reason", None), cause.__cause__) if a is not None]
        pending += [a for a in cause.args if isinstance(a, BaseException)]
    text = re.sub(r"<[^>]*>:?\s*", "", str(getattr(err, "reason", None) or err))
    return text.strip() or type(err).__name__


def _status_reason(err: BaseException) -> str:
    import json  # noqa: PLC0415

    body = getattr(err, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    return str(message or getattr(err, "reason", "") or err)
