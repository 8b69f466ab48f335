"""The adapters against the pods the real operators created (tests/fixtures/operators/).

Each golden file holds what one real operator made of its example: the job, the objects between
it and the pods, and every pod as its controller POSTed it (``created``) and as stored after the
other pod webhooks (``stored``: labels, annotations, env). Here each pod, in creation order, is
put through ``recognise`` with the job, the intermediates and the pods created before it in the
view, and must be the framework's gang with the right role, coordinator and gang size.

The pod under review is the created body with the stored labels, annotations and env: what
podium sees, since the operators' own pod webhooks (LWS, JobSet) are called before podium's
(webhook configurations run in name order) or podium is reinvoked after them.
"""

from __future__ import annotations

import copy
import fnmatch
import re
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core import adapters
from webhook.core.adapters import recognise
from webhook.core.adapters.base import Gang
from webhook.core.view import ClusterView

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "operators"
FILES = sorted(FIXTURES.glob("*.yaml"))
NS = "NAMESPACE"
ZONE = "topology.kubernetes.io/zone"
#: The golden files replace UIDs by ``UID(<Kind>/<name>)``, which is no valid label value (a
#: gang key is one): map each placeholder to a stable UUID.
PLACEHOLDER = re.compile(r"UID\([^)]*\)")


@dataclass(frozen=True)
class Expect:
    framework: str
    owner_kind: str
    #: pods per gang
    size: int
    #: pod-name pattern -> role; the first matching pattern wins
    roles: tuple[tuple[str, str], ...]
    #: pod-name patterns of the coordinators (one per gang)
    coordinators: tuple[str, ...]
    gangs: int = 1


EXPECT: dict[str, Expect] = {
    "pytorchjob": Expect(
        "pytorchjob",
        "PyTorchJob",
        3,
        (("*-master-*", "master"), ("*-worker-*", "worker")),
        ("pytorch-simple-master-0",),
    ),
    # No master: worker 0 coordinates.
    "pytorchjob-elastic": Expect(
        "pytorchjob",
        "PyTorchJob",
        2,
        (("*", "worker"),),
        ("elastic-example-echo-worker-0",),
    ),
    "tfjob": Expect("tfjob", "TFJob", 2, (("*", "worker"),), ("tfjob-simple-worker-0",)),
    "xgboostjob": Expect(
        "xgboostjob",
        "XGBoostJob",
        3,
        (("*-master-*", "master"), ("*-worker-*", "worker")),
        ("xgboost-dist-iris-test-train-master-0",),
    ),
    "paddlejob": Expect(
        "paddlejob", "PaddleJob", 2, (("*", "worker"),), ("paddle-simple-gpu-worker-0",)
    ),
    "jaxjob": Expect("jaxjob", "JAXJob", 2, (("*", "worker"),), ("jaxjob-simple-worker-0",)),
    # The launcher comes last (its batch Job is created after the workers) and coordinates.
    "mpijob": Expect(
        "mpijob",
        "MPIJob",
        3,
        (("*-worker-[0-9]", "worker"), ("*-launcher-*", "launcher")),
        ("pi-launcher-*",),
    ),
    "mpijob-launcher-as-worker": Expect(
        "mpijob",
        "MPIJob",
        3,
        (("*-worker-[0-9]", "worker"), ("*-launcher-*", "launcher")),
        ("pi-launcher-as-worker-launcher-*",),
    ),
    "jobset": Expect("jobset", "JobSet", 4, (("*", "workers"),), ("pytorch-workers-0-0-*",)),
    # Trainer v2 → JobSet → Job → pod: the record belongs to the JobSet Trainer owns.
    "trainjob": Expect(
        "trainjob", "JobSet", 3, (("*", "node"),), ("multi-node-example-node-0-0-*",)
    ),
    # Two groups of three: a gang per group, its leader the coordinator.
    "leaderworkerset": Expect(
        "leaderworkerset",
        "LeaderWorkerSet",
        3,
        (("leaderworkerset-sample-?", "leader"), ("*", "worker")),
        ("leaderworkerset-sample-0", "leaderworkerset-sample-1"),
        gangs=2,
    ),
    "raycluster": Expect(
        "raycluster",
        "RayCluster",
        4,
        (("*-head-*", "head"), ("*", "worker")),
        ("raycluster-kuberay-head-*",),
    ),
    "volcanojob": Expect(
        "volcanojob",
        "Job",
        3,
        (("*-mpimaster-*", "mpimaster"), ("*-mpiworker-*", "mpiworker")),
        ("lm-mpi-job-mpimaster-0",),
    ),
}


def _uids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _uids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_uids(v) for v in value]
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: str(uuid.uuid5(uuid.NAMESPACE_URL, m.group(0))), value)
    return value


def _load(path: Path) -> dict[str, Any]:
    golden: dict[str, Any] = yaml.safe_load(path.read_text())
    return golden


def _pods(golden: dict[str, Any], *, admitted: bool) -> list[dict[str, Any]]:
    """Every pod in creation order, as its controller created it, named and namespaced;
    ``admitted``: with the labels, annotations and env it had once stored."""
    pods = []
    for entry in sorted(golden["pods"], key=lambda p: p["order"]):
        pod = copy.deepcopy(entry["created"])
        meta = pod["metadata"]
        meta.update(name=entry["name"], namespace=NS, uid=f"UID(Pod/{entry['name']})")
        if admitted:
            stored = entry["stored"]
            meta["labels"] = stored["labels"]
            meta["annotations"] = stored["annotations"]
            spec = pod["spec"]
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                container["env"] = stored["env"].get(container["name"], [])
        pods.append(pod)
    result: list[dict[str, Any]] = _uids(pods)
    return result


def _objects(golden: dict[str, Any]) -> list[dict[str, Any]]:
    objects = [golden["job"], *(o for items in golden["intermediates"].values() for o in items)]
    objects = copy.deepcopy(objects)
    for obj in objects:
        obj["metadata"].setdefault("namespace", NS)
    result: list[dict[str, Any]] = _uids(objects)
    return result


def _gangs(golden: dict[str, Any], *, admitted: bool) -> list[tuple[str, Gang | None]]:
    """Each pod's name and gang, reviewed in creation order with the pods before it in view."""
    objects = _objects(golden)
    pods = _pods(golden, admitted=admitted)
    answers = []
    for index, pod in enumerate(pods):
        view = ClusterView.from_objects(
            [*objects, *pods[:index]], zone_label=ZONE, kept=adapters.KEPT
        )
        review = copy.deepcopy(pod)
        # What the webhook gets: no UID yet, and no name when the controller generates it.
        del review["metadata"]["uid"]
        if review["metadata"].get("generateName"):
            del review["metadata"]["name"]
        answers.append((pod["metadata"]["name"], recognise(review, NS, view)))
    return answers


def _role(expect: Expect, name: str) -> str:
    return next(role for pattern, role in expect.roles if fnmatch.fnmatchcase(name, pattern))


def test_every_golden_file_has_expectations() -> None:
    assert FILES
    assert {_load(p)["framework"] for p in FILES} == set(EXPECT)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_adapter_recognises_every_pod_the_real_operator_created(path: Path) -> None:
    golden = _load(path)
    expect = EXPECT[golden["framework"]]
    job = _uids(golden["job"])
    answers = _gangs(golden, admitted=True)
    unrecognised = [name for name, gang in answers if gang is None]
    assert not unrecognised, unrecognised
    gangs = {name: gang for name, gang in answers if gang is not None}
    for name, gang in gangs.items():
        assert gang.framework == expect.framework, name
        assert gang.owner.kind == expect.owner_kind, name
        assert gang.role == _role(expect, name), name
        coordinator = any(fnmatch.fnmatchcase(name, p) for p in expect.coordinators)
        assert gang.coordinator == coordinator, name
        assert sum(group.count for group in gang.demand) == expect.size, (name, gang.demand)
        assert gang.demand_source == "job", name
        if expect.owner_kind == job["kind"]:
            assert gang.owner.uid == job["metadata"]["uid"], name
    sizes = Counter(gang.key for gang in gangs.values())
    assert sorted(sizes.values()) == [expect.size] * expect.gangs, sizes
    # Exactly one coordinator per gang.
    assert Counter(g.key for g in gangs.values() if g.coordinator) == Counter(set(sizes)), sizes


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_before_the_operators_own_pod_webhook(path: Path) -> None:
    """The pod exactly as its controller POSTed it, before any other pod webhook.

    Every adapter but LWS's reads only what the controller itself writes. LWS's leader pods
    get ``group-index`` and the workers ``worker-index`` from LWS's own pod webhook: podium
    relies on that webhook having run (its configuration sorts before podium's, and podium is
    reinvoked if it runs later)."""
    golden = _load(path)
    before = dict(_gangs(golden, admitted=False))
    after = dict(_gangs(golden, admitted=True))
    if golden["framework"] != "leaderworkerset":
        assert before == after
        return
    leaders = {n for n in before if fnmatch.fnmatchcase(n, "leaderworkerset-sample-?")}
    assert {n for n, g in before.items() if g is None} == leaders
    assert {g.role for n, g in before.items() if g is not None} == {"unknown"}
