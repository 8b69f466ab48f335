"""One adapter per job framework; ``recognise`` asks them in order and returns the first answer."""

from __future__ import annotations

from collections.abc import Sequence

from webhook.adapters import trainingoperator
from webhook.adapters.base import Adapter, Gang
from webhook.snapshot import Obj, Snapshot

ADAPTERS: Sequence[Adapter] = (trainingoperator.TrainingOperatorAdapter(),)


def recognise(pod: Obj, namespace: str, view: Snapshot) -> Gang | None:
    for adapter in ADAPTERS:
        gang = adapter.recognise(pod, namespace, view)
        if gang is not None:
            return gang
    return None
