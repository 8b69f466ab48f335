"""The HTTP edge: the app that answers the apiserver, and ``run`` that wires podium up.

``/mutate`` is plain ASGI in front of a FastAPI app that serves the rest (``Webhook``). The app
maps transport problems to HTTP codes and leaves every admission decision to the ``Admitter``::

    POST /mutate   200 AdmissionReview answer (also when podium fails open)
                   400 not an AdmissionReview (the reason is in the body)
                   413 body over 3 MiB (the apiserver's own cap), by header or by bytes read
                   405 any other method
                   415 content type not application/json
                   500 only when even the request uid cannot be read after an internal error
    GET  /healthz  200 while the process serves
    GET  /readyz   200 once the watch cache has synced, else 503 listing what it waits for
    GET  /metrics  Prometheus text

The body is read raw and answered with orjson bytes: no pydantic models on the hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import logging.config
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Response
from starlette.types import Receive, Scope, Send

from webhook.core import adapters, audit, labels, reconcile, reviews
from webhook.core.settings import Settings, ZoneChooser
from webhook.core.view import ClusterView
from webhook.kube import cache, client, errors, leader, protocols
from webhook.serve import (
    admission,
    discovery,
    events,
    guard,
    owners,
    reconciler,
    releaser,
    reports,
    selfcerts,
    tls,
)
from webhook.serve.audit import BackgroundSink, FanOut, FileSink, Sink, StreamSink
from webhook.serve.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("podium.server")

#: The apiserver never sends more (its own request size limit); neither will we read more.
MAX_BODY = 3 * 1024 * 1024
JSON = "application/json"
MUTATE_PATH = "/mutate"
_JSON_HEADER = (b"content-type", JSON.encode())

Lifespan = Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]


class _Refused(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def _json(status: int, body: Any) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=JSON)


def _is_json(content_type: str | None) -> bool:
    """``application/json``, with parameters such as ``charset`` allowed."""
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == JSON


def _header(scope: Scope, name: bytes) -> str | None:
    """A request header (ASGI gives names lowercased, values as latin-1 bytes)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _declared_size(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    if value is None:
        return None
    try:
        size = int(value)
    except ValueError:
        raise _Refused(400, "bad-content-length", "Content-Length is not a number") from None
    if size < 0:
        raise _Refused(400, "bad-content-length", "Content-Length is negative")
    return size


def _too_large(size: int, limit: int) -> _Refused:
    return _Refused(413, "too-large", f"request body of {size} bytes or more exceeds {limit} bytes")


class _Disconnected(Exception):
    """The client went away before the whole body was read."""


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The body, read chunk by chunk and abandoned as soon as it passes ``limit``."""
    size = _declared_size(scope)
    if size is not None and size > limit:
        raise _too_large(size, limit)
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        body += message.get("body", b"")
        if len(body) > limit:
            raise _too_large(len(body), limit)
        if not message.get("more_body", False):
            return bytes(body)


class Webhook:
    """The ASGI app podium serves: ``POST /mutate`` answered as plain ASGI, everything else
    (``/healthz``, ``/readyz``, ``/metrics``, the lifespan) by the FastAPI app ``api``.

    ``/mutate`` is on the path of every pod creation. FastAPI's middleware stack, routing and
    request objects cost about 0.13 ms a request there: as much as bare uvicorn with TLS, and
    more than podium's decision for a later pod (docs/benchmarks/README.md)."""

    def __init__(
        self, api: FastAPI, *, admitter: admission.Admitter, meter: Metrics, max_body: int
    ) -> None:
        self.api = api
        self.admitter = admitter
        self.meter = meter
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != MUTATE_PATH:
            await self.api(scope, receive, send)
            return
        headers = [_JSON_HEADER]
        if scope["method"] == "POST":
            status, body = await self.mutate(scope, receive)
        else:
            status, body = 405, orjson.dumps({"error": f"{MUTATE_PATH} answers only POST"})
            headers.append((b"allow", b"POST"))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def mutate(self, scope: Scope, receive: Receive) -> tuple[int, bytes]:
        body = b""
        try:
            if not _is_json(_header(scope, b"content-type")):
                raise _Refused(415, "unsupported-media-type", f"content type must be {JSON}")
            body = await _read_body(scope, receive, self.max_body)
            answer = await self.admitter.admit(body)
            if answer.status != 200:
                self.meter.rejected.labels(reason="malformed").inc()
            return answer.status, orjson.dumps(answer.body)
        except _Refused as refused:
            self.meter.rejected.labels(reason=refused.reason).inc()
            return refused.status, orjson.dumps({"error": str(refused)})
        except _Disconnected:
            self.meter.rejected.labels(reason="client-disconnected").inc()
            return 400, orjson.dumps({"error": "the client went away before the body was read"})
        except Exception as err:  # the server must answer, whatever broke
            return _internal_error(body, err, self.meter)


def create_app(
    *,
    admitter: admission.Admitter,
    ready: Callable[[], bool],
    pending: Callable[[], Sequence[str]] = lambda: (),
    metrics: Metrics | None = None,
    lifespan: Lifespan | None = None,
    max_body: int = MAX_BODY,
) -> Webhook:
    """The webhook app. Admissions are counted when the admitter was built with
    ``observe=metrics.observe``; the app itself counts refused requests and the cache gauge."""
    meter = metrics if metrics is not None else Metrics()
    meter.track_ready(ready)
    api = FastAPI(
        title="podium", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )

    @api.get("/healthz")
    async def healthz() -> Response:
        return _json(200, {"status": "ok"})

    @api.get("/readyz")
    async def readyz() -> Response:
        if ready():
            return _json(200, {"status": "ready"})
        return _json(503, {"status": "not ready", "waitingFor": list(pending())})

    @api.get("/metrics")
    async def metrics_endpoint() -> Response:
        return Response(meter.render(), media_type=CONTENT_TYPE)

    return Webhook(api, admitter=admitter, meter=meter, max_body=max_body)


def _internal_error(body: bytes, err: Exception, meter: Metrics) -> tuple[int, bytes]:
    """Fail open when the review can be answered at all; a bare 500 only when it cannot."""
    uid = reviews.request_uid(body)
    log.exception("unexpected error answering admission %r", uid)
    if not uid:
        meter.rejected.labels(reason="internal-error").inc()
        return 500, orjson.dumps({"error": f"internal error: {type(err).__name__}"})
    meter.fail_open.inc()
    meter.admissions.labels(outcome="fail-open", reason="server-error").inc()
    why = f"internal error: {type(err).__name__}"
    answer = reviews.response(
        uid=uid,
        warnings=[admission.FAIL_OPEN_WARNING.format(why=why)],
        audit_annotations={"outcome": "fail-open", "reason": why},
    )
    return 200, orjson.dumps(answer)


# -- running it ---------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per log line on stderr; stdout carries only audit entries."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "stream": "ext://sys.stderr",
        }
    },
    "loggers": {
        "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
    },
    "root": {"handlers": ["stderr"], "level": "INFO"},
}


def server_config(
    app: Webhook,
    *,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None,
    log_config: dict[str, Any] | None = LOG_CONFIG,
) -> uvicorn.Config:
    """uvicorn settings for the webhook: uvloop and httptools when installed ("auto"), TLS from
    our own context (so the reloader can swap its pair), no access log, long keep-alive (the
    apiserver reuses connections; closing them first invites a race on a request in flight), and
    no X-Forwarded-* rewriting: the apiserver calls podium directly, and a forwarded header
    from anyone else must not change what podium logs as the caller."""
    options: dict[str, Any] = {}
    if ssl_context is not None:
        options["ssl_context_factory"] = lambda _config, _default: ssl_context
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="auto",
        http="auto",
        lifespan="on",
        log_config=log_config,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=120,
        timeout_graceful_shutdown=10,
        **options,
    )


def serving_lifespan(
    watch_cache: cache.WatchCache | None,
    reloader: tls.CertReloader | None,
    recorder: events.EventRecorder | None = None,
    background: Sequence[Callable[[asyncio.Event], Coroutine[Any, Any, None]]] = (),
) -> Lifespan:
    """Start the watch cache, the certificate reloader, the event poster and ``background``
    loops (leader election, reconciler) on the serving loop; stop them all."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stop = asyncio.Event()
        reloading = asyncio.create_task(reloader.run(stop)) if reloader is not None else None
        posting = asyncio.create_task(recorder.run(stop)) if recorder is not None else None
        loops = [asyncio.create_task(loop(stop)) for loop in background]
        freezing = None
        if watch_cache is not None:
            watch_cache.start()
            freezing = asyncio.create_task(_freeze_when_synced(watch_cache))
        try:
            yield
        finally:
            stop.set()
            if freezing is not None:
                freezing.cancel()
            if reloading is not None:
                await reloading
            if posting is not None:
                await posting
            await asyncio.gather(*loops, return_exceptions=True)
            if watch_cache is not None:
                await asyncio.to_thread(watch_cache.stop)

    return lifespan


def freeze_heap() -> None:
    """Move everything alive now out of the cyclic collector's way. After the initial sync that is
    mostly the cluster view, which the collector would otherwise re-walk on every full pass: at
    1,000 nodes that was the p99 of an admission (docs/benchmarks/README.md)."""
    gc.collect()
    gc.freeze()


async def _freeze_when_synced(watch_cache: cache.WatchCache) -> None:
    await watch_cache.ready.wait()
    freeze_heap()


async def who_am_i(api: protocols.Api) -> str:
    """The user podium's API calls come as, asked of the apiserver (a SelfSubjectReview, which
    every authenticated user may create); empty, with a warning, when it cannot say. The UPDATE
    guard lets this user, and nobody else, remove a ``podium.dev/job`` label."""
    try:
        review = await api.create(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    except errors.ApiError as err:
        log.warning(
            "cannot tell which user podium is (%s): copied %s labels will not be removed; set "
            "own-user in the settings",
            err,
            labels.JOB,
        )
        return ""
    user = ((review.get("status") or {}).get("userInfo") or {}).get("username")
    return str(user or "")


#: A loop that runs beside the admissions until the event is set.
Loop = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


def run(
    *,
    host: str,
    port: int,
    cert_file: Path | None,
    key_file: Path | None,
    kubeconfig: Path | None,
    settings: Settings,
    audit_file: Path | None,
    tls_min_version: tls.TLSVersionName = "1.2",
    client_ca_file: Path | None = None,
    use_tls: bool = True,
    context: str | None = None,
    self_certs: selfcerts.Options | None = None,
) -> None:
    """Serve admissions until SIGTERM/SIGINT. Raises ``client.ClientConfigError``, ``OSError``
    or ``ssl.SSLError`` when it cannot start. ``context``: the kubeconfig context to use
    instead of its current one. ``self_certs``: the cluster keeps the serving certificate
    (`webhook.serve.selfcerts`); ``cert_file`` and ``key_file`` are then not read."""
    api_client = client.load_client(
        kubeconfig, context, watches=len(cache.watched(settings.writable_namespaces))
    )
    keeper = _cert_keeper(api_client, self_certs) if self_certs is not None else None
    if keeper is not None:
        cert_file, key_file = keeper.cert_file, keeper.key_file
    ssl_context, reloader = _tls(
        use_tls=use_tls,
        cert_file=cert_file,
        key_file=key_file,
        tls_min_version=tls_min_version,
        client_ca_file=client_ca_file,
    )
    if keeper is not None:
        keeper.reloader = reloader
    logging.config.dictConfig(LOG_CONFIG)  # only now: until here, errors go to the CLI
    if not settings.own_user:
        user = asyncio.run(who_am_i(client.KubeObjects(api_client)))
        settings = dataclasses.replace(settings, own_user=user)
    parts = _Parts.start(api_client, settings, audit_file=audit_file)
    if reloader is not None:
        parts.meter.track_certificate(reloader.not_after)
    support, probing = _scheduler_support(api_client, settings)
    admitter = _admitter(parts, support)
    crd_guard = _crd_guard(parts)
    background = (*_leader_loops(parts, keeper), *probing, crd_guard.run)
    watch_cache = parts.watch_cache
    ready, pending = _readiness(watch_cache, keeper)
    app = create_app(
        admitter=admitter,
        ready=ready,
        pending=pending,
        metrics=parts.meter,
        lifespan=serving_lifespan(watch_cache, reloader, parts.recorder, background=background),
    )
    _log_start(host, port, https=ssl_context is not None, settings=settings)
    try:
        uvicorn.Server(server_config(app, host=host, port=port, ssl_context=ssl_context)).run()
    finally:
        parts.trail.close()  # the admissions have stopped: write what is still queued


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class _Parts:
    """What the server's pieces share: the API client, the settings, the cluster view and the
    watch cache that keeps it current, the audit trail, the metrics and the event recorder."""

    api_client: Any
    settings: Settings
    cluster_view: ClusterView
    watch_cache: cache.WatchCache
    trail: BackgroundSink
    meter: Metrics
    recorder: events.EventRecorder

    @classmethod
    def start(cls, api_client: Any, settings: Settings, *, audit_file: Path | None) -> _Parts:
        cluster_view = ClusterView(zone_label=settings.zone_label, kept=adapters.KEPT)
        meter = Metrics()
        return cls(
            api_client=api_client,
            settings=settings,
            cluster_view=cluster_view,
            watch_cache=cache.WatchCache(
                cluster_view,
                client.KubeLister(api_client),
                resources=cache.watched(settings.writable_namespaces),
            ),
            trail=_audit_trail(audit_file, meter),
            meter=meter,
            recorder=_event_recorder(api_client, meter),
        )

    def view(self) -> ClusterView:
        return self.cluster_view

    def observe(self, entry: audit.AuditEntry) -> None:
        """An admission's audit entry feeds the metrics and the events."""
        self.meter.observe(entry)
        self.recorder.observe(entry)


def _admitter(parts: _Parts, support: discovery.SchedulerSupport) -> admission.Admitter:
    admission_api = client.KubeObjects(parts.api_client, timeout=parts.settings.time_budget_seconds)
    return admission.Admitter(
        view=parts.view,
        api=admission_api,
        settings=parts.settings,
        sink=parts.trail,
        observe=parts.observe,
        scheduler=support,
        ready=parts.watch_cache.is_ready,
        read_owners=owners.OwnerReader(parts.watch_cache, admission_api),
    )


def _crd_guard(parts: _Parts) -> guard.CiliumGuard:
    """The installed CiliumNetworkPolicy CRD: at start and on every change, whether podium
    writes its policy (audit, log, podium_cilium_policy_withheld); the engine reads it from the
    view."""
    crd_guard = guard.CiliumGuard(
        view=parts.view, ready=parts.watch_cache.is_ready, settings=parts.settings, sink=parts.trail
    )
    parts.meter.track_withheld(lambda: crd_guard.withholding)
    return crd_guard


def _tls(
    *,
    use_tls: bool,
    cert_file: Path | None,
    key_file: Path | None,
    tls_min_version: tls.TLSVersionName,
    client_ca_file: Path | None,
) -> tuple[ssl.SSLContext | None, tls.CertReloader | None]:
    """The server's TLS context and what reloads its certificate; neither for plain HTTP."""
    if not use_tls:
        return None, None
    if cert_file is None or key_file is None:
        raise ValueError("TLS needs a certificate and a key file")
    ssl_context = tls.server_context(
        cert_file, key_file, min_version=tls_min_version, client_ca_file=client_ca_file
    )
    return ssl_context, tls.CertReloader(ssl_context, cert_file, key_file)


def _audit_trail(audit_file: Path | None, meter: Metrics) -> BackgroundSink:
    """Audit lines to stdout (and the audit file), written by a thread, drops counted."""
    sinks: list[Sink] = [StreamSink()]
    if audit_file is not None:
        sinks.append(FileSink(audit_file))
    return BackgroundSink(FanOut(sinks), on_drop=meter.audit_dropped.inc)


def _event_recorder(api_client: Any, meter: Metrics) -> events.EventRecorder:
    return events.EventRecorder(
        client.KubeObjects(api_client, timeout=events.POST_TIMEOUT).create,
        instance=os.environ.get("POD_NAME") or socket.gethostname(),
        on_drop=lambda reason: meter.events_dropped.labels(reason=reason).inc(),
    )


def _scheduler_support(
    api_client: Any, settings: Settings
) -> tuple[discovery.SchedulerSupport, tuple[Loop, ...]]:
    """What the scheduler supports and the loop that keeps it current; with ``zone-chooser:
    auto`` only, asked once now (the other modes never ask)."""
    prober = client.KubeObjects(api_client)
    support = discovery.SchedulerSupport(
        lambda manifest: prober.create(manifest, dry_run=True),
        namespace=settings.own_namespace,
        zone_label=settings.zone_label,
    )
    if settings.zone_chooser is not ZoneChooser.AUTO:
        return support, ()
    asyncio.run(support.check())  # the answer is known before the first admission
    return support, (support.run,)


def _cert_keeper(api_client: Any, options: selfcerts.Options) -> selfcerts.CertKeeper:
    """The keeper of a self-managed certificate, its files already holding the Secret's pair
    (or, when there is none yet or it cannot be read, a throw-away one until there is)."""
    keeper = selfcerts.CertKeeper(client.KubeObjects(api_client), options)
    try:
        secret = asyncio.run(keeper.read_secret())
    except errors.ApiError as err:
        log.warning("cannot read the serving certificate's Secret yet: %s", err)
        secret = None
    keeper.prepare(secret)
    return keeper


def _readiness(
    watch_cache: cache.WatchCache, keeper: selfcerts.CertKeeper | None
) -> tuple[Callable[[], bool], Callable[[], Sequence[str]]]:
    """Ready once the cache has synced and, when the cluster keeps the certificate, the
    Secret's certificate is served."""
    if keeper is None:
        return watch_cache.is_ready, watch_cache.pending

    def ready() -> bool:
        return watch_cache.is_ready() and keeper.ready()

    def pending() -> Sequence[str]:
        return (*watch_cache.pending(), *keeper.pending())

    return ready, pending


def _leader_loops(
    parts: _Parts, certificates: selfcerts.CertKeeper | None = None
) -> tuple[Loop, ...]:
    """Leader election, and the reconciler, the releaser and the reporter (podium's Reports)
    that act only while this replica leads (and the certificate keeper, whose leader's part
    does too)."""
    objects = client.KubeObjects(parts.api_client)
    settings = parts.settings
    elector = leader.LeaderElector(
        objects, namespace=settings.own_namespace, identity=leader.default_identity()
    )
    keeper = reconciler.Reconciler(
        view=parts.view,
        ready=parts.watch_cache.is_ready,
        api=objects,
        settings=settings,
        sink=parts.trail,
        tuning=reconcile.Tuning.from_settings(settings),
        is_leader=lambda: elector.is_leader,
        observe=parts.recorder.observe,
        meter=parts.meter,
    )
    # In every mode, not only ``hold``: a replica started with another zone chooser still
    # releases the gangs held before the switch (a pass with nothing held costs nothing).
    releasing = releaser.Releaser(
        view=parts.view,
        ready=parts.watch_cache.is_ready,
        api=objects,
        settings=settings,
        sink=parts.trail,
        is_leader=lambda: elector.is_leader,
        observe=parts.recorder.observe,
        meter=parts.meter,
    )
    parts.watch_cache.listeners.append(releasing.notice)
    reporter = reports.Reporter(
        view=parts.view,
        ready=parts.watch_cache.is_ready,
        api=objects,
        settings=settings,
        sink=parts.trail,
        is_leader=lambda: elector.is_leader,
        meter=parts.meter,
    )
    if certificates is None:
        return elector.run, keeper.run, releasing.run, reporter.run
    certificates.is_leader = lambda: elector.is_leader
    return elector.run, keeper.run, releasing.run, reporter.run, certificates.run


def _log_start(host: str, port: int, *, https: bool, settings: Settings) -> None:
    log.info(
        "podium serving on %s://%s:%d (own namespace %s, policy mode %s, as user %s)",
        "https" if https else "http",
        host,
        port,
        settings.own_namespace,
        settings.policy_mode,
        settings.own_user or "?",
    )
