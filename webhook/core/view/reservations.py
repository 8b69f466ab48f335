"""What recently decided gangs still need room for, per zone (``ClusterView.reserved``), and the
decision records it is computed from, in the order they were decided."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping
from datetime import datetime

from webhook.core import labels, records, resources
from webhook.core.objects import Obj, ObjectKey, labels_of, parse_time
from webhook.core.view.summaries import PodSummary

_EMPTY_RESOURCES: resources.Resources = {}


def is_record(obj: Obj) -> bool:
    """A decision record: a ConfigMap podium manages as one."""
    obj_labels = labels_of(obj)
    return (
        obj_labels.get(labels.MANAGED_BY) == labels.MANAGER
        and obj_labels.get(labels.COMPONENT) == "decision"
    )


class Records:
    """podium's decision records (ConfigMaps it manages) with a readable ``decidedAt``, in the
    order they were decided."""

    __slots__ = ("order", "time")

    def __init__(self) -> None:
        self.order: list[tuple[float, ObjectKey]] = []
        self.time: dict[ObjectKey, float] = {}

    def on_object(self, key: ObjectKey, old: Obj | None, new: Obj | None) -> None:
        """A ConfigMap changed: ``old`` and ``new`` are its versions, None for absent."""
        decided = self.time.pop(key, None) if old is not None else None
        if decided is not None:
            del self.order[bisect.bisect_left(self.order, (decided, key))]
        if new is not None and is_record(new):
            decided_at = parse_time((new.get("data") or {}).get("decidedAt"))
            if decided_at is not None:
                self.time[key] = decided_at.timestamp()
                bisect.insort(self.order, (self.time[key], key))

    def keys_between(self, start: float, end: float = math.inf) -> list[ObjectKey]:
        """Records decided at or after ``start`` and before ``end``, in that order."""
        low = bisect.bisect_left(self.order, (start,))
        high = len(self.order) if end == math.inf else bisect.bisect_left(self.order, (end,))
        return [key for _, key in self.order[low:high]]


class Reservations:
    """Per zone, the share of each gang decided since the window's start that its pods still
    need room for (``share_of``), as a running sum: a record, a pod event that changes a gang's
    pending or seen pods and a move of the window each update it by one share."""

    def __init__(
        self,
        records_: Records,
        parse: Callable[[Obj], records.Record | None],
        pods: Mapping[str, Mapping[str, PodSummary]],
    ) -> None:
        self._records = records_
        #: ``records.parse_record``, kept per object by the view (``ClusterView.derived``).
        self._parse = parse
        #: The store's pods by namespace and name.
        self._pods = pods
        #: Records with a zone and a decision time, by key and by gang.
        self.reservable: dict[ObjectKey, records.Record] = {}
        self.gang_records: dict[str, set[ObjectKey]] = {}
        self.window = -math.inf
        #: The share of each reservable record decided since ``window``, and their sum per zone.
        self.shares: dict[ObjectKey, tuple[str, resources.Resources]] = {}
        self.reserved: dict[str, resources.Resources] = {}
        #: Per gang label value: requests of its pods that are neither bound nor finished (they
        #: still need room), and of every pod seen with the label, by (namespace, name), kept
        #: after the pod is deleted while the gang has a reservable record (what is gone no
        #: longer needs room, and the pods not yet created are the demand none of these cover).
        self.pending: dict[str, resources.Resources] = {}
        self.seen: dict[str, dict[tuple[str, str], resources.Resources]] = {}
        self.seen_total: dict[str, resources.Resources] = {}

    # -- events

    def on_object(self, key: ObjectKey, old: Obj | None, new: Obj | None) -> None:
        """A ConfigMap changed (after ``Records.on_object`` saw it)."""
        gang = self._forget(key) if old is not None else None
        if new is not None and key in self._records.time:
            record = self._parse(new)
            if record is not None and record.zone:
                self.reservable[key] = record
                self.gang_records.setdefault(record.gang, set()).add(key)
                if self._records.time[key] >= self.window:
                    self._add_share(key)
        if gang is not None and gang not in self.gang_records:
            self._forget_gone(gang)

    def _forget(self, key: ObjectKey) -> str | None:
        """Drop the record's share; the gang whose last reservable record this was, if any (its
        deleted pods are forgotten unless a new version replaces it)."""
        self._drop_share(key)
        record = self.reservable.pop(key, None)
        if record is None:
            return None
        keys = self.gang_records[record.gang]
        keys.discard(key)
        if keys:
            return None
        del self.gang_records[record.gang]
        return record.gang

    def on_pod(self, old: PodSummary | None, new: PodSummary | None) -> None:
        """Keep the gang's pending and seen requests current for one pod event; reshare only
        when they changed (most pod events are status updates that change neither)."""
        old_gang = old.labels.get(labels.JOB) if old is not None else None
        new_gang = new.labels.get(labels.JOB) if new is not None else None
        if (
            old is not None
            and new is not None
            and (old_gang, old.pending, old.requests) == (new_gang, new.pending, new.requests)
        ):
            return
        if old is not None and old_gang:
            if old.pending:
                self._add_pending(old_gang, old.requests, -1)
            if new is not None or old_gang not in self.gang_records:
                # Relabelled (never the gang's own) or replaced below; or deleted from a gang that
                # reserves nothing. A pod deleted from a reserving gang stays seen: it is gone.
                self._unsee(old_gang, (old.namespace, old.name))
        if new is not None and new_gang:
            if new.pending:
                self._add_pending(new_gang, new.requests, 1)
            self._see(new_gang, (new.namespace, new.name), new.requests)
        for gang in {old_gang, new_gang}:
            if gang:
                self._reshare(gang)

    def _add_pending(self, gang: str, requests: resources.Resources, sign: int) -> None:
        left = resources.add(self.pending.get(gang, {}), requests, sign=sign)
        if any(left.values()):
            self.pending[gang] = left
        else:
            self.pending.pop(gang, None)

    def _see(self, gang: str, pod: tuple[str, str], requests: resources.Resources) -> None:
        self._unsee(gang, pod)
        self.seen.setdefault(gang, {})[pod] = requests
        self.seen_total[gang] = resources.add(self.seen_total.get(gang, {}), requests)

    def _unsee(self, gang: str, pod: tuple[str, str]) -> None:
        seen = self.seen.get(gang)
        requests = seen.pop(pod, None) if seen is not None else None
        if requests is None:
            return
        if seen:
            self.seen_total[gang] = resources.add(self.seen_total[gang], requests, sign=-1)
        else:
            del self.seen[gang]
            del self.seen_total[gang]

    def _forget_gone(self, gang: str) -> None:
        """The gang's last reservable record is gone: so is the memory of its deleted pods."""
        for namespace, name in list(self.seen.get(gang, ())):
            pod = self._pods.get(namespace, {}).get(name)
            if pod is None or pod.labels.get(labels.JOB) != gang:
                self._unsee(gang, (namespace, name))

    # -- shares

    def share_of(self, record: records.Record) -> resources.Resources:
        """What the gang of ``record`` still needs room for, per resource: its pods that exist but
        are neither bound nor finished, plus the demand no pod seen yet stands for (pods not yet
        created), never more than the recorded demand. Pods that bound (their node counts them),
        finished or were deleted need nothing, so a gang all of whose pods did reserves nothing."""
        pending = self.pending.get(record.gang, _EMPTY_RESOURCES)
        seen = self.seen_total.get(record.gang, _EMPTY_RESOURCES)
        share = {}
        for name, demand in record.demand.items():
            amount = min(demand, pending.get(name, 0) + max(0, demand - seen.get(name, 0)))
            if amount > 0:
                share[name] = amount
        return share

    def _add_share(self, key: ObjectKey) -> None:
        record = self.reservable[key]
        assert record.zone is not None
        share = self.share_of(record)
        self.shares[key] = (record.zone, share)
        self.reserved[record.zone] = resources.add(self.reserved.get(record.zone, {}), share)

    def _drop_share(self, key: ObjectKey) -> None:
        held = self.shares.pop(key, None)
        if held is None:
            return
        zone, share = held
        left = resources.add(self.reserved.get(zone, {}), share, sign=-1)
        left = {name: amount for name, amount in left.items() if amount}
        if left:
            self.reserved[zone] = left
        else:
            self.reserved.pop(zone, None)

    def _reshare(self, gang: str) -> None:
        """The gang's pending or seen pods changed: its records' shares change with it."""
        for key in self.gang_records.get(gang, ()):
            if key in self.shares:
                self._drop_share(key)
                self._add_share(key)

    # -- reads

    def since(self, since: datetime, exclude: str = "") -> dict[str, resources.Resources]:
        """Per zone, the shares of the gangs decided at or after ``since`` but ``exclude``. The
        window moves forward with ``since``; a query for an earlier ``since`` (a clock set back)
        rebuilds it from the records decided since then."""
        start = since.timestamp()
        if start < self.window:
            self.shares.clear()
            self.reserved.clear()
            for key in self._records.keys_between(start):
                if key in self.reservable:
                    self._add_share(key)
        elif start > self.window:
            for key in self._records.keys_between(self.window, start):
                self._drop_share(key)
        self.window = start
        out = dict(self.reserved)
        for key in self.gang_records.get(exclude, ()):
            if key in self.shares:
                zone, share = self.shares[key]
                out[zone] = resources.add(out.get(zone, {}), share, sign=-1)
        return out
