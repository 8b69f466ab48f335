# ruff: noqa: PLC0415 - kopf and pyinstrument are bench-only: imported only where used
"""The three servers the load phases drive, each started as
``python -m bench.throughput.servers KIND …`` in its own process pinned to one core (the load
generator gets the other), and the no-op webhook the burst (``bench.latency``) registers beside
podium:

* ``podium`` — ``server.create_app`` with an ``Admitter`` over a synthetic view
  (``workload.cluster``) and ``twins.InMemoryApi`` (objects it creates are fed back into the
  view, as the watch cache would), served by ``server.server_config`` over TLS: exactly what
  ``podium serve`` runs, without a cluster. Audit lines go to /dev/null through ``StreamSink``
  behind the same ``BackgroundSink`` writer thread.
* ``limit`` — a bare ASGI app on the same uvicorn config (TLS, uvloop, httptools) that reads the
  body and answers a fixed AdmissionReview with a JSON Patch: what the stack alone costs.
* ``kopf`` — the same mutation (zone node affinity, the job label, the annotations) as a kopf
  ``@kopf.on.mutate`` handler, served by kopf's own ``WebhookServer`` (aiohttp, TLS) through
  ``kopf._core.engines.admission.serve_admission_request`` as the operator wires it (no cluster:
  registry, insights and memories are built here), on uvloop as ``kopf run`` uses it.
* ``noop`` — the same bare ASGI app and uvicorn config, answering each review ``allowed`` with no
  patch and the review's own uid (the apiserver refuses an answer for another uid): the least
  any webhook does, and so the floor any webhook pays in the burst.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import functools
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
import uvicorn

from bench.throughput import workload
from webhook.core import adapters, engine, labels, reviews
from webhook.core.settings import Settings, ZoneChooser
from webhook.core.view import ClusterView
from webhook.kube import cache, twins
from webhook.serve import admission, audit, owners, server, tls
from webhook.serve.metrics import Metrics

ZONE = "zone-b"


def _pin(core: int | None) -> None:
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})


def podium_app(nodes: int) -> server.Webhook:
    # The pin, named: a first pod is decided at admission and its record and policy created, the
    # path the load tables time ("first pod … record + policy created"). Under the hold
    # (podium's default) a first pod is only held, and `python -m bench burst` times that.
    settings = Settings(zone_chooser=ZoneChooser.PIN)
    view = ClusterView.from_objects(
        workload.cluster(nodes), zone_label=settings.zone_label, kept=adapters.KEPT
    )
    api = twins.InMemoryApi()
    api.listeners.append(lambda obj: view.apply("ADDED", obj))
    metrics = Metrics()
    admitter = admission.Admitter(
        view=lambda: view,
        api=api,
        settings=settings,
        # as podium serve writes audit lines: through the writer thread
        sink=audit.BackgroundSink(audit.StreamSink(open(os.devnull, "w"))),  # noqa: SIM115
        observe=metrics.observe,
        # as podium serve: each creation walks the pod's owners in the view (all there: no GET)
        read_owners=owners.OwnerReader(cache.WatchCache(view, twins.InMemoryLister()), api),
    )
    if not os.environ.get("PODIUM_BENCH_NO_FREEZE"):
        server.freeze_heap()  # as podium serve does once the watch cache has synced
    return server.create_app(admitter=admitter, ready=lambda: True, metrics=metrics)


#: podium cut short after one stage of a later pod's admission: answering a canned review
#: (``answer``: read the body, send an answer), after parsing it (``parse``), after deciding
#: (``decide``); ``podium`` is the whole admission. Run side by side (``run.breakdown``), they
#: show what each stage costs *inside the server*, where it costs more than in a loop.
STAGES = ("answer", "parse", "decide")


def staged_app(nodes: int, stage: str) -> server.Webhook:
    """``podium_app`` whose admitter stops after ``stage`` and answers what it answered for a
    later pod (the same answer bytes as the whole admission sends)."""
    app = podium_app(nodes)
    admitter = app.admitter
    name, uid = workload.job_of(0)
    body = workload.review(workload.training_pod(name, uid, "worker", 1, world=8, gpus=4))
    asyncio.run(admitter.admit(body))  # the first admission creates the job's policy
    canned = asyncio.run(admitter.admit(body))

    async def admit(body: bytes) -> admission.Answer:
        if stage != "answer":
            request = reviews.parse(body)
            if stage == "decide":
                engine.decide(request, admitter.view(), admitter.settings, now=admitter.clock())
        return canned

    admitter.admit = admit  # type: ignore[method-assign]
    return app


def fixed_patch() -> list[dict[str, Any]]:
    """The patch podium sends for a later pod of a job: label, annotations, zone affinity."""
    return [
        {"op": "add", "path": "/metadata/labels/podium.dev~1job", "value": "job-uid"},
        {"op": "add", "path": "/metadata/annotations/podium.dev~1zone", "value": ZONE},
        {"op": "add", "path": "/metadata/annotations/podium.dev~1reason", "value": "recorded"},
        {"op": "add", "path": "/metadata/annotations/podium.dev~1policy", "value": "podium-x"},
        {
            "op": "add",
            "path": "/spec/affinity",
            "value": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": labels.ZONE_LABEL, "operator": "In", "values": [ZONE]}
                                ]
                            }
                        ]
                    }
                }
            },
        },
    ]


def limit_app() -> Any:
    """The least an ASGI app can do for a review: read the body, answer fixed bytes."""
    patch = base64.b64encode(orjson.dumps(fixed_patch())).decode()
    answer = orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "bench", "allowed": True, "patchType": "JSONPatch", "patch": patch},
        }
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(answer)).encode()),
    ]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


#: Where the no-op webhook answers reviews; on any other path it lists what it answered.
NOOP_PATH = "/mutate"


def noop_app() -> Any:
    """A webhook that does nothing: each review on `NOOP_PATH` is answered ``allowed``, without
    a patch, under the review's own uid. It keeps one line per answer (namespace, uid) and
    serves them as JSON on every other path, so the burst can tell that each call reached it and
    none failed open (the shipped configuration ignores failures)."""
    answered: list[dict[str, str]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if scope["path"] == NOOP_PATH:
            request = orjson.loads(body)["request"]
            uid = request["uid"]
            answered.append({"namespace": request.get("namespace", ""), "requestUID": uid})
            answer = orjson.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": uid, "allowed": True},
                }
            )
        else:
            answer = orjson.dumps(answered)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(answer)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return app


def serve_uvicorn(app: Any, port: int, certs: Path, profile: Path | None) -> None:
    context = tls.server_context(certs / "tls.crt", certs / "tls.key")
    config = server.server_config(
        app, host="127.0.0.1", port=port, ssl_context=context, log_config=None
    )
    config.log_level = "warning"
    profiler = None
    if profile is not None:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
    try:
        uvicorn.Server(config).run()
    finally:
        if profiler is not None:
            profiler.stop()
            assert profile is not None
            profile.write_text(profiler.output_text(unicode=True, color=False, show_all=False))


# -- kopf ----------------------------------------------------------------------------------------


def serve_kopf(port: int, certs: Path) -> None:
    import kopf
    from kopf._cogs.configs import configuration
    from kopf._cogs.structs import ephemera, references
    from kopf._core.engines import admission as kopf_admission
    from kopf._core.engines import indexing
    from kopf._core.intents import registries
    from kopf._core.reactor import inventory

    registry = registries.OperatorRegistry()

    # kopf is typed, but an optional (bench) dependency: without it, its decorator is untyped.
    @kopf.on.mutate("v1", "pods", registry=registry, id="podium")  # type: ignore[untyped-decorator, unused-ignore]
    def pin(patch: kopf.Patch, body: kopf.Body, **_: Any) -> None:
        owner: dict[str, Any] = next(
            (r for r in body.metadata.get("ownerReferences") or [] if r.get("controller")), {}
        )
        patch.metadata.labels[labels.JOB] = owner.get("uid", "")
        patch.metadata.annotations[labels.ZONE] = ZONE
        patch.metadata.annotations[labels.REASON] = "recorded"
        patch.metadata.annotations[labels.POLICY] = "podium-x"
        patch.spec["affinity"] = fixed_patch()[-1]["value"]

    settings = configuration.OperatorSettings()
    insights = references.Insights()
    pods = references.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
    insights.webhook_resources.add(pods)
    indexers = indexing.OperatorIndexers()
    webhookfn = functools.partial(
        kopf_admission.serve_admission_request,
        settings=settings,
        registry=registry,
        insights=insights,
        memories=inventory.ResourceMemories(),
        memobase=ephemera.AnyMemo(kopf.Memo()),
        indices=indexers.indices,
    )
    webhook_server = kopf.WebhookServer(
        addr="127.0.0.1",
        port=port,
        certfile=str(certs / "tls.crt"),
        pkeyfile=str(certs / "tls.key"),
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        async with webhook_server as served:
            async for _config in served(webhookfn):
                break
            await stop.wait()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


#: The servers: podium, the limit, kopf, podium cut short after each of `STAGES`, the no-op.
#: (mypy reads an enum's members only from a literal list; these are built from `STAGES`.)
Kind = enum.StrEnum(  # type: ignore[misc]
    "Kind",
    [(k, k) for k in ("podium", "limit", "kopf", *(f"podium-{s}" for s in STAGES), "noop")],
)

cli = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@cli.command()
def main(
    kind: Annotated[Kind, typer.Argument(metavar="KIND", help="The server to run.")],
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="Port on 127.0.0.1.")],
    certs: Annotated[
        Path, typer.Option("--certs", metavar="DIR", help="Holds tls.crt and tls.key.")
    ],
    nodes: Annotated[
        int, typer.Option("--nodes", metavar="N", help="Nodes in podium's view.")
    ] = 500,
    core: Annotated[
        int | None, typer.Option("--core", metavar="CORE", help="Pin the process to this core.")
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option("--profile", metavar="FILE", help="Write a pyinstrument profile here."),
    ] = None,
) -> None:
    """Serve AdmissionReviews over TLS until SIGTERM (started by the throughput study)."""
    _pin(core)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    if kind == "podium":
        serve_uvicorn(podium_app(nodes), port, certs, profile)
    elif kind.startswith("podium-"):
        serve_uvicorn(staged_app(nodes, kind.removeprefix("podium-")), port, certs, profile)
    elif kind == "limit":
        serve_uvicorn(limit_app(), port, certs, profile)
    elif kind == "noop":
        serve_uvicorn(noop_app(), port, certs, profile)
    else:
        serve_kopf(port, certs)
    print(f"{kind} stopped at {datetime.now(UTC).isoformat()}", file=sys.stderr)


if __name__ == "__main__":
    cli(prog_name="python -m bench.throughput.servers")
