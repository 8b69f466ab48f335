"""LeaderWorkerSet: input pod + view → the gang of the pod's group."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import JobBuilder
from tests.core.adapters import (
    LWS,
    NS,
    SAMPLES,
    cpu_template,
    cpus,
    gpus,
    leaderworkerset,
    lws_pod,
    statefulset,
    uid,
    view,
    without_controller,
    without_owners,
)
from webhook.core.adapters.base import Gang, OwnerRef, PodGroup
from webhook.core.adapters.lws import LeaderWorkerSetAdapter

ADAPTER = LeaderWorkerSetAdapter()

VLLM = leaderworkerset("vllm", size=4, uid=uid(1), leader=cpu_template("8"))
VLLM_NEWER = leaderworkerset("vllm", size=4, uid=uid(2))
LEADER_STS = statefulset("vllm", VLLM, uid=uid(3))
LEADER_STS_OF_NEWER = statefulset("vllm", VLLM_NEWER, uid=uid(3))
LEADER_STS_NEWER = statefulset("vllm", VLLM_NEWER, uid=uid(8))
LEADER_1 = lws_pod(VLLM, LEADER_STS, 1, 0).uid(uid(4)).obj()
WORKER_STS_1 = statefulset("vllm-1", LEADER_1, uid=uid(5))
SAME_TEMPLATE = leaderworkerset("same", size=2, uid=uid(6))
SAME_STS = statefulset("same", SAME_TEMPLATE, uid=uid(7))

VLLM_GROUP = (PodGroup(1, cpus(8)), PodGroup(3, gpus(8)))


def gang(
    group: int,
    worker: int,
    demand: Any = VLLM_GROUP,
    source: Any = "job",
    *,
    lws: dict[str, Any] = VLLM,
) -> Gang:
    meta = lws["metadata"]
    return Gang(
        framework="leaderworkerset",
        owner=OwnerRef("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", meta["name"], meta["uid"]),
        key=f"{meta['uid']}-g{group}",
        role="leader" if worker == 0 else "worker",
        coordinator=worker == 0,
        demand=demand,
        demand_source=source,
        member_labels={LWS + "name": meta["name"], LWS + "group-index": str(group)},
    )


CASES = [
    pytest.param(lws_pod(VLLM, LEADER_STS, 0, 0), [VLLM, LEADER_STS], gang(0, 0), id="leader-0"),
    pytest.param(
        lws_pod(VLLM, LEADER_STS, 1, 0), [VLLM, LEADER_STS], gang(1, 0), id="leader-1-own-gang"
    ),
    pytest.param(
        lws_pod(VLLM, WORKER_STS_1, 1, 2),
        [VLLM, LEADER_STS, LEADER_1, WORKER_STS_1],
        gang(1, 2),
        id="worker-whole-chain-in-view",
    ),
    pytest.param(
        lws_pod(VLLM, WORKER_STS_1, 1, 3), [VLLM], gang(1, 3), id="worker-only-lws-in-view"
    ),
    pytest.param(
        lws_pod(SAME_TEMPLATE, SAME_STS, 0, 1),
        [SAME_TEMPLATE, SAME_STS],
        gang(0, 1, (PodGroup(1, gpus(8)), PodGroup(1, gpus(8))), lws=SAME_TEMPLATE),
        id="no-leader-template-leader-uses-worker-template",
    ),
]


@pytest.mark.parametrize(("pod", "objects", "expected"), CASES)
def test_recognise(pod: Any, objects: list[Any], expected: Gang) -> None:
    assert ADAPTER.recognise(pod.obj(), NS, view(*objects)) == expected


def test_without_a_usable_template_the_group_size_env_counts() -> None:
    broken = leaderworkerset("vllm", size=4, uid=uid(1))
    broken["spec"]["leaderWorkerTemplate"] = {"size": "four"}
    got = ADAPTER.recognise(lws_pod(VLLM, LEADER_STS, 0, 0).obj(), NS, view(broken))
    assert got == gang(0, 0, (PodGroup(4, gpus(8)),), "env")


def pod_with(**labels: str) -> dict[str, Any]:
    pod = lws_pod(VLLM, LEADER_STS, 0, 0).obj()
    pod["metadata"]["labels"].update(labels)
    return pod


@pytest.mark.parametrize(
    ("pod", "objects"),
    [
        pytest.param(lws_pod(VLLM, LEADER_STS, 0, 0).obj(), [LEADER_STS], id="lws-not-in-view"),
        pytest.param(
            lws_pod(VLLM, LEADER_STS, 0, 0).obj(),
            [VLLM_NEWER, LEADER_STS_NEWER],
            id="pod-of-an-older-lws-same-name",
        ),
        pytest.param(
            lws_pod(VLLM, LEADER_STS, 0, 0).obj(),
            [VLLM, LEADER_STS_OF_NEWER],
            id="statefulset-chain-leads-to-another-lws",
        ),
        pytest.param(
            lws_pod(VLLM, WORKER_STS_1, 1, 2).obj(),
            [VLLM, LEADER_STS, lws_pod(VLLM, LEADER_STS, 1, 0).uid(uid(10)).obj(), WORKER_STS_1],
            id="worker-set-owned-by-a-replaced-leader-pod",
        ),
        pytest.param(
            lws_pod(VLLM, statefulset("web", VLLM, uid=uid(9)), 0, 0).obj(),
            [VLLM],
            id="statefulset-name-does-not-fit",
        ),
        pytest.param(
            lws_pod(VLLM, statefulset("vllmx", VLLM, uid=uid(9)), 0, 0).obj(),
            [VLLM],
            id="statefulset-name-only-shares-a-prefix",
        ),
        pytest.param(
            lws_pod(
                VLLM, JobBuilder("apps/v1", "StatefulSet", "vllm", NS).uid(uid(3)).obj(), 0, 0
            ).obj(),
            [VLLM, JobBuilder("apps/v1", "StatefulSet", "vllm", NS).uid(uid(3)).obj()],
            id="statefulset-controlled-by-nothing",
        ),
        pytest.param(pod_with(**{LWS + "group-index": "one"}), [VLLM], id="group-index-odd"),
        pytest.param(without_owners(pod_with()), [VLLM, LEADER_STS], id="labels-no-owner"),
        pytest.param(without_controller(pod_with()), [VLLM, LEADER_STS], id="not-controller"),
    ],
)
def test_not_ours(pod: Any, objects: list[Any]) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None


def test_pod_with_generate_name_only() -> None:
    pod = lws_pod(VLLM, LEADER_STS, 0, 0).obj()
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "vllm-"
    assert ADAPTER.recognise(pod, NS, view(VLLM, LEADER_STS)) == gang(0, 0)


@pytest.mark.parametrize(
    ("framework", "pod", "objects"),
    [pytest.param(f, p, o, id=i) for f, i, p, o in SAMPLES if f != ADAPTER.name],
)
def test_other_frameworks_pods_are_not_ours(framework: str, pod: Any, objects: Any) -> None:
    assert ADAPTER.recognise(pod, NS, view(*objects)) is None
