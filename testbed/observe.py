"""Submit a framework's example and record what the real operators made of it.

`observe` applies the objects of a `Framework` in a namespace, waits until the operators have
created its pods, and returns an `Observation`: the stored job, the intermediate objects, each
pod as stored and as its controller sent it (the ``requestObject`` of the pod's create event in
the apiserver audit log, i.e. before any mutating webhook), who created it, in which order, and
its chain of controller owners up to the job. `testbed.operators.golden` turns that into a
golden file.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import urllib3

from testbed.controlplane import ApiError, LocalCluster
from testbed.operators.frameworks import Framework
from testbed.operators.runner import Build

__all__ = [
    "Observation",
    "api_path",
    "observe",
    "owner_chain",
    "summarize",
]


def api_path(api_version: str, kind: str, namespace: str | None, name: str = "") -> str:
    """The REST path of a kind (its plural made the way every kind here makes it)."""
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    lower = kind.lower()
    plural = lower[:-1] + "ies" if lower.endswith("y") else lower + "s"
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
    return f"{path}/{name}" if name else path


def _controller(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences", []):
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_chain(cluster: LocalCluster, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The controller owners of ``obj``, nearest first, each as its ownerReference."""
    chain: list[dict[str, Any]] = []
    namespace = obj["metadata"].get("namespace")
    current: Mapping[str, Any] | None = obj
    while current is not None and (ref := _controller(current)) is not None:
        chain.append(ref)
        try:
            current = cluster.request(
                "GET", api_path(ref["apiVersion"], ref["kind"], namespace, ref["name"])
            )
        except ApiError as error:
            if error.status != 404:
                raise
            current = None
    return chain


@dataclass
class Observation:
    framework: Framework
    namespace: str
    submitted: list[dict[str, Any]]
    job: dict[str, Any]
    #: Stored pods, in creation order.
    pods: list[dict[str, Any]]
    #: pod name -> the body its controller POSTed (audit log requestObject).
    created: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: pod name -> the user that created it.
    creators: dict[str, str] = field(default_factory=dict)
    #: pod name -> the user agent of the create request (which controller made it).
    agents: dict[str, str] = field(default_factory=dict)
    #: pod name -> controller owners, nearest first.
    owners: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: kind -> stored objects of that kind in the namespace.
    intermediates: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: seconds from submitting the job to each pod's create request, by pod name.
    created_after: dict[str, float] = field(default_factory=dict)
    #: pods that were gone again by the end of the observation (their last state is recorded).
    deleted: list[str] = field(default_factory=list)

    def pod(self, name: str) -> dict[str, Any]:
        return next(p for p in self.pods if p["metadata"]["name"] == name)

    def owner_kinds(self, name: str) -> list[str]:
        return [ref["kind"] for ref in self.owners[name]]


def _namespaced(obj: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A copy in ``namespace``, unless the kind is cluster-scoped (ClusterTrainingRuntime)."""
    result = copy.deepcopy(dict(obj))
    if not result["kind"].startswith("Cluster"):
        result["metadata"]["namespace"] = namespace
    return result


def _parse_time(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _create_events(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    events = [
        e
        for e in cluster.audit_events()
        if e.get("verb") == "create"
        and e.get("stage") == "ResponseComplete"
        and (e.get("objectRef") or {}).get("resource") == "pods"
        and not (e.get("objectRef") or {}).get("subresource")
        and (e.get("objectRef") or {}).get("namespace") == namespace
        and (e.get("responseStatus") or {}).get("code") == 201
        and e.get("requestObject")
    ]
    return sorted(events, key=lambda e: e["requestReceivedTimestamp"])


def _subset(small: Mapping[str, Any] | None, big: Mapping[str, Any] | None) -> bool:
    big = big or {}
    return all(big.get(k) == v for k, v in (small or {}).items())


def _matches(request: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Is ``request`` (a create body) the pod ``pod`` was made from?"""
    want, have = request["metadata"], pod["metadata"]
    if want.get("name"):
        return bool(want["name"] == have["name"])
    if not have["name"].startswith(want.get("generateName") or "\0"):
        return False
    uids = {r["uid"] for r in want.get("ownerReferences", [])}
    return (
        uids == {r["uid"] for r in have.get("ownerReferences", [])}
        and _subset(want.get("labels"), have.get("labels"))
        and _subset(want.get("annotations"), have.get("annotations"))
    )


class Watch:
    """Watch a collection (``/api/v1/namespaces/ns/pods``, say) in a thread: the last state of
    every object, by UID, and which were deleted. Use as a context manager; enter it before
    creating anything. The stream is the cluster's own client's (`LocalCluster.api`)."""

    def __init__(self, cluster: LocalCluster, path: str) -> None:
        self.cluster = cluster
        self.path = path
        self.objects: dict[str, dict[str, Any]] = {}
        self.gone: set[str] = set()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._response: urllib3.BaseHTTPResponse | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    def __enter__(self) -> Self:
        version = self.cluster.request("GET", self.path)["metadata"]["resourceVersion"]
        self._response = self.cluster.api.open(
            "GET", self.path, query={"watch": "true", "resourceVersion": version}, timeout=None
        )
        self._thread = threading.Thread(target=self._read, args=(self._response,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopping = True
        if self._response is not None:
            # Unblocks the reading thread, then gives the connection up.
            with contextlib.suppress(OSError):
                self._response.shutdown()
            self._response.release_conn()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _read(self, response: urllib3.BaseHTTPResponse) -> None:
        try:
            for line in response:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    raise ApiError("WATCH", self.path, obj.get("code", 0), str(obj))
                if event["type"] not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                with self._lock:
                    self.objects[obj["metadata"]["uid"]] = obj
                    if event["type"] == "DELETED":
                        self.gone.add(obj["metadata"]["uid"])
        except BaseException as error:
            if not self._stopping:
                self._error = error

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self.objects)

    def raise_error(self) -> None:
        if self._error is not None:
            raise self._error


def observe(
    cluster: LocalCluster,
    framework: Framework,
    builds: Mapping[str, Build],
    namespace: str,
    *,
    timeout: float = 180.0,
    settle: float = 3.0,
) -> Observation:
    """Submit the framework's objects in ``namespace`` and wait for its pods to exist.

    Waits until ``framework.pods`` pods exist and are bound to a node, then ``settle`` seconds
    more (to see any extra pod the operator would still create), and records everything.
    """
    objects = [_namespaced(o, namespace) for o in framework.make(dict(builds))]
    job_obj = objects[-1]
    job_path = api_path(
        job_obj["apiVersion"], job_obj["kind"], namespace, job_obj["metadata"]["name"]
    )
    # Every pod (and intermediate object) seen, by UID, in its last state: one the operators
    # delete again within milliseconds (workers killed once kwok completes the launcher, a
    # Volcano PodGroup once its job completed) is still recorded.
    with contextlib.ExitStack() as stack:
        watch = stack.enter_context(Watch(cluster, f"/api/v1/namespaces/{namespace}/pods"))
        kind_watches = {
            kind: stack.enter_context(Watch(cluster, api_path(api_version, kind, namespace)))
            for api_version, kind in framework.intermediates
        }
        started = time.time()
        for obj in objects:
            cluster.apply(obj)

        def enough() -> bool:
            watch.raise_error()
            pods = watch.snapshot()
            done = [p for uid, p in pods.items() if p["spec"].get("nodeName") or uid in watch.gone]
            return len(pods) >= framework.pods and len(done) == len(pods)

        cluster.wait_for(
            f"{framework.pods} pods of {framework.name} in {namespace}", enough, timeout=timeout
        )
        time.sleep(settle)
        for each in (watch, *kind_watches.values()):
            each.raise_error()
        seen = watch.snapshot()
        gone = set(watch.gone)
        # Only what some controller made (not, say, the kube-root-ca.crt ConfigMap).
        intermediates = {
            kind: sorted(
                (o for o in w.snapshot().values() if o["metadata"].get("ownerReferences")),
                key=lambda o: o["metadata"]["name"],
            )
            for kind, w in kind_watches.items()
        }
    stored = list(seen.values())
    deleted = sorted(p["metadata"]["name"] for uid, p in seen.items() if uid in gone)
    job = cluster.request("GET", job_path)

    events = _create_events(cluster, namespace)
    created: dict[str, dict[str, Any]] = {}
    creators: dict[str, str] = {}
    agents: dict[str, str] = {}
    created_after: dict[str, float] = {}
    order: dict[str, int] = {}
    unclaimed = list(enumerate(events))
    for pod in sorted(stored, key=lambda p: p["metadata"]["creationTimestamp"]):
        name = pod["metadata"]["name"]
        for position, (index, event) in enumerate(unclaimed):
            if _matches(event["requestObject"], pod):
                created[name] = event["requestObject"]
                creators[name] = event["user"]["username"]
                agents[name] = event.get("userAgent", "")
                created_after[name] = round(
                    _parse_time(event["requestReceivedTimestamp"]) - started, 3
                )
                order[name] = index
                del unclaimed[position]
                break
    stored.sort(key=lambda p: (order.get(p["metadata"]["name"], 1 << 30), p["metadata"]["name"]))

    return Observation(
        framework=framework,
        namespace=namespace,
        submitted=objects,
        job=job,
        pods=stored,
        created=created,
        creators=creators,
        agents=agents,
        owners={p["metadata"]["name"]: owner_chain(cluster, p) for p in stored},
        intermediates=intermediates,
        created_after=created_after,
        deleted=deleted,
    )


def summarize(observation: Observation) -> Sequence[str]:
    """One line per pod: name, owner chain, role labels (for logs and reports)."""
    lines = []
    for pod in observation.pods:
        name = pod["metadata"]["name"]
        chain = " -> ".join(f"{r['kind']}/{r['name']}" for r in observation.owners[name])
        lines.append(f"{name}  [{chain}]  on {pod['spec'].get('nodeName')}")
    return lines
