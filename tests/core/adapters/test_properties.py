"""Properties of the adapter set, for any input: nothing raises, keys are label values, claims
do not overlap.

Pods reach the adapters from anyone who can create a pod (and, offline, from any file handed to
``podium review``), so the pods here are arbitrary JSON: metadata, labels, ownerReferences and spec
of every odd type, built around the label keys, kinds and names the adapters look for so that the
deep paths run too, and real pods of every framework with one part replaced by junk.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import owner_ref
from tests.core.adapters import NS, SAMPLES, view
from webhook.core import adapters
from webhook.core.adapters.base import Gang, is_label_value
from webhook.core.objects import key_of

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)

OBJECTS = list({key_of(o): o for *_, objects in SAMPLES for o in objects}.values())
VIEW = view(*OBJECTS)

NAMES = [*sorted({o["metadata"]["name"] for o in OBJECTS}), "sweep-node-0", "vllm-0", ""]
UIDS = [*sorted({o["metadata"]["uid"] for o in OBJECTS}), "", "not a uid", "x" * 70]
API_VERSIONS = [*sorted({o["apiVersion"] for o in OBJECTS}), "kubeflow.org/v1", "v1", "apps"]
KINDS = [*sorted({o["kind"] for o in OBJECTS}), "Job", "StatefulSet", "Pod"]
LABEL_KEYS = sorted(
    {
        k
        for _, _, pod, _ in SAMPLES
        for k in {**pod["metadata"]["labels"], **pod["metadata"]["annotations"]}
    }
)
LABEL_VALUES = st.sampled_from([*NAMES, *UIDS, "0", "1", "master", "launcher", "head", "node"])


def maybe(plausible: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a plausible value, sometimes any JSON at all."""
    return st.one_of(plausible, plausible, JSON)


#: The controller references of the real pods and of the objects in the view: coherent ones, so
#: that arbitrary pods do reach the adapters' deeper paths.
REAL_REFS = [r for _, _, pod, _ in SAMPLES for r in pod["metadata"].get("ownerReferences", [])]
REAL_REFS += [owner_ref(o) for o in OBJECTS]
OWNER_REFS = st.lists(
    maybe(
        st.sampled_from(REAL_REFS)
        | st.fixed_dictionaries(
            {},
            optional={
                "apiVersion": maybe(st.sampled_from(API_VERSIONS)),
                "kind": maybe(st.sampled_from(KINDS)),
                "name": maybe(st.sampled_from(NAMES)),
                "uid": maybe(st.sampled_from(UIDS)),
                "controller": maybe(st.booleans()),
            },
        )
    ),
    max_size=3,
)
REAL_LABELS = [pod["metadata"]["labels"] for _, _, pod, _ in SAMPLES]
STRINGS = maybe(
    st.builds(
        lambda real, extra: {**real, **extra},
        st.sampled_from([{}, *REAL_LABELS]),
        st.dictionaries(st.sampled_from(LABEL_KEYS), maybe(LABEL_VALUES), max_size=6),
    )
)
CONTAINERS = st.lists(
    maybe(
        st.fixed_dictionaries(
            {},
            optional={
                "env": maybe(
                    st.lists(
                        maybe(
                            st.fixed_dictionaries(
                                {
                                    "name": maybe(
                                        st.sampled_from(
                                            [
                                                "WORLD_SIZE",
                                                "PET_NNODES",
                                                "MASTER_ADDR",
                                                "PET_MASTER_ADDR",
                                                "LWS_GROUP_SIZE",
                                            ]
                                        )
                                    ),
                                    "value": maybe(
                                        LABEL_VALUES | st.sampled_from(["4", "2:8", "-1"])
                                    ),
                                }
                            )
                        )
                    )
                ),
                "resources": maybe(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "requests": maybe(
                                st.dictionaries(
                                    st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
                                    maybe(
                                        st.sampled_from(
                                            ["1", "500m", "8", "1e3", "2Gi", "1e999999"]
                                        )
                                    ),
                                )
                            ),
                            "limits": JSON,
                        },
                    )
                ),
            },
        )
    ),
    max_size=3,
)
PODS = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": JSON,
        "kind": JSON,
        "metadata": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": maybe(st.sampled_from(NAMES)),
                    "generateName": JSON,
                    "uid": maybe(st.sampled_from(UIDS)),
                    "labels": STRINGS,
                    "annotations": STRINGS,
                    "ownerReferences": maybe(OWNER_REFS),
                },
            )
        ),
        "spec": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "containers": maybe(CONTAINERS),
                    "initContainers": JSON,
                    "overhead": JSON,
                    "hostname": maybe(st.sampled_from(NAMES)),
                },
            )
        ),
    },
)


@st.composite
def damaged(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one nested part (or the whole) replaced by arbitrary JSON."""
    if not isinstance(value, dict | list) or not value or draw(st.integers(0, 3)) == 0:
        return draw(JSON)
    out = copy.copy(value)
    keys = list(out) if isinstance(out, dict) else list(range(len(out)))
    key = draw(st.sampled_from(keys))
    out[key] = draw(damaged(value[key]))
    return out


DAMAGED_SAMPLES = st.sampled_from(SAMPLES).flatmap(
    lambda s: st.tuples(damaged(s[2]), st.just(s[3]))
)


def check(gang: Gang | None) -> None:
    if gang is not None:
        assert is_label_value(gang.key), gang.key
        assert all(g.count >= 0 for g in gang.demand)
        assert isinstance(gang.total, dict)


@given(pod=PODS)
def test_arbitrary_pods_never_raise(pod: dict[str, Any]) -> None:
    for adapter in adapters.ADAPTERS:
        check(adapter.recognise(pod, NS, VIEW))
    check(adapters.recognise(pod, NS, VIEW))


@given(sample=DAMAGED_SAMPLES)
def test_damaged_real_pods_never_raise(sample: tuple[dict[str, Any], list[Any]]) -> None:
    pod, objects = sample
    snapshot = view(*objects)
    for adapter in adapters.ADAPTERS:
        check(adapter.recognise(pod, NS, snapshot))
    check(adapters.recognise(pod, NS, snapshot))


@given(index=st.integers(0, len(OBJECTS) - 1), data=st.data())
def test_damaged_job_objects_never_raise(index: int, data: st.DataObject) -> None:
    """The view's objects come from the apiserver, but a review may be fed any file."""
    objects = copy.deepcopy(OBJECTS)
    objects[index]["spec"] = data.draw(damaged(objects[index]["spec"]))
    snapshot = view(*objects)
    for _, _, pod, _ in SAMPLES:
        for adapter in adapters.ADAPTERS:
            check(adapter.recognise(pod, NS, snapshot))


@pytest.mark.parametrize("adapter", adapters.ADAPTERS, ids=lambda a: a.name)
@pytest.mark.parametrize(
    ("framework", "pod", "objects"), [pytest.param(f, p, o, id=i) for f, i, p, o in SAMPLES]
)
def test_exactly_one_adapter_claims_each_framework_pod(
    adapter: Any, framework: str, pod: Any, objects: Any
) -> None:
    claimed = adapter.recognise(pod, NS, view(*objects)) is not None
    assert claimed == (adapter.name == framework)


def test_registry_order() -> None:
    assert [a.name for a in adapters.ADAPTERS] == [
        "training-operator",
        "mpi-operator",
        "jobset",
        "leaderworkerset",
        "volcano",
        "kuberay",
    ]


def test_non_mapping_pod_is_not_a_training_pod() -> None:
    assert adapters.recognise(["not", "a", "pod"], NS, VIEW) is None  # type: ignore[arg-type]
