"""``View``: the reads decisions make of the cluster, and nothing else. Decision code (the zone
choice, the adapters, the owners walk, the guard, doctor and report) depends on this protocol,
not on ``ClusterView``, which satisfies it (``tests/core/test_view_protocol.py`` has mypy prove
it); a test can hand any object with these methods."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Protocol, TypeVar

from webhook.core import resources
from webhook.core.objects import Obj
from webhook.core.view.capacity import ZoneNodes
from webhook.core.view.summaries import NodeInfo, PodSummary

_T = TypeVar("_T")


class View(Protocol):
    """A read-only view of the cluster at one moment (see ``ClusterView`` for each answer)."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None: ...

    def derived(self, obj: Obj, compute: Callable[[Obj], _T]) -> _T: ...

    def by_uid(self, uid: str) -> Obj | None: ...

    def namespace(self, name: str) -> Obj | None: ...

    def pod(self, namespace: str, name: str) -> PodSummary | None: ...

    def pod_summaries(
        self, namespace: str, labels: Mapping[str, str] | None = None
    ) -> Iterator[PodSummary]: ...

    def bound_pods(self, namespace: str, labels: Mapping[str, str]) -> Iterator[PodSummary]: ...

    def pods_in(self, namespace: str, labels: Mapping[str, str] | None = None) -> Iterator[Obj]: ...

    def gangs(self) -> Iterator[tuple[str, str]]: ...

    def holds_any(self) -> bool: ...

    def released(self, namespace: str, gang_key: str) -> int: ...

    def held_gangs(self) -> list[tuple[str, str]]: ...

    def node(self, name: str) -> NodeInfo | None: ...

    def free_on(self, node: NodeInfo) -> resources.Resources: ...

    def candidate_zones(self, pod_spec: Obj) -> Mapping[str, ZoneNodes]: ...

    def reserved(self, *, since: datetime, exclude: str = "") -> dict[str, resources.Resources]: ...
