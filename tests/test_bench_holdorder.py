"""The hold-order study (bench/holdorder.py): on the starvation trace the 32-pod gang is released
with the head reservation and starved without it; the mixed trace is deterministic; the command
writes the table it prints."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from bench import cli, holdorder

#: Long enough for the big gang's zone to drain (its 2-pod fillers run ≤ 40 minutes).
HORIZON_S = 3 * 3600


def big(outcomes: list[holdorder.Outcome]) -> holdorder.Outcome:
    (gang,) = [o for o in outcomes if o.job.pods == 32]
    return gang


def test_the_head_reservation_releases_the_big_gang_that_small_ones_starve_without_it() -> None:
    jobs = holdorder.starvation_trace(horizon_s=HORIZON_S)
    with_head = holdorder.simulate(jobs, head=True, horizon_s=HORIZON_S)
    without = holdorder.simulate(jobs, head=False, horizon_s=HORIZON_S)
    assert big(with_head).wait_s is not None
    assert big(with_head).whole_s is not None  # released whole, and every pod bound
    assert big(without).wait_s is None or big(without).wait_s > big(with_head).wait_s  # type: ignore[operator]
    # The head rule costs the small gangs that arrived after it: they wait while its zone drains.
    small = [o for o in with_head if o.job.name.startswith("small-") and o.wait_s is not None]
    assert max(o.wait_s or 0 for o in small) > 0


def test_every_released_gang_runs_in_one_zone_and_no_node_is_overfilled() -> None:
    jobs = holdorder.mixed_trace(seed=3, count=30)
    cluster_outcomes = holdorder.simulate(jobs, head=True, horizon_s=4 * 3600)
    released = [o for o in cluster_outcomes if o.released_s is not None]
    assert released
    assert all(o.whole_s is not None for o in released)


def test_the_mixed_trace_is_the_same_for_a_seed() -> None:
    assert holdorder.mixed_trace(seed=5) == holdorder.mixed_trace(seed=5)
    assert holdorder.mixed_trace(seed=5) != holdorder.mixed_trace(seed=6)


def test_rows_give_percentiles_per_size_and_leave_the_unreleased_out() -> None:
    jobs = [holdorder.Job(f"j{i}", 2, 0, 60) for i in range(4)] + [holdorder.Job("b", 32, 0, 60)]
    outcomes = [holdorder.Outcome(j, released_s=60 * i) for i, j in enumerate(jobs[:4])]
    outcomes.append(holdorder.Outcome(jobs[4]))
    two, thirty_two = holdorder.rows("t", outcomes, head=True)
    assert (two.jobs, two.released, two.p50_min, two.p95_min) == (4, 4, 1.5, 3.0)
    assert (thirty_two.released, thirty_two.p50_min) == (0, None)


def test_the_command_writes_the_table_it_prints(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli.app, ["hold-order", "--out", str(tmp_path), "--hours", "1"])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "hold-order.md").read_text()
    assert "| starvation | on | 32 |" in table
    assert table.strip() in result.output
    assert (tmp_path / "hold-order.json").exists()
