"""``topology``: the tightest domain below the zone that fits a whole gang (BestFit, per-node
fit), the asks from annotations, and a property test against a brute-force scan."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.core import labels, topology, zones
from webhook.core.adapters.base import PodGroup, is_label_value
from webhook.core.settings import Settings, SettingsError

GPU = "nvidia.com/gpu"
L2 = "topology.k8s.aws/network-node-layer-2"
L3 = "topology.k8s.aws/network-node-layer-3"
LEVELS = (L2, L3)


def slot(l2: str | None, l3: str | None, free: int, alloc: int = 8) -> topology.Slot:
    node_labels = {k: v for k, v in ((L2, l2), (L3, l3)) if v is not None}
    return topology.Slot(node_labels, {GPU: free}, {GPU: alloc})


def gang(pods: int, gpus: int = 8) -> list[PodGroup]:
    return [PodGroup(pods, {GPU: gpus})]


# -- asks ------------------------------------------------------------------------------------


def test_no_levels_is_the_zone_alone() -> None:
    assert topology.ask_of({labels.REQUIRED_TOPOLOGY: L3}, ()) == topology.Ask(None)


def test_default_is_preferred_at_the_finest_level() -> None:
    assert topology.ask_of({}, LEVELS) == topology.Ask(1, required=False)


def test_required_and_preferred_name_their_level() -> None:
    assert topology.ask_of({labels.REQUIRED_TOPOLOGY: L2}, LEVELS) == topology.Ask(0, True)
    assert topology.ask_of({labels.PREFERRED_TOPOLOGY: L2}, LEVELS) == topology.Ask(0, False)


def test_an_unknown_level_is_the_zone_alone_said_in_words() -> None:
    ask = topology.ask_of({labels.REQUIRED_TOPOLOGY: "rack"}, LEVELS)
    assert ask.level is None
    assert "'rack' is not one of topology-levels" in ask.note
    assert "zone alone" in ask.note
    choice = topology.choose([slot("a", "x", 8)], gang(1), GPU, LEVELS, ask)
    assert choice.domain == () and choice.why == ask.note and not choice.wait


# -- choice ----------------------------------------------------------------------------------


def test_the_tightest_block_that_fits_wins() -> None:
    slots = [
        slot("a", "a1", 8),
        slot("a", "a1", 8),
        slot("a", "a1", 8),  # a1: 24 free
        slot("a", "a2", 8),
        slot("a", "a2", 8),  # a2: 16 free, tightest for 2 × 8
        slot("a", "a3", 8),  # a3: too small
    ]
    choice = topology.choose(slots, gang(2), GPU, LEVELS, topology.Ask(1))
    assert choice.domain == ((L2, "a"), (L3, "a2"))
    assert "tightest of 2" in choice.why and not choice.wait


def test_per_node_fit_not_sums() -> None:
    """16 GPUs free as 4 × 4 do not take 2 pods of 8."""
    slots = [slot("a", "x", 4)] * 4 + [slot("a", "y", 8), slot("a", "y", 8), slot("a", "y", 0)]
    choice = topology.choose(slots, gang(2), GPU, LEVELS, topology.Ask(1))
    assert choice.domain == ((L2, "a"), (L3, "y"))


def test_preferred_climbs_to_a_coarser_level_then_the_zone() -> None:
    slots = [slot("a", "x", 8), slot("a", "y", 8), slot("b", "z", 8)]
    climbed = topology.choose(slots, gang(2), GPU, LEVELS, topology.Ask(1))
    assert climbed.domain == ((L2, "a"),)
    assert f"no {L3} domain has room" in climbed.why
    zone = topology.choose(slots, gang(3), GPU, LEVELS, topology.Ask(1))
    assert zone.domain == () and not zone.wait and "the zone alone" in zone.why


def test_climbed_it_takes_the_fewest_blocks_below_by_per_node_fit() -> None:
    """No block holds 2 × 8 and layer-2 ``a`` does: below it the two blocks with a whole node
    free, not ``y``, whose 8 GPUs free are split over two nodes."""
    slots = [slot("a", "x", 8), slot("a", "y", 4), slot("a", "y", 4), slot("a", "z", 8)]
    choice = topology.choose(slots, gang(2), GPU, LEVELS, topology.Ask(1))
    assert choice.domain == ((L2, "a"), (L3, "x"), (L3, "z"))
    assert topology.describe(choice.domain) == f"{L2}=a,{L3}=x,z"
    assert f"no {L3} domain has room" in choice.why
    assert f"below it the fewest {L3} domains with room for all of it together: 2" in choice.why
    assert topology.rank(choice.domain) == (2, -2)


def test_with_no_domain_that_fits_it_takes_the_fewest_at_the_top_then_below() -> None:
    """3 × 8 fits no block and no layer-2 domain: the roomiest layer-2 domain (``b``) and the
    tightest that completes it (``a``, before ``c`` by name); their blocks are all needed."""
    slots = [slot("a", "x", 8), slot("b", "y", 8), slot("b", "z", 8), slot("c", "w", 8)]
    choice = topology.choose(slots, gang(3), GPU, LEVELS, topology.Ask(1))
    assert choice.domain == ((L2, "a"), (L2, "b"))
    said = f"no domain of {L2}, {L3} has room for all of it; in the zone the fewest"
    assert choice.why.startswith(said)
    # all of them needed, as with one node more: the zone alone, nothing narrower said
    whole = topology.choose(slots, gang(4), GPU, LEVELS, topology.Ask(1))
    assert whole.domain == () and whole.why.endswith("the zone alone")


def test_a_spread_that_node_selection_cannot_say_exactly_is_not_chosen() -> None:
    """Blocks ``(a, x)`` and ``(b, y)`` hold 2 × 8, but ``L2 In [a, b], L3 In [x, y]`` would
    also take ``(a, y)``: the set taken is ``(a, x)`` with ``(c, w)``; without ``(c, w)``, all
    three (``(a, y)`` named too, as node selection takes it)."""
    slots = [slot("a", "x", 8), slot("b", "y", 8), slot("a", "y", 0), slot("c", "w", 8)]
    found = topology.fewest(slots, LEVELS, 1, gang(2), GPU)
    assert found == (((L2, "a"), (L2, "c"), (L3, "w"), (L3, "x")), 2, 0)
    everything = ((L2, "a"), (L2, "b"), (L3, "x"), (L3, "y"))
    assert topology.fewest(slots[:3], LEVELS, 1, gang(2), GPU) == (everything, 3, 0)
    assert topology.fewest(slots, LEVELS, 1, gang(4), GPU) is None


def test_required_waits_naming_the_level_and_the_roomiest_domain() -> None:
    slots = [slot("a", "x", 8), slot("a", "x", 0), slot("a", "y", 8), slot("b", "z", 8)]
    choice = topology.choose(slots, gang(2), GPU, LEVELS, topology.Ask(1, required=True))
    assert choice.wait and choice.domain == ()
    assert choice.why == (
        f"requires one {L3} domain with 16 nvidia.com/gpu free; the roomiest, x, has "
        "8 nvidia.com/gpu free of 16 nvidia.com/gpu on 2 node(s)"
    )


def test_nodes_lacking_a_levels_label_are_never_chosen_for_it() -> None:
    slots = [slot("a", None, 8), slot("a", None, 8), slot(None, "q", 8), slot(None, "q", 8)]
    assert topology.choose(slots, gang(2), GPU, LEVELS, topology.Ask(1)).domain == ((L2, "a"),)
    waits = topology.choose(slots, gang(2), GPU, LEVELS, topology.Ask(1, required=True))
    assert waits.wait and "no node of its zone carries" in waits.why


def test_describe_parse_requirements() -> None:
    domain = ((L2, "nn-a"), (L3, "nn-b"))
    assert topology.parse(topology.describe(domain)) == domain
    assert topology.parse("") == () and topology.parse("garbage") == ()
    assert topology.requirements(domain) == [
        {"key": L2, "operator": "In", "values": ["nn-a"]},
        {"key": L3, "operator": "In", "values": ["nn-b"]},
    ]
    nodes = {"n1": {L2: "nn-a", L3: "nn-b"}, "n2": {L2: "nn-a", L3: "nn-c"}, "n3": {}}
    assert topology.outside(domain, nodes) == ["n2", "n3"]


def test_a_spread_level_reads_back_and_selects_each_of_its_values() -> None:
    spread = ((L2, "nn-a"), (L3, "b1"), (L3, "b3"))
    text = topology.describe(spread)
    assert text == f"{L2}=nn-a,{L3}=b1,b3"
    assert topology.parse(text) == spread
    # podium before spreads read "b3" (no "=") as malformed: the zone alone, never "In [b1]"
    assert topology.parse("b3") == () and topology.parse(f"{L2}=nn-a,,b3") == ()
    assert topology.requirements(spread) == [
        {"key": L2, "operator": "In", "values": ["nn-a"]},
        {"key": L3, "operator": "In", "values": ["b1", "b3"]},
    ]
    nodes = {
        "n1": {L2: "nn-a", L3: "b1"},
        "n2": {L2: "nn-a", L3: "b2"},
        "n3": {L2: "nn-a", L3: "b3"},
    }
    assert topology.outside(spread, nodes) == ["n2"]
    assert topology.rank(spread) < topology.rank(((L2, "nn-a"), (L3, "b1")))
    assert topology.rank(((L2, "nn-a"),)) < topology.rank(spread)
    assert topology.rank(()) < topology.rank(((L2, "nn-a"), (L2, "nn-b")))


@given(st.text(alphabet="ab=,/.-", max_size=24))
def test_any_recorded_text_reads_as_a_domain_or_the_zone_alone(text: str) -> None:
    """A record or annotation edited by hand never breaks the reader: every pair it reads has a
    key and a value, and what it reads is written back the same way."""
    domain = topology.parse(text)
    assert all(key and is_label_value(value) for key, value in domain)
    assert topology.parse(topology.describe(domain)) == domain


# -- property: against a brute-force scan ------------------------------------------------------


def _brute(
    slots: list[topology.Slot], demand: list[PodGroup], ask: topology.Ask
) -> topology.Domain | None:
    """Every domain of every allowed level, finest allowed first, fit checked by trying every
    assignment of pods to nodes (small inputs only): the tightest that fits; None: none."""
    assert ask.level is not None
    need = sum(g.count * g.requests[GPU] for g in demand)
    pods = [g.requests[GPU] for g in demand for _ in range(g.count)]
    lowest = ask.level if ask.required else 0
    for level in range(ask.level, lowest - 1, -1):
        keys = LEVELS[: level + 1]
        found = []
        for values in {tuple(s.labels.get(k) for k in keys) for s in slots}:
            if not all(values):
                continue
            members = [s for s in slots if tuple(s.labels.get(k) for k in keys) == values]
            frees = [max(0, s.free[GPU]) for s in members]
            fits = any(
                all(
                    sum(p for p, n in zip(pods, where, strict=True) if n == i) <= frees[i]
                    for i in range(len(members))
                )
                for where in itertools.product(range(len(members)), repeat=len(pods))
            )
            if fits:
                found.append((sum(frees) - need, tuple(zip(keys, values, strict=True))))
        if found:
            return min(found)[1]  # type: ignore[return-value]
    return None


def _holds(members: list[topology.Slot], pods: int, size: int) -> bool:
    """One pod size: the pods fit these nodes iff each node's whole pods add up (exact)."""
    return sum(max(0, s.free[GPU]) // size for s in members) >= pods


def _least(
    slots: list[topology.Slot], within: topology.Domain, key: str, pods: int, size: int
) -> int | None:
    """The fewest values of ``key`` among the nodes of ``within`` whose nodes hold the gang."""
    inside = [s for s in slots if topology.selects(within)(s.labels) and s.labels.get(key)]
    values = sorted({s.labels[key] for s in inside})
    for k in range(1, len(values) + 1):
        for chosen in itertools.combinations(values, k):
            if _holds([s for s in inside if s.labels[key] in chosen], pods, size):
                return k
    return None


@settings(max_examples=200, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", None]),
            st.sampled_from(["x", "y", "z", None]),
            st.sampled_from([0, 2, 4, 8]),
        ),
        min_size=1,
        max_size=6,
    ),
    pods=st.integers(1, 4),
    size=st.sampled_from([2, 4, 8]),
    level=st.sampled_from([0, 1]),
    required=st.booleans(),
)
def test_choice_matches_a_brute_force_scan(
    nodes: list[tuple[str | None, str | None, int]],
    pods: int,
    size: int,
    level: int,
    required: bool,
) -> None:
    """The single domain a brute-force scan finds (asked level first, then coarser ones) is
    the one chosen or — climbed — the one the choice narrows; below it, and where no single
    domain fits, the fewest domains that hold the gang; the zone alone only where even every
    labelled node together does not."""
    slots = [slot(a, b, f) for a, b, f in nodes]
    demand = gang(pods, size)
    ask = topology.Ask(level, required)
    choice = topology.choose(slots, demand, GPU, LEVELS, ask)
    expected = _brute(slots, demand, ask)
    assert choice.wait == (required and expected is None)
    chosen = [s for s in slots if topology.selects(choice.domain)(s.labels)]
    if choice.domain:  # the gang packs into the chosen nodes
        assert _holds(chosen, pods, size)
        assert zones.pack_into(demand, [dict(s.free) for s in chosen], GPU)
    by_level = topology.values(choice.domain)
    if expected is not None and len(expected) == level + 1:  # one domain of the asked level
        assert choice.domain == expected
    elif expected is not None:  # climbed to one L2 domain; the fewest L3 domains below it
        assert choice.domain[: len(expected)] == expected
        anchor = [s for s in slots if topology.selects(expected)(s.labels)]
        least = _least(slots, expected, LEVELS[1], pods, size)
        if L3 in by_level:
            assert len(by_level[L3]) == least and len(chosen) < len(anchor)
        else:  # nothing narrower: no set, or one that takes every node of the L2 domain
            assert least is None or least == len({s.labels.get(L3) for s in anchor})
    elif not required:  # no single domain: the fewest domains, or the zone alone
        least = _least(slots, (), L2, pods, size)
        every = least == len({s.labels.get(L2) for s in slots})  # no node lacks L2 either
        if choice.domain:
            assert least is not None and len(chosen) < len(slots)
            if L3 not in by_level:
                assert len(by_level[L2]) == least
        else:  # no set of L2 domains holds it, or only all of them: nothing narrower
            assert least is None or every


# -- settings --------------------------------------------------------------------------------


def test_levels_setting_reads_a_list_of_keys() -> None:
    s = Settings.from_mapping({"topology-levels": [L2, L3, labels.HOSTNAME_LABEL]})
    assert s.topology_levels == (L2, L3, labels.HOSTNAME_LABEL)
    assert Settings().topology_levels == ()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (L2, "a list of node label keys"),
        ([L2, L2], "listed twice"),
        ([labels.ZONE_LABEL], "is the zone, not a level below it"),
        ([labels.HOSTNAME_LABEL, L3], "may only be the last"),
        ([L2, 3], "a list of node label keys (strings)"),
        (["has space"], "is not a node label key"),
    ],
)
def test_levels_setting_errors_in_words(value: object, says: str) -> None:
    with pytest.raises(SettingsError, match="topology-levels") as err:
        Settings.from_mapping({"topology-levels": value})
    assert says in str(err.value)


def test_a_custom_zone_label_is_no_level_either() -> None:
    with pytest.raises(SettingsError, match="only the levels below the zone"):
        Settings.from_mapping({"zone-label": "rack-row", "topology-levels": ["rack-row"]})
