"""``bench.latency.together``: the burst with the no-op and podium serving it at once. Each arm's
configuration is the shipped one but for its names and one namespace term; pods alternate."""

from __future__ import annotations

import yaml

from bench.latency import burst, together
from testbed.podium import WEBHOOK_MANIFEST


def test_each_arm_gets_the_shipped_configuration_renamed_and_limited_to_its_namespaces() -> None:
    shipped = yaml.safe_load(WEBHOOK_MANIFEST.read_text())
    for arm in ("noop", "hold", "pin"):
        config = together.restrict(shipped, arm)
        assert config["metadata"]["name"] == f"bench-{arm}"
        (hook,) = config["webhooks"]
        (original,) = shipped["webhooks"]
        assert hook["name"] == together.NAMES[arm]
        terms = hook["namespaceSelector"]["matchExpressions"]
        assert terms[:-1] == original["namespaceSelector"]["matchExpressions"]
        assert terms[-1] == {"key": together.ARM_LABEL, "operator": "In", "values": [arm]}
        rest = {k: v for k, v in hook.items() if k not in ("name", "namespaceSelector")}
        assert rest == {k: v for k, v in original.items() if k not in ("name", "namespaceSelector")}
    # The shipped configuration itself is left as it was.
    assert shipped == yaml.safe_load(WEBHOOK_MANIFEST.read_text())
    # podium's arm keeps the webhook name the sequential burst reads.
    assert together.NAMES["hold"] == burst.WEBHOOK
    assert len(set(together.NAMES.values())) == len(together.NAMES)


def test_pods_alternate_between_the_arms_until_every_one_is_taken() -> None:
    mixed = together.interleave({"noop": [1, 2, 3], "hold": ["a", "b"]})
    assert mixed == [("noop", 1), ("hold", "a"), ("noop", 2), ("hold", "b"), ("noop", 3)]
    assert together.interleave({}) == []


def _run(mode: str, seconds: float, count: int = 4) -> dict[str, object]:
    return {"mode": mode, "histogram": {"buckets": {}, "count": count, "sum": seconds}}


def test_each_rounds_ratio_is_read_against_that_rounds_noop() -> None:
    rounds = [
        [_run("noop", 0.04), _run("hold", 0.06)],
        [_run("noop", 0.08), _run("hold", 0.06)],
        [_run("noop", 0.04, count=0), _run("hold", 0.06)],  # no no-op calls: left out
    ]
    assert together.ratios(rounds, "hold") == [1.5, 0.75]
    assert together.ratios(rounds, "pin") == []
