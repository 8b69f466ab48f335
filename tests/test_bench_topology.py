"""The topology study (bench/placement/topology.py, topostudy.py) and its all-reduce cost model
(bench/placement/allreduce.py): the cost model ranks placements as it says, the per-gang spans
are read from the bound pods' nodes, the cluster carries EKS's layer labels, each arm changes
only what it says, and the goal table judges what it says. No cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bench.placement import allreduce, arms, runner, study, topology, topostudy, trace
from bench.placement.allreduce import CROSS_BLOCK, INTRA_BLOCK, INTRA_NODE, Fabric
from bench.placement.trace import TraceJob
from webhook.core.settings import Settings

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"

# -- the cost model -------------------------------------------------------------------------------


def test_a_ring_has_the_hops_its_placement_crosses() -> None:
    assert allreduce.ring_hops([("b0", "n0", 8)]) == {INTRA_NODE}
    assert allreduce.ring_hops([("b0", "n0", 1)]) == set()
    assert allreduce.ring_hops([("b0", "n0", 1), ("b0", "n1", 1)]) == {INTRA_BLOCK}
    assert allreduce.ring_hops([("b0", "n0", 4), ("b0", "n1", 4)]) == {INTRA_NODE, INTRA_BLOCK}
    assert allreduce.ring_hops([("b0", "n0", 4), ("b1", "n1", 4)]) == {INTRA_NODE, CROSS_BLOCK}


def test_a_ring_allreduce_takes_2_p_minus_1_over_p_of_the_message_at_its_slowest_hop() -> None:
    fabric = Fabric(intra_node_gbs=400.0, intra_block_gbs=40.0, cross_block_oversubscription=4.0)
    gigabyte = 1e9
    one_node = [("b0", "n0", 4), ("b0", "n0", 4)]
    assert allreduce.allreduce_seconds(gigabyte, one_node, fabric) == pytest.approx(
        2 * 7 / 8 / 400.0
    )
    two_blocks = [("b0", "n0", 4), ("b1", "n1", 4)]
    assert allreduce.allreduce_seconds(gigabyte, two_blocks, fabric) == pytest.approx(
        2 * 7 / 8 / 10.0
    )
    assert allreduce.allreduce_seconds(gigabyte, [("b0", "n0", 1)], fabric) == 0.0


def test_the_tightest_placement_packs_nodes_then_blocks() -> None:
    assert allreduce.tightest(4, 2, 8, 4) == [("b0", "n0", 2)] * 4
    assert allreduce.fewest_nodes(32, 8, 8) == 32
    assert allreduce.fewest_blocks(32, 8, 8, 4) == 8
    assert allreduce.fewest_blocks(4, 8, 8, 4) == 1
    assert allreduce.fewest_blocks(5, 8, 8, 4) == 2
    assert allreduce.fewest_nodes(3, 3, 8) == 2  # two 3-GPU pods per 8-GPU node


def test_spreading_a_gang_costs_what_the_bandwidths_say() -> None:
    fabric = Fabric()
    shape = {"gpus_per_node": 8, "nodes_per_block": 4, "fabric": fabric}
    packed = [("b0", "n0", 4), ("b0", "n0", 4)]
    spread = [("b0", "n0", 4), ("b0", "n1", 4)]
    split = [("b0", "n0", 4), ("b1", "n1", 4)]
    assert allreduce.comm_ratio(packed, **shape) == 1.0
    assert allreduce.comm_ratio(spread, **shape) == pytest.approx(450.0 / 50.0)
    assert allreduce.comm_ratio(split, **shape) == pytest.approx(450.0 / 25.0)
    # A gang that cannot fit one node: spread within a block is its tightest.
    nodes = [("b0", f"n{i}", 8) for i in range(4)]
    assert allreduce.comm_ratio(nodes, **shape) == 1.0
    assert allreduce.comm_ratio([*nodes[:3], ("b1", "n9", 8)], **shape) == pytest.approx(2.0)
    assert allreduce.step_time_ratio(1.0) == 1.0
    assert allreduce.step_time_ratio(3.0, comm_share=0.25) == pytest.approx(1.5)


@given(
    gpus=st.sampled_from([1, 2, 4, 8]),
    picks=st.lists(st.integers(0, 31), min_size=1, max_size=32),
)
def test_no_placement_that_respects_node_capacity_beats_the_tightest(
    gpus: int, picks: list[int]
) -> None:
    free = dict.fromkeys(range(32), 8)
    pods = []
    for pick in picks:
        node = next((n for n in [*range(pick, 32), *range(pick)] if free[n] >= gpus), None)
        if node is None:
            break
        free[node] -= gpus
        pods.append((f"b{node // 4}", f"n{node}", gpus))
    ratio = allreduce.comm_ratio(pods, gpus_per_node=8, nodes_per_block=4)
    assert ratio >= 1.0
    assert ratio in {1.0, 2.0, 9.0, 18.0}  # the bandwidths' ratios: nothing in between


# -- the cluster ----------------------------------------------------------------------------------


def test_the_cluster_is_two_zones_of_four_blocks_of_four_8_gpu_nodes_with_eks_labels() -> None:
    nodes = topology.node_objects()
    assert len(nodes) == 32 == topology.CAPACITY // 8
    labels = [n["metadata"]["labels"] for n in nodes]
    assert all(n["status"]["allocatable"]["nvidia.com/gpu"] == "8" for n in nodes)
    blocks: dict[str, set[str]] = {}
    for label in labels:
        assert set(topology.LAYERS) <= set(label)
        blocks.setdefault(label[topology.BLOCK_LABEL], set()).add(label[arms.ZONE_LABEL])
    assert len(blocks) == 8 and all(len(zones) == 1 for zones in blocks.values())
    per_block = [sum(1 for lb in labels if lb[topology.BLOCK_LABEL] == b) for b in blocks]
    assert per_block == [4] * 8
    assert topology.BLOCK_LABEL == "topology.k8s.aws/network-node-layer-3"
    layout = topology.TopologyLayout()
    assert layout.zone_gpus() == {"zone-a": 128, "zone-b": 128}
    assert layout.capacity() == 256


def test_the_main_studys_layout_is_unchanged() -> None:
    layout = runner.Layout()
    assert layout.zone_gpus() == {"zone-a": 96, "zone-b": 64, "zone-c": 40}
    assert layout.capacity() == trace.capacity() == 200
    assert layout.describe() is None and layout.recorded_labels == ()


def test_the_topology_trace_keeps_the_main_studys_mix_up_to_one_zone() -> None:
    spec = topology.spec()
    assert spec.max_gpus == 128
    assert spec.pods == trace.TraceSpec().pods
    assert spec.mean_interarrival_s == pytest.approx(0.7 * 200 / 256, abs=1e-3)
    assert all(job.gpus <= 128 for job in trace.generate(1, spec))


# -- the arms -------------------------------------------------------------------------------------


def _job(pods: int = 4, gpus: int = 2) -> TraceJob:
    return TraceJob(0, "job-000", 0.0, pods, gpus, 5.0)


def _job_obj(job: TraceJob) -> dict[str, Any]:
    obj = runner.pytorchjob(job, "study")
    obj["metadata"]["uid"] = "uid-1"
    return obj


def test_kueue_tas_here_prefers_the_hostname_level_of_a_zone_block_host_topology() -> None:
    arm = topology.ARMS["kueue-tas"]()
    assert isinstance(arm, topology.KueueTasTopology) and arm.name == "kueue-tas"
    pod = runner.operator_pods(_job(), _job_obj(_job()))[1]
    made = arm.pod(_job(), json.loads(json.dumps(pod)))
    assert made["metadata"]["annotations"] == {
        "kueue.x-k8s.io/pod-group-total-count": "4",
        "kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname",
    }
    assert made["spec"] == pod["spec"]
    topo, flavor, queue, _ = arm.objects("study")
    assert topo["spec"]["levels"] == [
        {"nodeLabel": "topology.kubernetes.io/zone"},
        {"nodeLabel": "topology.k8s.aws/network-node-layer-3"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    assert flavor["spec"]["topologyName"] == topo["metadata"]["name"]
    quota = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    assert quota == 256


class _Cluster:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        self.calls.append((method, path, body))
        return {}


@pytest.mark.parametrize(
    ("pods", "gpus", "key"),
    [
        (4, 8, "topology.k8s.aws/network-node-layer-3"),  # 32 GPUs: one block
        (32, 1, "topology.k8s.aws/network-node-layer-3"),
        (5, 8, "topology.kubernetes.io/zone"),  # 40 GPUs: no block holds it
        (16, 4, "topology.kubernetes.io/zone"),
    ],
)
def test_the_scheduler_arm_keeps_a_gang_in_one_block_where_one_can_hold_it(
    pods: int, gpus: int, key: str
) -> None:
    arm = topology.ARMS["scheduler"]()
    assert arm.name == "scheduler" and arm.gang_gates
    cluster = _Cluster()
    ctx = arms.RunContext(cast(Any, cluster), "study", Path("."))
    job = _job(pods, gpus)
    arm.before_pods(ctx, job, _job_obj(job))
    ((method, path, group),) = cluster.calls
    assert (method, path) == ("POST", "/apis/scheduling.k8s.io/v1beta1/namespaces/study/podgroups")
    assert group["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": pods}},
        "schedulingConstraints": {"topology": [{"key": key}]},
    }


def test_the_topology_arm_is_the_hold_with_the_block_level_and_nothing_else() -> None:
    hold = yaml.safe_load(topology.ARMS["podium-hold"]().config)  # type: ignore[attr-defined]
    text = arms.PODIUM_STUDY_CONFIG + arms.PODIUM_HOLD_CONFIG + topology.PODIUM_TOPOLOGY_CONFIG
    assert yaml.safe_load(text) == {
        **hold,
        "topology-levels": ["topology.k8s.aws/network-node-layer-3"],
    }
    try:
        Settings.from_mapping(yaml.safe_load(text))
    except Exception:  # podium without topology-levels: the arm says so instead of running
        with pytest.raises(SystemExit, match="topology-levels"):
            topology.ARMS["podium-hold-topology"]()
        return
    arm = topology.ARMS["podium-hold-topology"]()
    assert (arm.name, arm.gang_gates, arm.config) == ("podium-hold-topology", False, text)  # type: ignore[attr-defined]


# -- the spans ------------------------------------------------------------------------------------


def _record(jobs: list[dict[str, Any]], pods: list[list[Any]]) -> dict[str, Any]:
    nodes = {
        f"kwok-zone-a-b{b}-{i}": {topology.BLOCK_LABEL: f"blk-{b}"}
        for b in range(4)
        for i in range(4)
    }
    return {
        "arm": "test",
        "seed": 0,
        "end_s": 20.0,
        "horizon_s": 20.0,
        "capacity_gpus": 256,
        "zones": {"zone-a": 128, "zone-b": 128},
        "layout": topology.TopologyLayout().describe(),
        "node_labels": nodes,
        "jobs": [
            {
                "name": f"j{i}",
                "arrival_s": 0.0,
                "submitted_s": 0.0,
                "duration_s": 5.0,
                "reason": None,
                **job,
            }
            for i, job in enumerate(jobs)
        ],
        "pods": pods,
    }


def _pod(job: int, node: str | None, attempt: int = 0) -> list[Any]:
    bound = None if node is None else 1.0
    return [job, "zone-a", 0.0, bound, bound, 9.0, None, attempt, None, None, node]


def _whole(number: int = 0) -> dict[str, Any]:
    return {"attempt": number, "created_s": 0.0, "whole_s": 2.0, "outcome": "finished"}


def test_each_gang_spans_the_blocks_and_nodes_its_pods_were_bound_on() -> None:
    record = _record(
        [
            # 2 × 4 GPUs packed on one node: one block, fewest nodes.
            {"pods": 2, "gpus_per_pod": 4, "attempts": [_whole()]},
            # 2 × 4 GPUs on two nodes of one block: one block, not the fewest nodes.
            {"pods": 2, "gpus_per_pod": 4, "attempts": [_whole()]},
            # 4 × 8 GPUs over two blocks (fits one).
            {"pods": 4, "gpus_per_pod": 8, "attempts": [_whole()]},
            # never whole: not a gang of the table.
            {"pods": 2, "gpus_per_pod": 1, "attempts": [{"attempt": 0, "created_s": 0.0}]},
            # the first attempt timed out; the retry ran whole in one block.
            {
                "pods": 2,
                "gpus_per_pod": 8,
                "attempts": [{"attempt": 0, "created_s": 0.0, "outcome": "timeout"}, _whole(1)],
            },
        ],
        [
            _pod(0, "kwok-zone-a-b0-0"),
            _pod(0, "kwok-zone-a-b0-0"),
            _pod(1, "kwok-zone-a-b0-1"),
            _pod(1, "kwok-zone-a-b0-2"),
            *(_pod(2, f"kwok-zone-a-b{i // 2}-{i}") for i in range(4)),
            _pod(3, "kwok-zone-a-b3-0"),
            _pod(3, None),
            _pod(4, "kwok-zone-a-b0-0", 0),
            _pod(4, "kwok-zone-a-b1-0", 0),
            _pod(4, "kwok-zone-a-b2-0", 1),
            _pod(4, "kwok-zone-a-b2-1", 1),
        ],
    )
    spans = topology.gang_spans(record)
    assert [(s["job"], s["blocks"], s["nodes"], s["fewest_nodes"]) for s in spans] == [
        ("j0", 1, 1, 1),
        ("j1", 1, 2, 1),
        ("j2", 2, 4, 4),
        ("j4", 1, 2, 2),
    ]
    assert [s["comm_ratio"] for s in spans] == pytest.approx([1.0, 9.0, 2.0, 1.0])
    m = topostudy.metrics(record)
    assert (m["gangs"], m["one_block"], m["fit_block"], m["fit_block_one_block"]) == (4, 3, 4, 3)
    assert m["one_block_share"] == pytest.approx(0.75) == m["fit_block_share"]
    assert (m["fewest_blocks"], m["fewest_nodes"]) == (3, 3)
    assert m["blocks_hist"] == {"1": 3, "2": 1}
    # GPU-weighted: 8, 8, 32 and 16 GPUs.
    weighted = (8 * 1.0 + 8 * 9.0 + 32 * 2.0 + 16 * 1.0) / 64
    assert m["comm_ratio_mean"] == pytest.approx(weighted)
    assert m["step_ratio_mean"] == pytest.approx(allreduce.step_time_ratio(weighted))
    assert "spans" not in m and m["finished"] == 4  # the main study's numbers too


def test_a_record_without_nodes_has_no_gangs_to_span() -> None:
    record = _record(
        [{"pods": 2, "gpus_per_pod": 4, "attempts": [_whole()]}],
        [[0, "zone-a", 0.0, 1.0, 1.0, 9.0, None, 0, None, None]] * 2,
    )
    m = topology.metrics(record)
    assert (m["gangs"], m["one_block_share"], m["comm_ratio_mean"]) == (0, None, None)


# -- the goal -------------------------------------------------------------------------------------


def _metrics(**overrides: Any) -> dict[str, Any]:
    return {
        "one_block_share": 0.5,
        "fit_block_share": 0.7,
        "finished": 130,
        "useful_share": 0.6,
        **overrides,
    }


def _results(**by_arm: dict[str, Any]) -> dict[str, Any]:
    return {
        "runs": [
            {"arm": arm.replace("_", "-"), "seed": 1, "metrics": m} for arm, m in by_arm.items()
        ]
    }


def test_the_goal_row_judges_each_criterion_with_both_arms_figures() -> None:
    (line,) = topostudy.goal(
        _results(
            podium_hold_topology=_metrics(
                one_block_share=0.8, fit_block_share=0.69, finished=128, useful_share=0.59
            ),
            kueue_tas=_metrics(one_block_share=0.8),
            podium_hold=_metrics(),
        )
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == [
        "1",
        "80 % vs 80 % yes",  # a tie meets it
        "69 % vs 70 % **no**",  # judged apart: the gangs that can be in one block
        "128 vs 130 yes",  # within the slack of 2
        "59 % vs 60 % **no**",
        "2 of 4",
    ]
    (short,) = topostudy.goal(
        _results(podium_hold_topology=_metrics(finished=127), podium_hold=_metrics())
    )
    cells = [c.strip() for c in short.strip("|").split("|")]
    assert cells[1].endswith("–") and cells[2].endswith("–")
    assert cells[3] == "127 vs 130 **no**" and cells[-1] == "1 of 2"
    assert topostudy.goal(_results(podium_hold=_metrics())) == []


def test_with_repeats_the_goal_is_judged_on_each_seeds_mean() -> None:
    """Two runs of the topology arm and the hold on seed 1 (``--repeat 1``): the criteria
    compare the means, each run's figure after it; one run of Kueue stands alone."""
    results = _results(
        podium_hold_topology=_metrics(finished=125, useful_share=0.78),
        kueue_tas=_metrics(one_block_share=0.45),
        podium_hold=_metrics(finished=129, useful_share=0.81),
    )
    results["runs"] += [
        {
            "arm": "podium-hold-topology",
            "seed": 1,
            "repeat": 1,
            "metrics": _metrics(finished=130, useful_share=0.82),
        },
        {
            "arm": "podium-hold",
            "seed": 1,
            "repeat": 1,
            "metrics": _metrics(finished=125, useful_share=0.79),
        },
    ]
    (line,) = topostudy.goal(results)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == [
        "1",
        "50 % (50 %, 50 %) vs 45 % yes",
        "70 % (70 %, 70 %) vs 70 % yes",
        "127.5 (125, 130) vs 127 (129, 125) yes",
        "80 % (78 %, 82 %) vs 80 % (81 %, 79 %) yes",
        "4 of 4",
    ]
    assert topostudy._seed(results["runs"][-1]) == "1 (repeat 1)"
    assert topostudy._seed(results["runs"][0]) == "1"


# -- the command ----------------------------------------------------------------------------------


def test_the_command_reaches_the_topology_study_with_its_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner  # noqa: PLC0415

    from bench import cli  # noqa: PLC0415

    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(topostudy, "run", lambda *a, **k: calls.append(("run", a, k)) or 0)
    monkeypatch.setattr(topostudy, "report_only", lambda *a: calls.append(("report", a, {})) or 0)

    def invoke(*args: str) -> Any:
        return CliRunner().invoke(cli.app, list(args), prog_name="python -m bench")

    assert invoke("placement-topology").exit_code == 0
    assert (
        invoke(
            "placement-topology", "--arms", "kueue-tas,scheduler", "--seeds", "4", "--jobs", "20"
        ).exit_code
        == 0
    )
    assert invoke("placement-topology", "--report-only", "--out", "o").exit_code == 0
    bad = invoke("placement-topology", "--arms", "podium")
    assert bad.exit_code == 2 and "unknown arms ['podium']" in bad.output
    assert invoke("placement-topology", "--seeds", "1", "--repeat", "1").exit_code == 0
    (_, default, options), (_, chosen, other), report, (_, _, again) = calls
    assert default == (list(topology.DEFAULT_ARMS), [1, 2, 3])
    assert options["jobs"] == 150 and options["out"] == cli.DOCS and not options["fresh"]
    assert options["repeat"] == 0 and again["repeat"] == 1
    assert chosen == (["kueue-tas", "scheduler"], [4]) and other["jobs"] == 20
    assert report == ("report", (Path("o"),), {})
    help_text = invoke("placement-topology", "--help").output
    assert help_text.startswith("Usage: python -m bench placement-topology [OPTIONS]")


def test_the_variants_change_one_thing_each() -> None:
    job_obj = _job_obj(_job())
    pod = runner.operator_pods(_job(), job_obj)[1]
    zone = topology.ARMS["kueue-tas-zone"]()
    made = zone.pod(_job(), json.loads(json.dumps(pod)))
    assert made["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] == (
        "topology.kubernetes.io/zone"
    )
    assert zone.objects("study")[0]["spec"]["levels"][1] == {  # type: ignore[attr-defined]
        "nodeLabel": topology.BLOCK_LABEL
    }
    required = topology.ARMS["podium-hold-topology-required"]()
    assert required.pod(_job(4, 8), json.loads(json.dumps(pod)))["metadata"]["annotations"] == {
        "podium.dev/required-topology": topology.BLOCK_LABEL
    }
    big = _job(5, 8)  # 40 GPUs: no block holds it, so it asks for nothing
    assert "annotations" not in required.pod(big, json.loads(json.dumps(pod)))["metadata"]
    host = topology.ARMS["podium-hold-topology-host"]()
    levels = Settings.from_mapping(yaml.safe_load(host.config)).topology_levels  # type: ignore[attr-defined]
    assert list(levels) == [topology.BLOCK_LABEL, "kubernetes.io/hostname"]
    assert set(topology.DEFAULT_ARMS) == {
        "podium-hold",
        "podium-hold-topology",
        "kueue-tas",
        "scheduler",
    }


# -- the committed study --------------------------------------------------------------------------


def _committed() -> dict[str, Any] | None:
    path = DOCS / topostudy.RESULTS
    return json.loads(path.read_text()) if path.exists() else None


def test_the_committed_topology_tables_and_numbers_come_from_the_committed_runs() -> None:
    results = _committed()
    if results is None:
        pytest.fail("docs/benchmarks/placement-topology.json is missing: run the study")
    records = {study.key(r): r for r in topostudy.load_records(DOCS)}
    assert {study.key(r) for r in results["runs"]} == set(records)
    seeds = {seed for _, seed, _ in records}
    assert len(seeds) >= 3 and set(topology.DEFAULT_ARMS) <= set(results["arms"])
    for arm in results["arms"]:
        assert {s for a, s, _ in records if a == arm} == seeds, arm
    for run in results["runs"]:
        assert run["metrics"] == topostudy.metrics(records[study.key(run)])
    document = (DOCS / "placement.md").read_text()
    assert topostudy.MARKERS.embed(document, topostudy.markdown(results)) == document
    spec = topology.spec(results["params"]["jobs"])
    for record in records.values():
        jobs = trace.generate(record["seed"], spec)
        assert [(j["name"], j["pods"], j["gpus_per_pod"]) for j in record["jobs"]] == [
            (j.name, j.pods, j.gpus_per_pod) for j in jobs
        ]
