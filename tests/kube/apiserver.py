"""A fake apiserver on 127.0.0.1 for the real client (webhook/kube/client.py): a threaded
``http.server`` whose routes answer with canned bodies, and the requests it received."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
from kubernetes import client as k8s

Handler = Callable[["FakeHandler", str, dict[str, list[str]], bytes], None]


class FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeApiServer

    def _dispatch(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append(
            (self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        handler = self.server.routes.get((self.command, parts.path))
        if handler is None:
            self.reply(404, status_body(404, "NotFound", "the server could not find the resource"))
            return
        handler(self, parts.path, parse_qs(parts.query), body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

    def reply(self, status: int, doc: Any, *, raw: bytes | None = None) -> None:
        data = raw if raw is not None else orjson.dumps(doc)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream(
        self, lines: list[Any], *, hang: threading.Event | None = None, raw: bytes = b""
    ) -> None:
        """A chunked watch answer: one JSON line per event (then ``raw``), then, after ``hang``
        is set, the end."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for data in [orjson.dumps(doc) + b"\n" for doc in lines] + ([raw] if raw else []):
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        if hang is not None:
            hang.wait(10)
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FakeApiServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FakeHandler)
        self.routes: dict[tuple[str, str], Handler] = {}
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, method: str, path: str, status: int, doc: Any) -> None:
        """Answer every ``method`` on ``path`` with ``status`` and ``doc``."""
        self.routes[(method, path)] = lambda h, _p, _q, _b: h.reply(status, doc)


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``metav1.Status`` as the apiserver sends it with an error (k8s.io/apimachinery
    pkg/apis/meta/v1/types.go)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@contextlib.contextmanager
def running() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def api_client(url: str) -> k8s.ApiClient:
    configuration = k8s.Configuration(host=url)
    configuration.api_key = {"BearerToken": "s3cret"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.retries = False
    return k8s.ApiClient(configuration)


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port
