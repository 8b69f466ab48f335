"""The helpers every adapter shares (``webhook/core/adapters/base.py``) and the merged
declarations of what the adapters read (``webhook/core/adapters/__init__.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import PodBuilder
from tests.scenarios import pytorchjob
from webhook.core import adapters
from webhook.core.adapters import base
from webhook.core.view import ClusterView


@pytest.mark.parametrize(
    ("value", "count"),
    [(None, 3), (0, 0), (4, 4), ("4", 4), (4.0, 4), (-1, None), ("x", None), (True, None)],
)
def test_parse_count(value: Any, count: int | None) -> None:
    assert base.parse_count(value, default=3) == count


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("3f1c2b5e-0000-4000-8000-000000000001", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("-a", False),
        ("a.b_c-d", True),
        ("", False),
        (7, False),
    ],
)
def test_label_values(value: object, valid: bool) -> None:
    """k8s.io/apimachinery ``pkg/util/validation/validation.go``, IsValidLabelValue."""
    assert base.is_label_value(value) is valid


def test_the_controller_must_be_of_the_asked_kind_and_group_and_well_formed() -> None:
    pod = PodBuilder(name="p").owner("batch/v1", "Job", "j", "uid-1").obj()
    assert base.controller(pod, "batch", ("Job",)) == pod["metadata"]["ownerReferences"][0]
    assert base.controller(pod, "", ("Job",)) is None
    assert base.controller(pod, "batch", ("CronJob",)) is None
    bad_uid = PodBuilder(name="p").owner("batch/v1", "Job", "j", "not a uid!").obj()
    assert base.controller(bad_uid, "batch", ("Job",)) is None


def test_env_world_reads_a_literal_world_size() -> None:
    assert base.env_world(PodBuilder().env("PET_NNODES", "2:4").obj()) == 4
    assert base.env_world(PodBuilder().env("WORLD_SIZE", "8").obj()) == 8
    assert base.env_world(PodBuilder().env("WORLD_SIZE", "$(N)").obj()) is None


def test_total_of_multiplies_each_group() -> None:
    demand = [base.PodGroup(2, {"cpu": 1000, "pods": 1}), base.PodGroup(3, {"pods": 1})]
    assert base.total_of(demand) == {"cpu": 2000, "pods": 5}


def test_the_merged_declarations_keep_each_kind_once_in_the_adapters_order() -> None:
    kinds = [(k.api_version, k.kind) for k in adapters.KINDS]
    assert len(set(kinds)) == len(kinds)
    assert kinds[0] == ("kubeflow.org/v1", "PyTorchJob")
    assert ("batch/v1", "Job") in kinds  # declared by both mpi-operator and JobSet
    every = {k for a in adapters.ADAPTERS for k in a.reads.kinds}
    assert set(adapters.KINDS) == every
    assert set(base.WORLD_SIZE_ENV) <= adapters.KEPT.env


@pytest.mark.parametrize("group", [None, "2"])
def test_job_of_gang_reads_a_job_wide_or_a_per_group_key(group: str | None) -> None:
    pj = pytorchjob()
    uid = pj["metadata"]["uid"]
    key = uid if group is None else base.group_gang_key(uid, group)
    view = ClusterView.from_objects([pj], zone_label="z", kept=adapters.KEPT)
    assert base.job_of_gang(key, view) == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": pj["metadata"]["name"],
        "uid": uid,
    }
    assert base.job_of_gang("not-a-uid", view) == {}
