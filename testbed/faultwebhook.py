"""A validating admission webhook on 127.0.0.1 that fails chosen writes, to put faults between
podium and the apiserver at the level of one kind of request.

``faultproxy`` works on TCP and cannot tell one request from another (TLS passes through); this
one is called by the apiserver for the requests its configuration matches (e.g. the UPDATE that
takes podium's gate off a pod) and answers, while ``failing``, a denial carrying ``code`` (the
apiserver hands that status to the client: 500, 429, ...) or, with ``code`` 0, no answer within
the configuration's ``timeoutSeconds`` (the apiserver then fails the request: failurePolicy Fail).
The first ``allow_first`` matched requests are let through, so a test can fail a gang's release
half-way.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from testbed.controlplane import ApiError, LocalCluster

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


class FaultWebhook:
    def __init__(self, cluster: LocalCluster, work_dir: Path) -> None:
        self.cluster = cluster
        self.failing = False
        self.code = 500
        self.allow_first = 0
        self.timeout_seconds = 2
        self.seen = 0
        self.denied = 0
        self._lock = threading.Lock()
        cert, key = cluster.issue_certificate(
            "faultwebhook",
            common_name="faultwebhook",
            ip_addresses=["127.0.0.1"],
            server=True,
            directory=work_dir,
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]

    def answer(self, review: dict[str, Any]) -> dict[str, Any] | None:
        """The AdmissionReview to send back, or None to send nothing (a timeout)."""
        with self._lock:
            self.seen += 1
            fail = self.failing and self.seen > self.allow_first
            self.denied += fail
        response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": not fail}
        if fail and not self.code:
            return None
        if fail:
            response["status"] = {"code": self.code, "message": f"fault injected: {self.code}"}
        review_kind = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
        return {**review_kind, "response": response}

    @contextlib.contextmanager
    def registered(self, name: str, webhook: dict[str, Any]) -> Iterator[None]:
        """Serve, and register ``webhook`` (rules, selectors, matchConditions) as the only hook of
        ValidatingWebhookConfiguration ``name``, pointed here; both undone afterwards."""
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        hook = {
            "name": f"{name}.faults.podium.dev",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": self.timeout_seconds,
            "clientConfig": {
                "url": f"https://127.0.0.1:{self.port}/validate",
                "caBundle": self.cluster.ca_bundle,
            },
            **webhook,
        }
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [hook],
        }
        self.cluster.request("POST", CONFIGURATIONS, config)
        try:
            yield
        finally:
            with contextlib.suppress(ApiError):
                self.cluster.request("DELETE", f"{CONFIGURATIONS}/{name}")
            self._server.shutdown()
            self._server.server_close()


def _handler(hook: FaultWebhook) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["content-length"])))
            answer = hook.answer(review)
            if answer is None:  # past the apiserver's timeoutSeconds, then close
                time.sleep(hook.timeout_seconds + 1)
                return
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    return Handler
