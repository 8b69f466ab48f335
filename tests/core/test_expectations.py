"""The releaser's memory (webhook/core/expectations.py) as tables: when a pass waits for the watch
to show what was ungated, which waits are audited, which held pods are annotated — and, as a
property, that catching up keeps exactly the pods the view still shows gated within patience."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.expectations import Expectations, HeldPod, PodKey


@dataclasses.dataclass(frozen=True)
class Shown:
    uid: str
    gated: bool


@dataclasses.dataclass(frozen=True)
class View:
    """What the watch shows: (namespace, name) → the pod, absent when gone."""

    pods: Mapping[tuple[str, str], Shown]

    def pod(self, namespace: str, name: str) -> Shown | None:
        return self.pods.get((namespace, name))


A = PodKey("ns", "a", "uid-a")
B = PodKey("ns", "b", "uid-b")


@pytest.mark.parametrize(
    ("shown", "at", "waiting", "overdue"),
    [
        pytest.param(Shown("uid-a", gated=True), 95.0, (A,), (), id="still-gated: wait"),
        pytest.param(Shown("uid-a", gated=False), 95.0, (), (), id="shown-released: done"),
        pytest.param(None, 95.0, (), (), id="gone: done"),
        pytest.param(Shown("other", gated=True), 95.0, (), (), id="recreated: done"),
        pytest.param(Shown("uid-a", gated=True), 60.0, (), ((A, 40.0),), id="past-patience"),
        pytest.param(Shown("uid-a", gated=True), 70.0, (A,), (), id="at-patience: wait"),
    ],
)
def test_a_pass_waits_for_the_pods_it_ungated_until_the_view_shows_them(
    shown: Shown | None,
    at: float,
    waiting: tuple[PodKey, ...],
    overdue: tuple[tuple[PodKey, float], ...],
) -> None:
    memory = Expectations().ungate([A], at=at)
    view = View({("ns", "a"): shown} if shown else {})
    caught = memory.catch_up(view, now=100.0, patience=30.0)
    assert (caught.waiting, caught.overdue, caught.caught_up) == (waiting, overdue, not waiting)
    assert tuple(caught.store.ungated) == waiting
    assert memory.ungated == {A: at}  # the value in is unchanged


def test_nothing_ungated_is_caught_up() -> None:
    caught = Expectations().catch_up(View({}), now=0.0, patience=30.0)
    assert caught.caught_up and caught.store == Expectations()


def test_ungating_again_keeps_the_later_time_and_the_other_pods() -> None:
    memory = Expectations().ungate([A, B], at=1.0).ungate([A], at=5.0)
    assert memory.ungated == {A: 5.0, B: 1.0}


@pytest.mark.parametrize(
    ("before", "waiting", "changed", "after"),
    [
        pytest.param({}, [("g1", "x")], ("g1",), {"g1": "x"}, id="new-gang"),
        pytest.param({"g1": "x"}, [("g1", "x")], (), {"g1": "x"}, id="same-why"),
        pytest.param({"g1": "x"}, [("g1", "y")], ("g1",), {"g1": "y"}, id="why-changed"),
        pytest.param({"g1": "x"}, [], (), {}, id="no-longer-waits: forgotten"),
        pytest.param(
            {"g1": "x", "g2": "y"},
            [("g2", "y"), ("g3", "z"), ("g1", "w")],
            ("g3", "g1"),
            {"g1": "w", "g2": "y", "g3": "z"},
            id="in-plan-order",
        ),
    ],
)
def test_a_wait_is_reported_when_its_why_is_new(
    before: dict[str, str],
    waiting: list[tuple[str, str]],
    changed: tuple[str, ...],
    after: dict[str, str],
) -> None:
    memory, reported = dataclasses.replace(Expectations(), reported=before).report(waiting)
    assert (reported, dict(memory.reported)) == (changed, after)


def held(uid: str, shown: str | None, why: str) -> HeldPod:
    return HeldPod("ns", f"pod-{uid}", uid, shown, why)


@pytest.mark.parametrize(
    ("said", "pod", "write"),
    [
        pytest.param({}, held("u", None, "x"), True, id="never-said"),
        pytest.param({}, held("u", "x", "x"), False, id="shown-already"),
        pytest.param({"u": "x"}, held("u", None, "x"), False, id="said-view-lags"),
        pytest.param({"u": "x"}, held("u", "x", "y"), True, id="why-changed"),
        pytest.param({"u": ""}, held("u", None, "x"), True, id="write-failed-before"),
    ],
)
def test_a_held_pod_is_annotated_only_when_its_why_is_neither_shown_nor_said(
    said: dict[str, str], pod: HeldPod, write: bool
) -> None:
    memory = dataclasses.replace(Expectations(), said=said)
    assert memory.to_say([pod]) == ((pod,) if write else ())


def test_what_was_said_is_remembered_but_a_failed_write_is_not() -> None:
    pods = [held("u1", None, "x"), held("u2", None, "x"), held("u3", None, "y")]
    memory = dataclasses.replace(Expectations(), said={"u2": "old", "gone": "z"})
    after = memory.said_to(pods, failed={"u2", "u3"})
    assert dict(after.said) == {"u1": "x", "u2": "old", "u3": ""}
    assert after.to_say(pods) == (pods[1], pods[2])  # tried again next pass


def test_counts_are_kept_for_the_next_pass_and_the_memory_is_frozen() -> None:
    memory = Expectations().counted({"g": 3})
    assert memory.counts == {"g": 3}
    with pytest.raises(TypeError):
        memory.counts["g"] = 4  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        memory.counts = {}  # type: ignore[misc]


names = st.sampled_from(["a", "b", "c", "d", "e"])
shown_pods = st.one_of(
    st.none(), st.builds(Shown, st.sampled_from(["uid-1", "uid-2"]), st.booleans())
)


@given(
    st.dictionaries(
        st.builds(PodKey, st.just("ns"), names, st.sampled_from(["uid-1", "uid-2"])),
        st.floats(0, 100),
    ),
    st.dictionaries(names, shown_pods),
    st.floats(0, 60),
)
def test_catching_up_keeps_exactly_the_pods_still_shown_gated_within_patience(
    ungated: dict[PodKey, float], shown: dict[str, Shown | None], patience: float
) -> None:
    """Against a scan: every ungated pod ends in exactly one of forgotten (shown released, gone
    or recreated), waiting (still gated, within patience) and overdue (still gated, past it)."""
    view = View({("ns", n): s for n, s in shown.items() if s is not None})
    memory = dataclasses.replace(Expectations(), ungated=ungated)
    caught = memory.catch_up(view, now=100.0, patience=patience)
    for key, at in ungated.items():
        pod = view.pod(key.namespace, key.name)
        still = pod is not None and pod.uid == key.uid and pod.gated
        assert (key in caught.waiting) == (still and 100.0 - at <= patience)
        assert (key in dict(caught.overdue)) == (still and 100.0 - at > patience)
    assert dict(caught.store.ungated) == {k: ungated[k] for k in caught.waiting}
    # Catching up again with the same view changes nothing more.
    again = caught.store.catch_up(view, now=100.0, patience=patience)
    assert (again.waiting, again.overdue, again.store) == (caught.waiting, (), caught.store)
