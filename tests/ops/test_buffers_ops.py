"""``capacity-buffers: on`` as people see it offline: ``podium doctor`` keeps a gang that waits
for its buffer as held (not too big: a zone may grow), and ``podium review`` says which buffer
the releaser would keep for it."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path

from tests.core.test_buffers import nodes
from tests.core.test_release import HOLD, held_job
from tests.ops.test_offline import held_pods, review
from tests.scenarios import pytorch_pod, pytorchjob
from webhook.core.settings import CapacityBuffers
from webhook.ops import doctor

ON = dataclasses.replace(HOLD, capacity_buffers=CapacityBuffers.ON)


def test_doctor_shows_a_gang_waiting_for_its_buffer_as_held(now: datetime) -> None:
    objects = [*nodes(zone_a=1, zone_b=1), *held_job("grow", 4, now - timedelta(seconds=30))]
    without = doctor.diagnose(objects, HOLD, now=now)
    assert [f.check for f in without.findings] == ["too-big"]
    result = doctor.diagnose(objects, ON, now=now)
    (job,) = result.jobs
    assert result.ok and job.findings == () and job.as_dict()["verdict"] == "held"
    assert job.held is not None
    assert "CapacityBuffer" in job.held and "asks zone-a for 4 × 8 nvidia.com/gpu" in job.held


def test_review_says_which_buffer_the_releaser_would_keep(tmp_path: Path) -> None:
    pj = pytorchjob(workers=3)
    objects = [*nodes(zone_a=1, zone_b=2), pj, *held_pods(pj, 3)]
    config = "zone-chooser: hold\ncapacity-buffers: 'on'\n"
    code, out, _ = review(tmp_path, pytorch_pod(pj, "worker", 2).obj(), objects, config=config)
    assert code == 0 and out is not None
    (verdict,) = out["release"]
    assert verdict["verdict"] == "wait" and not verdict["tooBig"]
    buffer = verdict["buffer"]
    assert (buffer["zone"], buffer["replicas"], buffer["newNodes"]) == ("zone-b", 4, 2)
    assert buffer["write"] and buffer["tried"] == []
