"""``podium review``: one admission decided offline against a snapshot file, through the same
code path as the server (the API is an in-memory twin seeded with the snapshot).

What the decision guessed because the snapshot lacked something — the namespace, the job, zone
labels on nodes, room in a zone the pod insists on — becomes a ``note`` (`snapshot_notes`): the
JSON answer stays exactly what ``podium serve`` would send, the notes go beside it. `summary` is
the short account a person reads on a terminal.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook.core import adapters, audit, buffers, release, resources, reviews
from webhook.core.objects import Obj, key_of, labels_of, metadata_of
from webhook.core.resources import amount, describe
from webhook.core.settings import Settings
from webhook.core.view import ClusterView
from webhook.kube import twins
from webhook.ops import shapes
from webhook.serve import admission
from webhook.serve.audit import MemorySink


class InputError(ValueError):
    """An input or snapshot file podium cannot use; the message is one line for stderr."""


#: libyaml's loader when PyYAML was built with it: a 33k-object snapshot loads in seconds rather
#: than most of a minute with the pure-Python one (safe either way: plain data, no tags).
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_documents(path: Path) -> list[Any]:
    """JSON, or YAML with one or more documents ('-' reads stdin)."""
    try:
        text = Path("/dev/stdin").read_text() if str(path) == "-" else path.read_text()
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise InputError(f"cannot read {path}: it is not text (UTF-8)") from err
    try:
        return [orjson.loads(text)]
    except orjson.JSONDecodeError:
        pass
    try:
        return [d for d in yaml.load_all(text, Loader=_YAML_LOADER) if d is not None]
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"{path} is neither JSON nor YAML: {first}") from err


def load_review(path: Path) -> dict[str, Any]:
    docs = load_documents(path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise InputError(f"{path} must hold one AdmissionReview or one Pod")
    doc = docs[0]
    if doc.get("kind") == "Pod" and doc.get("apiVersion") == "v1":
        return reviews.review_for_pod(_pod(path, doc, ""))
    if doc.get("kind") == reviews.KIND:
        request = doc.get("request")
        if isinstance(request, dict) and _is_pod_kind(request.get("kind")):
            for field in ("object", "oldObject"):
                if request.get(field) is not None:
                    request[field] = _pod(path, request[field], f"request.{field}")
        return doc
    kind = doc.get("kind")
    held = f"a {kind} ({doc.get('apiVersion') or 'no apiVersion'})" if kind else "no kind"
    raise InputError(
        f"{path} holds {held}, not an admission.k8s.io/v1 AdmissionReview or a v1 Pod "
        "(e.g. kubectl get pod NAME -o yaml > pod.yaml)"
    )


def _is_pod_kind(kind: Any) -> bool:
    """Whether a request's ``kind`` names core Pods (as `reviews.Request.is_pod` reads it)."""
    return isinstance(kind, Mapping) and kind.get("kind") == "Pod" and not kind.get("group")


def _pod(path: Path, pod: Any, what: str) -> Any:
    """The pod as the apiserver would send it (null fields dropped); one that it could not have
    decoded (``spec.containers: 7``) is refused in one line rather than decided on a shape no
    cluster sends."""
    pod = shapes.without_nulls(pod)
    if found := shapes.problem(pod, "V1Pod", what):
        raise InputError(f"{path}: not a Pod the apiserver would send: {found}")
    return pod


def load_snapshot_objects(path: Path) -> list[Obj]:
    """The objects of a v1 List (or any ``*List``), several documents, or a JSON array."""
    objects: list[Obj] = []
    for doc in load_documents(path):
        objects.extend(_flatten(doc, path))
    for obj in objects:
        if not isinstance(obj.get("metadata"), Mapping) or not (obj["metadata"]).get("name"):
            raise InputError(f"{path}: an object of kind {obj.get('kind')!r} has no metadata.name")
    return objects


def _flatten(doc: Any, path: Path) -> Iterable[Obj]:
    if isinstance(doc, list):
        for item in doc:
            yield from _flatten(item, path)
        return
    if not isinstance(doc, Mapping) or "kind" not in doc or "apiVersion" not in doc:
        raise InputError(f"{path}: every document must be a Kubernetes object or a List")
    if str(doc["kind"]).endswith("List") and isinstance(doc.get("items"), list):
        list_kind = str(doc["kind"])[: -len("List")]
        for item in doc["items"]:
            if not isinstance(item, Mapping):
                raise InputError(f"{path}: a List item is not an object")
            # `kubectl get pods -o yaml` items carry kind; typed lists from the API may not.
            if "kind" not in item and list_kind:
                yield from _flatten(
                    {"kind": list_kind, "apiVersion": doc["apiVersion"], **item}, path
                )
            else:
                yield from _flatten(item, path)
        return
    yield doc


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    response: dict[str, Any]
    patched: Obj | None
    side_effects: list[dict[str, Any]]
    entry: audit.AuditEntry | None
    #: What the snapshot lacked and the decision therefore guessed (not part of ``as_dict``).
    notes: tuple[str, ...] = ()
    #: ``zone-chooser: hold`` or ``auto`` only: the releaser's verdict per held gang of the
    #: snapshot (the reviewed pod counted as held when admission held it); None otherwise.
    releaser: tuple[dict[str, Any], ...] | None = None
    #: The primary resource free on each candidate node, by zone, largest first: why a zone
    #: with enough in total may still not fit (16 free as 2 per node hold no 8-GPU pod).
    #: Quantities as ``amount`` writes them (``2 nvidia.com/gpu``).
    per_node: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract: ``response``, ``patchedObject``, ``sideEffects``, ``audit``; and
        ``release`` (the releaser's verdicts) in ``zone-chooser: hold`` or ``auto``."""
        out = {
            "response": self.response,
            "patchedObject": self.patched,
            "sideEffects": self.side_effects,
            "audit": self.entry,
        }
        if self.releaser is not None:
            out["release"] = list(self.releaser)
        return out


async def review(
    review_doc: Mapping[str, Any],
    objects: Iterable[Obj],
    settings: Settings,
    *,
    now: datetime | None = None,
) -> Result:
    """Decide one review against ``objects`` exactly as ``podium serve`` would; in ``zone-chooser:
    hold`` or ``auto``, also what the releaser would do with the snapshot at ``now``."""
    objects = list(objects)
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    api = twins.InMemoryApi()
    for obj in objects:
        api.objects[key_of(obj)] = obj
    sink = MemorySink()
    admitter = admission.Admitter(view=lambda: view, api=api, settings=settings, sink=sink)
    answer = await admitter.admit(orjson.dumps(review_doc))
    if answer.status != 200:
        raise InputError(str(answer.body.get("error", "the review was rejected")))
    decision = answer.decision
    created = {
        (e["kind"], e["name"])
        for e in (answer.entry["effects"] if answer.entry else [])
        if e.get("outcome") == "created"
    }
    side_effects = [
        m
        for m in (decision.to_create if decision else ())
        if (m["kind"], m["metadata"]["name"]) in created
    ]
    response = {**dict(review_doc), **answer.body}
    original = (review_doc.get("request") or {}).get("object")
    patched = decision.patched if decision and "patch" in answer.body["response"] else original
    notes = snapshot_notes(review_doc, objects, view, settings, answer.entry)
    verdicts = None
    if settings.zone_chooser.may_hold:
        held = answer.entry is not None and answer.entry.get("outcome") == "held"
        after = _with_pod(objects, patched if held else None)
        verdicts = releaser(after, settings, now=now or datetime.now(UTC))
    spread = per_node(view, original, answer.entry, settings)
    return Result(response, patched, side_effects, answer.entry, notes, verdicts, spread)


def per_node(
    view: ClusterView, pod: Obj | None, entry: Mapping[str, Any] | None, settings: Settings
) -> dict[str, tuple[str, ...]]:
    """`Result.per_node`: the nodes the pod could use, as the decision counted them (before
    the reservations of podium's recent decisions), those with none free left out."""
    if not pod:
        return {}
    primary = _primary(entry, settings)
    out = {}
    for zone, nodes in view.candidate_zones(pod.get("spec") or {}).items():
        frees = sorted((free.get(primary, 0) for free in nodes.frees()), reverse=True)
        out[zone] = tuple(amount(primary, f) for f in frees if f > 0)
    return out


def _primary(entry: Mapping[str, Any] | None, settings: Settings) -> str:
    """The resource the decision weighed zones by (as `zones` chooses it)."""
    demand = ((entry or {}).get("job") or {}).get("demand") or {}
    return settings.primary_resource if demand.get(settings.primary_resource) else resources.CPU


def _with_pod(objects: Sequence[Obj], pod: Obj | None) -> list[Obj]:
    """The snapshot with the reviewed pod as admission left it (held), unless it holds it."""
    seen = {key_of(o): o for o in objects}
    if pod is not None:
        seen.setdefault(key_of(pod), pod)
    return list(seen.values())


def releaser(
    objects: Iterable[Obj], settings: Settings, *, now: datetime
) -> tuple[dict[str, Any], ...]:
    """What podium's releaser would do with the held gangs of ``objects`` now (`release.plan`,
    pure: nothing is written), one verdict per gang in the releaser's order.

    A snapshot is one moment: where the releaser waits for the count of held pods to stay the
    same for one pass (an adapter that cannot tell a staged start's first stage), the review
    takes the snapshot's count as settled."""
    view = ClusterView.from_objects(
        list(objects), zone_label=settings.zone_label, kept=adapters.KEPT
    )
    first = release.plan(view, settings, now=now)
    decided = release.plan(view, settings, now=now, stable=first.counts)
    out: list[dict[str, Any]] = []
    for r in decided.releases:
        out.append(
            {
                **_gang(r.held),
                "verdict": "release",
                "zone": r.zone,
                "reason": r.reason,
                "detail": r.detail,
                "pods": len(r.pods),
                "policies": [p["metadata"]["name"] for p in r.policies],
                **({"domain": r.domain} if r.domain else {}),
                **({"topology": r.topology} if r.topology else {}),
            }
        )
    grow = {w.gang.key: w for w in decided.grow}
    for w in decided.waits:
        out.append(
            {
                **_gang(w.held),
                "verdict": "wait",
                "why": w.why,
                "position": w.position,
                "tooBig": w.too_big,
                "bestZone": w.best_zone,
                "bestFree": w.best_free,
                **({"topology": w.topology} if w.topology else {}),
                **_buffer(grow.get(w.held.key)),
            }
        )
    order = {h.key: i for i, h in enumerate(release.held_gangs(view, settings))}
    out.sort(key=lambda v: order.get(str(v["key"]), len(order)))
    return tuple(out)


def _buffer(want: buffers.Want | None) -> dict[str, Any]:
    """``capacity-buffers: on``: the CapacityBuffer the releaser would keep for a waiting gang
    (the zone it asks, or none once stopped), and what it would write or change."""
    if want is None:
        return {}
    return {
        "buffer": {
            "name": want.name,
            "zone": want.zone,
            "replicas": want.replicas if want.live else 0,
            "newNodes": want.new_nodes,
            "tried": list(want.tried),
            "write": want.changed,
            "detail": want.detail,
        }
    }


def _gang(held: release.HeldGang) -> dict[str, Any]:
    owner = held.gang.owner
    return {
        "job": f"{owner.kind}/{owner.name}",
        "namespace": held.namespace,
        "key": held.key,
        "held": len(held.held),
        "heldSince": held.since.isoformat() if held.since else None,
    }


def releaser_lines(verdicts: Iterable[Mapping[str, Any]]) -> list[str]:
    """The releaser's verdicts as the summary shows them: ``release now into zone-b (best-fit):
    …`` or ``wait: needs 4 × 8 nvidia.com/gpu in one zone; …``."""
    lines = []
    for i, v in enumerate(verdicts):
        who = f"{v['namespace']}/{v['job']} ({v['held']} held)"
        if v["verdict"] == "release":
            where = f"into zone [bold]{v['zone']}[/]" if v["zone"] else "[bold]unpinned[/]"
            if v.get("domain"):
                where += f", domain [bold]{v['domain']}[/]"
            what = f"release now {where} ({v['reason']}): {v['detail']}"
        else:
            what = f"wait: {v['why']}"
        lines.append(f"  {'releaser ' if i == 0 else '         '}{who}: {what}")
    return lines or ["  releaser no held gang in the snapshot"]


_DEMAND_SOURCES = {
    "job": "the job",
    "pod": "the pod alone",
    "env": "the pod's PET_NNODES / WORLD_SIZE",
    "labels": "the pod's JobSet replica labels",
}


def snapshot_notes(
    review_doc: Mapping[str, Any],
    objects: Sequence[Obj],
    view: ClusterView,
    settings: Settings,
    entry: audit.AuditEntry | None,
) -> tuple[str, ...]:
    """What the decision had to guess because the snapshot lacked it, in words that say what to
    add (and which setting is involved)."""
    request = review_doc.get("request") or {}
    pod: Obj = request.get("object") or {}
    namespace = str(request.get("namespace") or metadata_of(pod).get("namespace") or "")
    notes: list[str] = []
    if namespace and not settings.skips_namespace(namespace) and view.namespace(namespace) is None:
        notes.append(
            f"namespace {namespace} is not in the snapshot, so podium took it as not opted in "
            f"(it cannot see {settings.namespace_label}); add the Namespace object"
        )
    job: Mapping[str, Any] = (entry.get("job") if entry else None) or {}
    if job and not any(metadata_of(o).get("uid") == job.get("uid") for o in objects):
        source = _DEMAND_SOURCES.get(str(job.get("demandSource")), "the pod")
        notes.append(
            f"{job.get('kind')}/{job.get('name')} is not in the snapshot: the gang's demand "
            f"({describe(job.get('demand') or {})}) came from {source}, not from the job; add "
            "the job object"
        )
    unzoned = sorted(
        str(metadata_of(o).get("name"))
        for o in objects
        if o.get("kind") == "Node" and settings.zone_label not in labels_of(o)
    )
    if unzoned:
        shown = ", ".join(unzoned[:3]) + (", …" if len(unzoned) > 3 else "")
        notes.append(
            f"{len(unzoned)} node(s) have no {settings.zone_label} label (setting zone-label) "
            f"and count in no zone: {shown}"
        )
    if entry and entry.get("reason") == "pod-constraint" and entry.get("zone") and job:
        zone = str(entry["zone"])
        nodes = view.candidate_zones(pod.get("spec") or {}).get(zone)
        free = nodes.free() if nodes is not None else {}
        demand = {k: int(v) for k, v in (job.get("demand") or {}).items()}
        if not resources.fits(demand, free):
            notes.append(
                f"the pod requires zone {zone}, where the whole gang ({describe(demand)}) does "
                f"not fit ({describe(free, like=demand) or 'nothing'} free): some pods will stay "
                "Pending"
            )
    return tuple(notes)


#: What podium's own objects are, for the summary.
_ROLES = {"ConfigMap": "decision record"}


def summary(result: Result) -> list[str]:
    """The short account a person reads: the pod, the zone and why, demand and zones, the patch
    as operations, what gets created, warnings. Rich markup; ``cli`` prints it."""
    entry: Mapping[str, Any] = result.entry or {}
    response = result.response.get("response") or {}
    job: Mapping[str, Any] = entry.get("job") or {}
    who = f"{entry.get('namespace')}/{entry.get('pod')}"
    if job:
        who += f" ({job.get('kind')}/{job.get('name')}, {entry.get('role') or 'member'})"
    outcome = str(entry.get("outcome") or "")
    zone = entry.get("zone")
    head = {
        "pinned": f"pinned to zone [bold]{zone}[/]",
        "unpinned": "left [bold]unpinned[/]",
        "denied": "[bold red]denied[/]",
        "fail-open": "[bold yellow]admitted unchanged (fail open)[/]",
        "held": "[bold]held[/] behind podium's gate, no zone yet (the releaser decides)",
    }.get(outcome, f"[bold]{outcome}[/]")
    if entry.get("shadow"):
        head = f"shadow mode, admitted unchanged; enforce mode: {head}"
    lines = [f"{who}: {head}", f"  reason   {entry.get('reason')}: {entry.get('detail')}"]
    if job.get("demand"):
        source = _DEMAND_SOURCES.get(str(job.get("demandSource")), "the pod")
        lines.append(f"  demand   {describe(job['demand'])} (from {source})")
    for i, cap in enumerate(entry.get("capacity") or []):
        verdict = "fits" if cap.get("fits") else "does not fit"
        mark = "  ← chosen" if cap.get("zone") == zone else ""
        free = describe(cap.get("free") or {}, like=job.get("demand") or None) or "nothing"
        if not cap.get("fits"):
            verdict += _spread(result.per_node.get(str(cap.get("zone"))) or ())
        label = "zones    " if i == 0 else "         "
        lines.append(f"  {label}{cap.get('zone')}: {free} free, {verdict}{mark}")
    patch = _patch_ops(response)
    for i, op in enumerate(patch):
        lines.append(f"  {'patch    ' if i == 0 else '         '}{op}")
    for i, obj in enumerate(result.side_effects):
        kind = str(obj.get("kind"))
        what = _ROLES.get(kind, "allow policy")
        name = metadata_of(obj).get("name")
        lines.append(f"  {'creates  ' if i == 0 else '         '}{kind} {name} ({what})")
    warnings = [*(response.get("warnings") or []), *result.notes]
    for i, warning in enumerate(warnings):
        lines.append(f"  {'[yellow]warning[/]  ' if i == 0 else '         '}{warning}")
    if result.releaser is not None:
        lines += releaser_lines(result.releaser)
    return lines


def _spread(frees: Sequence[str]) -> str:
    """`` (per node: 2 nvidia.com/gpu on 4 nodes)``, `` (per node: 6 nvidia.com/gpu on 1, 2
    nvidia.com/gpu on 3)``: how a zone's free
    capacity is split (``frees`` largest first), counting the nodes with the same amount."""
    counts = Counter(frees)
    if not counts:
        return ""
    parts = [f"{free} on {n}" for free, n in counts.items()]
    if len(parts) == 1:
        parts[0] += " node" if next(iter(counts.values())) == 1 else " nodes"
    return f" (per node: {', '.join(parts)})"


def _patch_ops(response: Mapping[str, Any]) -> list[str]:
    """The JSON patch as one line per operation: ``add /spec/affinity = {…}``."""
    encoded = response.get("patch")
    if not encoded:
        return []
    ops = orjson.loads(base64.b64decode(encoded))
    out = []
    for op in ops:
        value = ""
        if "value" in op:
            # Whole, never cut; spaced (", ", ": ") so a terminal's width wraps it between
            # values, not inside a label.
            value = " = " + json.dumps(op["value"], separators=(", ", ": "), ensure_ascii=False)
        out.append(f"{op.get('op')} {_unescape(str(op.get('path')))}{value}")
    return out


#: The summary's gutter: two blanks and a nine-character label (``  patch    ``).
GUTTER = 11


def _unescape(path: str) -> str:
    """A JSON pointer as people read it (``podium.dev/job``, not ``podium.dev~1job``)."""
    return path.replace("~1", "/").replace("~0", "~")
