"""``zone-chooser``'s four modes (docs/design.md, "Modes"): ``hold`` is the default, ``pin`` the
immediate pin (``podium`` its old name), ``auto`` holds wherever kube-scheduler cannot group the
gang; decision records say who chose, and read the same whatever version wrote them."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.builders import PIN, JobBuilder
from tests.core.test_engine import request_for
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.core import adapters, engine, records
from webhook.core.settings import NoFit, Settings, SettingsError, ZoneChooser
from webhook.core.view import ClusterView

AUTO = Settings(zone_chooser=ZoneChooser.AUTO)


def decide(
    objects: list[dict[str, object]],
    pod: dict[str, object],
    settings: Settings,
    *,
    now: datetime,
    scheduler: bool = False,
) -> engine.Decision:
    view = ClusterView.from_objects(objects, zone_label=settings.zone_label, kept=adapters.KEPT)
    return engine.decide(request_for(pod), view, settings, now=now, scheduler=scheduler)


def test_hold_is_the_default_and_pin_is_the_immediate_pin() -> None:
    assert Settings().zone_chooser is ZoneChooser.HOLD
    assert Settings.load(None).zone_chooser is ZoneChooser.HOLD
    for value in ("pin", "podium"):  # podium: the old name, in settings files written before
        assert Settings.from_mapping({"zone-chooser": value}).zone_chooser is ZoneChooser.PIN
    assert [m.value for m in ZoneChooser] == ["hold", "pin", "scheduler", "auto"]
    with pytest.raises(SettingsError, match=r"one of: hold, pin, scheduler, auto \(podium = pin\)"):
        Settings.from_mapping({"zone-chooser": "wait"})


@pytest.mark.parametrize(
    ("chooser", "scheduler", "outcome"),
    [
        (ZoneChooser.HOLD, False, "held"),
        (ZoneChooser.HOLD, True, "held"),
        (ZoneChooser.PIN, False, "pinned"),
        (ZoneChooser.PIN, True, "pinned"),
        (ZoneChooser.AUTO, False, "held"),  # PodGroups not served: the hold, not the pin
        (ZoneChooser.AUTO, True, "grouped"),
        (ZoneChooser.SCHEDULER, True, "grouped"),
    ],
)
def test_each_mode_on_a_new_gang(
    chooser: ZoneChooser, scheduler: bool, outcome: str, now: datetime
) -> None:
    pj = pytorchjob()
    settings = Settings(zone_chooser=chooser)
    got = decide(base_cluster(pj), pytorch_pod(pj).obj(), settings, now=now, scheduler=scheduler)
    assert got.outcome == outcome


def test_auto_holds_a_gang_a_podgroup_cannot_express(now: datetime) -> None:
    """An elastic job's size is not exact, so no PodGroup: ``auto`` holds it (as ``hold`` would)
    rather than pin it without room."""
    elastic = (
        JobBuilder("kubeflow.org/v1", "PyTorchJob", "elastic", NS)
        .spec(
            elasticPolicy={"minReplicas": 1, "maxReplicas": 4},
            pytorchReplicaSpecs={"Worker": pytorchjob()["spec"]["pytorchReplicaSpecs"]["Worker"]},
        )
        .obj()
    )
    pod = pytorch_pod(elastic).obj()
    got = decide(base_cluster(elastic), pod, AUTO, now=now, scheduler=True)
    assert got.outcome == "held"


def test_a_gang_kube_scheduler_groups_is_never_held_later(now: datetime) -> None:
    """A record saying kube-scheduler chooses wins over ``hold`` and over ``auto`` losing the
    scheduler: every pod of the gang joins its PodGroup."""
    pj = pytorchjob()
    pod = pytorch_pod(pj).obj()
    first = decide(base_cluster(pj), pod, AUTO, now=now, scheduler=True)
    assert first.record is not None and first.record["data"]["zoneChooser"] == records.SCHEDULER
    objects = [*base_cluster(pj), first.record]
    for settings in (AUTO, Settings()):
        assert decide(objects, pod, settings, now=now).outcome == "grouped"


def test_a_record_reads_the_same_whichever_version_wrote_it(now: datetime) -> None:
    pj = pytorchjob()
    pinned = decide(base_cluster(pj), pytorch_pod(pj).obj(), PIN, now=now)
    assert pinned.record is not None
    assert "zoneChooser" not in pinned.record["data"]  # new records of podium's: as before
    for written in (None, "podium", "pin", "hold"):
        data = dict(pinned.record["data"])
        if written is not None:
            data["zoneChooser"] = written
        parsed = records.parse_record({**pinned.record, "data": data})
        assert parsed is not None and parsed.chooser == records.PODIUM
    data = {**pinned.record["data"], "zoneChooser": "scheduler"}
    parsed = records.parse_record({**pinned.record, "data": data})
    assert parsed is not None and parsed.chooser == records.SCHEDULER


def test_no_fit_applies_to_the_pin(now: datetime) -> None:
    pj = pytorchjob(workers=15)  # 16 × 8 GPUs: no zone of 8/16/64 GPUs has room
    pod = pytorch_pod(pj).obj()
    for no_fit, outcome in ((NoFit.PIN_MOST_FREE, "pinned"), (NoFit.UNPINNED, "unpinned")):
        settings = Settings(zone_chooser=ZoneChooser.PIN, no_fit=no_fit)
        assert decide(base_cluster(pj), pod, settings, now=now).outcome == outcome
    assert decide(base_cluster(pj), pod, Settings(), now=now).outcome == "held"
