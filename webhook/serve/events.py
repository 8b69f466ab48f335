"""Kubernetes Events on the job object, fed from the audit entry of every admission.

``kubectl describe pytorchjob llama-ft`` (or ``kubectl events --for pytorchjob/llama-ft``) then
shows what podium decided for the job, next to the operator's own events:

=================  =======  ==========================================================
reason             type     when
=================  =======  ==========================================================
``ZonePinned``     Normal   the admission that created (or followed) the job's decision
                            record: once per job, with the zone and the reason
``Unpinned``       Warning  the same, when no zone fits and the settings leave it unpinned
``Grouped``        Normal   the same, in scheduler mode (``zone-chooser``): the pods form a
                            PodGroup and kube-scheduler places the whole gang in one zone
``PolicyCreated``  Normal   an admission created the job's allow policy
``PolicyMissing``  Warning  the policy kind is not installed (CRD missing): pinned, no policy
``FailOpen``       Warning  podium admitted a pod of the job unchanged because it could not
                            finish (at most one per job per minute)
``GangHeld``       Normal   ``zone-chooser: hold``: the job's pods wait behind podium's gate,
                            and why (what it needs, the roomiest zone, its place in line);
                            again whenever the why changes; Warning when no zone could ever
                            hold it
``GangReleased``   Normal   the releaser ungated the job's pods into one zone (after the
                            record and policy, which get their own events)
``JobLabelRemoved`` Warning the reconciler removed a copied ``podium.dev/job`` label from a
                            pod created while podium was down (the Event is on the pod)
=================  =======  ==========================================================

Dry runs and shadow-mode decisions produce no events. Entries without a job (a pod podium does
not recognise, or a failure before the job was known) produce none either: the audit trail and
the metrics count them.

``events.k8s.io/v1`` rather than core ``v1`` Events: it is the current API (``regarding`` and
``related``, ``reportingController``/``reportingInstance``, ``note``), the apiserver validates it
strictly, and both API versions are the same objects underneath, so ``kubectl describe`` and
``kubectl get events`` show them alike. RBAC: ``create`` on ``events.k8s.io/events``.

The admission path never waits for an event: ``observe`` builds the events and appends them to a
bounded queue (the oldest dropped when full); ``run``, a background task on the serving loop,
posts them one by one with a short timeout. A failed post is dropped with a log line. Drops are
counted in ``podium_events_dropped`` (``_total`` in the exposition), by reason.

Event names are deterministic per job and reason (``<record name>.zone-pinned``): when several
replicas race to report the same thing, the apiserver's AlreadyExists keeps one, and a replica
that already posted a name skips it without a call.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from webhook.core import labels, policies
from webhook.core.audit import AuditEntry
from webhook.kube import errors

log = logging.getLogger("podium.events")

API_VERSION = "events.k8s.io/v1"
#: ``reportingController``: a qualified name, as the apiserver requires.
CONTROLLER = "podium.dev/webhook"

ZONE_PINNED = "ZonePinned"
UNPINNED = "Unpinned"
GROUPED = "Grouped"
POLICY_CREATED = "PolicyCreated"
POLICY_MISSING = "PolicyMissing"
FAIL_OPEN = "FailOpen"
JOB_LABEL_REMOVED = "JobLabelRemoved"
GANG_HELD = "GangHeld"
GANG_RELEASED = "GangReleased"
#: ``capacity-buffers: on``: a held gang's CapacityBuffer asked, moved, stopped or deleted.
CAPACITY_BUFFER = "CapacityBuffer"

#: The apiserver's limits (pkg/apis/core/validation/events.go).
NOTE_LIMIT = 1024
INSTANCE_LIMIT = 128
NAME_LIMIT = 253

#: Events waiting to be posted; beyond this the oldest is dropped.
QUEUE_SIZE = 1000
#: Event names this replica posted recently: a second post of the same name is skipped.
REMEMBERED = 4096
#: Seconds one POST may take.
POST_TIMEOUT = 2.0

POLICY_API_VERSIONS: Mapping[str, str] = {
    policies.CILIUM_KIND: policies.CILIUM_API_VERSION,
    policies.K8S_POLICY_KIND: policies.K8S_POLICY_API_VERSION,
}

Event = dict[str, Any]
#: Sends one Event to the apiserver; raises ``errors.ApiError`` (``AlreadyExists`` on 409).
Poster = Callable[[Event], Awaitable[Any]]


def _event_name(base: str, suffix: str) -> str:
    room = NAME_LIMIT - len(suffix) - 1
    return f"{base[:room].rstrip('-.')}.{suffix}"


def _note(text: str) -> str:
    """At most NOTE_LIMIT bytes of UTF-8, cut at a character boundary."""
    raw = text.encode()
    if len(raw) <= NOTE_LIMIT:
        return text
    return raw[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."


def _micro_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _event(
    *,
    name: str,
    namespace: str,
    instance: str,
    now: datetime,
    action: str,
    reason: str,
    note: str,
    warning: bool,
    regarding: Mapping[str, str],
    related: Mapping[str, str] | None = None,
) -> Event:
    """One ``events.k8s.io/v1`` Event, within the apiserver's limits."""
    doc: Event = {
        "apiVersion": API_VERSION,
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": _micro_time(now),
        "reportingController": CONTROLLER,
        "reportingInstance": instance[:INSTANCE_LIMIT] or "podium",
        "action": action,
        "reason": reason,
        "type": "Warning" if warning else "Normal",
        "note": _note(note),
        "regarding": dict(regarding),
    }
    if related:
        doc["related"] = dict(related)
    return doc


@dataclasses.dataclass(frozen=True, slots=True)
class _JobEvents:
    """Makes the events about one admission's job: named after the job, regarding it."""

    namespace: str
    #: The stem of every event name (``labels.object_name`` of the job and its gang).
    stem: str
    regarding: Mapping[str, str]
    #: ``Kind/name``, as notes name the job.
    display: str
    instance: str
    now: datetime

    @classmethod
    def of(cls, entry: AuditEntry, *, instance: str, now: datetime) -> _JobEvents | None:
        """None when the entry names no job (or no namespace) to report on."""
        job = entry.get("job")
        namespace = str(entry.get("namespace") or "")
        if not isinstance(job, Mapping) or not namespace or not job.get("name"):
            return None
        kind, name = str(job.get("kind") or ""), str(job["name"])
        # A TrainJob's gang is its JobSet; people look at the TrainJob (``JobRef.shown``).
        shown = job.get("shown")
        seen = (
            shown if isinstance(shown, Mapping) and shown.get("kind") and shown.get("name") else job
        )
        regarding: dict[str, str] = {
            "kind": str(seen["kind"]),
            "name": str(seen["name"]),
            "namespace": namespace,
        }
        if seen.get("apiVersion"):  # every admission's entry names it
            regarding["apiVersion"] = str(seen["apiVersion"])
        if seen.get("uid"):
            regarding["uid"] = str(seen["uid"])
        return cls(
            namespace=namespace,
            stem=labels.object_name(kind, name, str(job.get("gang") or job.get("uid") or "")),
            regarding=regarding,
            display=f"{regarding['kind']}/{regarding['name']}",
            instance=instance,
            now=now,
        )

    def event(
        self,
        suffix: str,
        reason: str,
        note: str,
        *,
        warning: bool = False,
        action: str,
        related: Mapping[str, str] | None = None,
    ) -> Event:
        return _event(
            name=_event_name(self.stem, suffix),
            namespace=self.namespace,
            instance=self.instance,
            now=self.now,
            action=action,
            reason=reason,
            note=note,
            warning=warning,
            regarding=self.regarding,
            related={**related, "namespace": self.namespace} if related else None,
        )


def build(entry: AuditEntry, *, instance: str, now: datetime) -> list[Event]:
    """The events one audit entry calls for (pure; see the module's table)."""
    if entry.get("dryRun") or entry.get("shadow"):
        return []
    if entry.get("outcome") == "reconcile":
        return _reconcile_events(entry, instance=instance, now=now)
    events = _JobEvents.of(entry, instance=instance, now=now)
    if events is None:
        return []
    if entry.get("outcome") == "fail-open":
        return [_fail_open_event(entry, events)]
    if entry.get("action") == "wait":
        return [_held_event(entry, events)]
    if entry.get("outcome") == "buffer":
        return [_buffer_event(entry, events)]
    out = []
    if entry.get("action") == "release":
        out.append(_released_event(entry, events))
    for effect in entry.get("effects") or ():
        if isinstance(effect, Mapping):
            event = _effect_event(entry, effect, events)
            if event is not None:
                out.append(event)
    return out


def _held_event(entry: AuditEntry, events: _JobEvents) -> Event:
    """The releaser's why for a waiting gang; named per why, so each new why is one Event."""
    why = str(entry.get("detail") or "")
    digest = hashlib.sha256(why.encode()).hexdigest()[:8]
    return events.event(
        f"gang-held-{digest}",
        GANG_HELD,
        f"the pods of {events.display} are held: {why}",
        warning=entry.get("reason") == "too-big",
        action="Hold",
    )


def _buffer_event(entry: AuditEntry, events: _JobEvents) -> Event:
    """What the releaser did to the job's CapacityBuffer; one Event per step (its reason and
    detail), a warning when the write failed or the buffer was stopped."""
    detail = str(entry.get("detail") or "")
    step = f"{entry.get('reason')}-{hashlib.sha256(detail.encode()).hexdigest()[:8]}"
    failed = str(entry.get("result") or "").startswith("failed")
    return events.event(
        f"capacity-buffer-{step}",
        CAPACITY_BUFFER,
        f"{detail} ({entry.get('result')})",
        warning=failed or entry.get("reason") == "buffer-stopped",
        action="Buffer" if entry.get("action") == "buffer" else "Unbuffer",
    )


def _released_event(entry: AuditEntry, events: _JobEvents) -> Event:
    zone = entry.get("zone")
    where = f"into zone {zone}" if zone else "unpinned"
    if domain := entry.get("domain"):
        where += f", domain {domain}"
    pods = len(entry.get("pods") or [])
    failed = str(entry.get("result") or "").startswith("failed")
    return events.event(
        "gang-released-failed" if failed else "gang-released",
        GANG_RELEASED,
        f"released {pods} pod(s) of {events.display} {where} after "
        f"{entry.get('waitedSeconds', 0):g}s held ({entry.get('reason')}: {entry.get('detail')})",
        warning=failed,
        action="Release",
    )


def _fail_open_event(entry: AuditEntry, events: _JobEvents) -> Event:
    minute = events.now.astimezone(UTC).strftime("%Y%m%d%H%M")
    error = str(entry.get("error") or entry.get("detail") or "unknown")
    pod = str(entry.get("pod") or "a pod")
    return events.event(
        f"fail-open-{minute}",
        FAIL_OPEN,
        f"podium admitted {pod} of {events.display} unchanged (not pinned, no policy): {error}",
        warning=True,
        action="Admit",
    )


def _effect_event(entry: AuditEntry, effect: Mapping[str, Any], events: _JobEvents) -> Event | None:
    """The event one object podium created or changed calls for, if any."""
    effect_kind, outcome = str(effect.get("kind") or ""), effect.get("outcome")
    target = {"kind": effect_kind, "name": str(effect.get("name") or "")}
    display = events.display
    if effect_kind == policies.RECORD_KIND and outcome in ("created", "followed"):
        related = {"apiVersion": policies.RECORD_API_VERSION, **target}
        return _placement_event(entry, events, related)
    if effect_kind in POLICY_API_VERSIONS and outcome == "created":
        return events.event(
            "policy-created",
            POLICY_CREATED,
            f"created {effect_kind} {target['name']}: all traffic between the pods of "
            f"{display} is allowed",
            action="CreatePolicy",
            related={"apiVersion": POLICY_API_VERSIONS[effect_kind], **target},
        )
    if effect_kind in POLICY_API_VERSIONS and outcome == "skipped-crd-missing":
        return events.event(
            "policy-missing",
            POLICY_MISSING,
            f"{effect_kind} is not installed: the pods of {display} are pinned but no "
            "allow policy exists",
            warning=True,
            action="CreatePolicy",
        )
    return None


#: The reasons a zone was chosen because pods of the job already ran there (``zones.Reason``).
FOLLOWED = frozenset({"coordinator-placed", "members-placed"})


def _placement_event(entry: AuditEntry, events: _JobEvents, related: Mapping[str, str]) -> Event:
    """Where the job's pods go, once its decision record exists: grouped, pinned or unpinned."""
    reason, detail = str(entry.get("reason") or ""), str(entry.get("detail") or "")
    why = f"{reason}: {detail}" if detail else reason
    display, zone = events.display, entry.get("zone")
    if entry.get("outcome") == "grouped":
        return events.event(
            "grouped",
            GROUPED,
            f"the pods of {display} form one PodGroup: kube-scheduler places the "
            f"whole gang in one zone ({why})",
            action="Group",
            related=related,
        )
    if zone:
        # Pods of the job ran already (coordinator- or members-placed): the new ones follow
        # them, and those that run were never pinned (``core.running``).
        who = (
            f"the new pods of {display} are pinned to zone {zone}, where its running pods are"
            if reason in FOLLOWED
            else f"every pod of {display} is pinned to zone {zone}"
        )
        return events.event(
            "zone-pinned",
            ZONE_PINNED,
            f"{who} ({why})",
            warning=reason.startswith("no-fit"),
            action="Pin",
            related=related,
        )
    return events.event(
        "unpinned",
        UNPINNED,
        f"the pods of {display} are left unpinned ({why})",
        warning=True,
        action="Pin",
        related=related,
    )


def _reconcile_events(entry: AuditEntry, *, instance: str, now: datetime) -> list[Event]:
    """The reconciler's entries call for one event: a label it removed, on the pod."""
    namespace, pod = str(entry.get("namespace") or ""), str(entry.get("pod") or "")
    if entry.get("action") != "unlabel" or entry.get("result") != "unlabelled" or not pod:
        return []
    job = entry.get("job") or {}
    gang = str(job.get("gang") or "")
    related: dict[str, str] | None = None
    if job.get("kind") and job.get("name"):
        related = {"kind": str(job["kind"]), "name": str(job["name"]), "namespace": namespace}
        if job.get("uid"):
            related["uid"] = str(job["uid"])
    event = _event(
        name=_event_name(labels.object_name("pod", pod, gang), "job-label-removed"),
        namespace=namespace,
        instance=instance,
        now=now,
        action="RemoveLabel",
        reason=JOB_LABEL_REMOVED,
        note=str(entry.get("detail") or f"removed {labels.JOB} from {pod}"),
        warning=True,
        regarding={"apiVersion": "v1", "kind": "Pod", "name": pod, "namespace": namespace},
        related=related,
    )
    return [event]


class EventRecorder:
    """Queues events from audit entries (``observe``) and posts them in the background (``run``)."""

    def __init__(
        self,
        post: Poster,
        *,
        instance: str,
        queue_size: int = QUEUE_SIZE,
        timeout: float = POST_TIMEOUT,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_drop: Callable[[str], None] | None = None,
    ) -> None:
        self.post = post
        self.instance = instance
        self.timeout = timeout
        self.clock = clock
        self.on_drop = on_drop
        self.queue: collections.deque[Event] = collections.deque(maxlen=queue_size)
        self.posted = 0
        self.dropped = 0
        self._sent: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def observe(self, entry: AuditEntry) -> None:
        """Queue the entry's events; never raises, never waits (it is on the admission path)."""
        try:
            events = build(entry, instance=self.instance, now=self.clock())
            for event in events:
                if event["metadata"]["name"] in self._sent:
                    continue
                if len(self.queue) == self.queue.maxlen:
                    self._drop("queue-full", self.queue[0], "the queue is full")
                self.queue.append(event)
            if events:
                self._signal()
        except Exception:  # events are a courtesy; the admission already stands
            log.exception("building events for admission %s failed", entry.get("requestUID"))

    def _signal(self) -> None:
        wake, loop = self._wake, self._loop
        if wake is None or loop is None:
            return  # not running yet: run() drains what is queued when it starts
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            wake.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(wake.set)

    def _drop(self, reason: str, event: Event, why: str) -> None:
        self.dropped += 1
        log.warning(
            "dropped event %s %s/%s: %s",
            event.get("reason"),
            event["metadata"].get("namespace"),
            event["metadata"].get("name"),
            why,
        )
        if self.on_drop is not None:
            with contextlib.suppress(Exception):
                self.on_drop(reason)

    def _remember(self, name: str) -> None:
        self._sent[name] = None
        self._sent.move_to_end(name)
        while len(self._sent) > REMEMBERED:
            self._sent.popitem(last=False)

    async def run(self, stop: asyncio.Event) -> None:
        """Post queued events until ``stop`` is set (what is still queued then is abandoned)."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                for event in self._drain():
                    if stop.is_set():
                        break
                    await self._send(event)
                if stop.is_set():
                    break
                waking = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait({waking, stopping}, return_when=asyncio.FIRST_COMPLETED)
                waking.cancel()
                self._wake.clear()
        finally:
            stopping.cancel()
            self._wake = None
            self._loop = None

    def _drain(self) -> Iterator[Event]:
        while self.queue:
            yield self.queue.popleft()

    async def _send(self, event: Event) -> None:
        name = event["metadata"]["name"]
        if name in self._sent:
            return
        try:
            await asyncio.wait_for(self.post(event), timeout=self.timeout)
        except errors.AlreadyExists:
            pass  # another replica (or an earlier post) reported it
        except TimeoutError:
            self._drop("post-failed", event, f"no answer within {self.timeout:g}s")
            return
        except Exception as err:  # ApiError, or a bug in the poster: drop, never stop posting
            self._drop("post-failed", event, f"{type(err).__name__}: {err}")
            return
        self.posted += 1
        self._remember(name)
