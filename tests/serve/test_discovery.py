"""zone-chooser auto's probe (webhook/serve/discovery.py): one dry-run PodGroup create says
whether the apiserver serves PodGroups and keeps their topology constraint; errors keep the last
answer."""

from __future__ import annotations

import asyncio

from webhook.core import podgroups
from webhook.core.objects import Obj
from webhook.core.policies import Manifest
from webhook.kube import errors
from webhook.serve import discovery


def support(answer: object) -> tuple[discovery.SchedulerSupport, list[Manifest]]:
    sent: list[Manifest] = []

    async def create(manifest: Manifest) -> Obj:
        sent.append(manifest)
        if isinstance(answer, Exception):
            raise answer
        assert callable(answer)
        result: Obj = answer(manifest)
        return result

    return discovery.SchedulerSupport(create, namespace="podium-system", zone_label="z"), sent


async def test_served_with_topology_is_available() -> None:
    probe, sent = support(lambda m: m)
    assert probe() is False  # nothing known before the first probe
    assert await probe.check() is True and probe()
    assert sent == [podgroups.probe("podium-system", "z")]


async def test_topology_dropped_by_the_apiserver_is_not_available() -> None:
    def drop(manifest: Manifest) -> Obj:
        spec = {k: v for k, v in manifest["spec"].items() if k != "schedulingConstraints"}
        return {**manifest, "spec": spec}

    probe, _ = support(drop)
    assert await probe.check() is False
    assert "TopologyAwareWorkloadScheduling" in probe.why


async def test_not_served_is_not_available() -> None:
    probe, _ = support(errors.NotFound("404"))
    assert await probe.check() is False and "not served" in probe.why


async def test_other_errors_keep_the_last_answer() -> None:
    probe, _ = support(lambda m: m)
    await probe.check()
    probe._create = support(errors.ApiError("boom", status=500))[0]._create
    assert await probe.check() is True


async def test_run_probes_until_stopped() -> None:
    probe, sent = support(lambda m: m)
    probe.interval_seconds = 0.01
    stop = asyncio.Event()
    task = asyncio.create_task(probe.run(stop))
    await asyncio.sleep(0.05)
    stop.set()
    await task
    assert len(sent) >= 2 and probe()
