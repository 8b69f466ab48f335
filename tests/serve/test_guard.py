"""The Cilium CRD guard (webhook/serve/guard.py): what it says, once, when the installed
ciliumnetworkpolicies CRD changes what podium writes, and the gauge."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from webhook.core import adapters, policies
from webhook.core.settings import OldCilium, PolicyMode, Settings
from webhook.core.view import ClusterView
from webhook.serve import audit, guard
from webhook.serve.metrics import Metrics

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DEFAULTS = Settings()


def crd(*, default_deny: bool) -> dict[str, Any]:
    spec = {"properties": {"enableDefaultDeny": {"type": "object"}}} if default_deny else {}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": policies.CILIUM_CRD},
        "spec": {
            "versions": [
                {"name": "v2", "schema": {"openAPIV3Schema": {"properties": {"spec": spec}}}}
            ]
        },
    }


def make(
    settings: Settings = DEFAULTS, ready: bool = True
) -> tuple[guard.CiliumGuard, ClusterView, audit.MemorySink]:
    view = ClusterView(zone_label="z", kept=adapters.KEPT)
    sink = audit.MemorySink()
    keeper = guard.CiliumGuard(
        view=lambda: view, ready=lambda: ready, settings=settings, sink=sink, clock=lambda: NOW
    )
    return keeper, view, sink


def test_an_old_cilium_is_said_once_and_its_fix_too(caplog: pytest.LogCaptureFixture) -> None:
    keeper, view, sink = make()
    assert keeper.check() is None and not keeper.withholding  # no Cilium: nothing to say
    view.apply("ADDED", crd(default_deny=False))
    record = keeper.check()
    assert record is not None and keeper.withholding
    assert (record["outcome"], record["reason"]) == (
        "guard",
        "cilium-crd-without-enable-default-deny",
    )
    assert record["warnings"] == [policies.OLD_CILIUM_WARNING]
    assert policies.OLD_CILIUM_WARNING in caplog.text
    assert keeper.check() is None  # said once
    view.apply("MODIFIED", crd(default_deny=True))  # Cilium upgraded
    record = keeper.check()
    assert record is not None and record["reason"] == "cilium-crd-additive"
    assert not keeper.withholding
    assert [r["reason"] for r in sink.entries] == [
        "cilium-crd-without-enable-default-deny",
        "cilium-crd-additive",
    ]


@pytest.mark.parametrize(
    ("settings", "withholding"),
    [
        (Settings(), True),
        (Settings(old_cilium=OldCilium.CREATE_POLICY), False),
        (Settings(policy_mode=PolicyMode.KUBERNETES), False),
    ],
)
def test_only_cilium_mode_with_skip_policy_withholds(settings: Settings, withholding: bool) -> None:
    keeper, view, _ = make(settings)
    view.apply("ADDED", crd(default_deny=False))
    assert keeper.check() is not None
    assert keeper.withholding is withholding
    meter = Metrics()
    meter.track_withheld(lambda: keeper.withholding)
    value = 1.0 if withholding else 0.0
    assert f"podium_cilium_policy_withheld {value}".encode() in meter.render()


def test_nothing_is_said_before_the_cache_has_synced() -> None:
    keeper, view, sink = make(ready=False)
    view.apply("ADDED", crd(default_deny=False))
    assert keeper.check() is None and sink.entries == []


async def test_the_loop_checks_until_stopped() -> None:
    keeper, view, sink = make()
    keeper.interval = 0.01
    view.apply("ADDED", crd(default_deny=False))
    stop = asyncio.Event()
    task = asyncio.create_task(keeper.run(stop))
    for _ in range(200):
        if sink.entries:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert [r["reason"] for r in sink.entries] == ["cilium-crd-without-enable-default-deny"]
