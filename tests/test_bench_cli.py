"""``python -m bench`` (bench/cli.py): each command reaches its study with the options it was
given, ``throughput`` is the default, and every command explains itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bench import cli
from bench.placement import arms, study, trace
from bench.throughput import servers
from bench.throughput import study as throughput_study

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """The studies' entry points, recorded instead of run (each "returns" exit status 0)."""
    made: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def record(name: str) -> Any:
        def called(*args: Any, **kwargs: Any) -> int:
            made.append((name, args, kwargs))
            return 0

        return called

    monkeypatch.setattr(throughput_study, "run", record("throughput"))
    monkeypatch.setattr(throughput_study, "report_only", record("throughput report"))
    monkeypatch.setattr(study, "run", record("placement"))
    monkeypatch.setattr(study, "report_only", record("placement report"))
    return made


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli.app, list(args), prog_name="python -m bench")


THROUGHPUT_DEFAULTS = {
    "out": cli.DOCS,
    "quick": False,
    "profile": False,
    "seconds": 3.0,
    "server_nodes": 1000,
}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), THROUGHPUT_DEFAULTS),
        (("--quick",), {**THROUGHPUT_DEFAULTS, "quick": True}),
        (("throughput",), THROUGHPUT_DEFAULTS),
        (
            ("throughput", "--profile", "--seconds", "5", "--server-nodes", "200", "--out", "x"),
            {**THROUGHPUT_DEFAULTS, "profile": True, "seconds": 5.0, "server_nodes": 200}
            | {"out": Path("x")},
        ),
    ],
)
def test_throughput_is_the_default_command(
    calls: list[Any], args: tuple[str, ...], expected: dict[str, Any]
) -> None:
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    assert calls == [("throughput", (), expected)]


def test_the_placement_options_reach_the_study(calls: list[Any]) -> None:
    result = _invoke(
        "placement",
        *("--arms", "podium,scheduler", "--seeds", "3,4", "--jobs", "20"),
        *("--interarrival", "0.5", "--drain", "9", "--timeout", "0", "--work", "w"),
        *("--quick", "--fresh", "--out", "o"),
    )
    assert result.exit_code == 0, result.output
    assert calls == [
        (
            "placement",
            (["podium", "scheduler"], [3, 4]),
            {
                "spec": trace.TraceSpec(jobs=20, mean_interarrival_s=0.5),
                "drain_s": 9.0,
                "timeout_min": 0.0,
                "out": Path("o"),
                "work": Path("w"),
                "quick": True,
                "fresh": True,
            },
        )
    ]


def test_placement_runs_the_default_arms_on_three_seeds(calls: list[Any]) -> None:
    assert _invoke("placement").exit_code == 0
    [(_, (names, seeds), options)] = calls
    assert (names, seeds) == (list(arms.DEFAULT_ARMS), [1, 2, 3])
    assert options["spec"] == trace.TraceSpec()
    assert (options["out"], options["work"], options["quick"], options["fresh"]) == (
        cli.DOCS,
        None,
        False,
        False,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--report-only",), ("throughput report", (cli.DOCS,), {})),
        (("throughput", "--report-only", "--out", "o"), ("throughput report", (Path("o"),), {})),
        (("placement", "--report-only"), ("placement report", (cli.DOCS,), {})),
    ],
)
def test_report_only_runs_nothing(
    calls: list[Any], args: tuple[str, ...], expected: tuple[Any, ...]
) -> None:
    assert _invoke(*args).exit_code == 0
    assert calls == [expected]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("placement", "--arms", "podium,nope"), "unknown arms ['nope']"),
        (("placement", "--seeds", "1,x"), "not a comma-separated list of integers"),
        (("--nope",), "No such option: --nope"),
        (("nope",), "No such command 'nope'"),
    ],
)
def test_a_bad_argument_exits_2_without_running(
    calls: list[Any], args: tuple[str, ...], message: str
) -> None:
    result = _invoke(*args)
    assert (result.exit_code, calls) == (2, [])
    assert message in result.output


def test_a_studys_exit_status_is_the_commands(
    calls: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(throughput_study, "run", lambda **_: 2)  # wrk missing
    assert _invoke().exit_code == 2


@pytest.mark.parametrize(
    ("args", "usage", "mentions"),
    [
        ((), "python -m bench [OPTIONS] COMMAND", ("throughput", "placement")),
        (
            ("throughput",),
            "python -m bench throughput [OPTIONS]",
            ("--quick", "--profile", "--report-only", "--out"),
        ),
        (
            ("placement",),
            "python -m bench placement [OPTIONS]",
            ("--arms", "--seeds", "--report-only", "--out"),
        ),
    ],
)
def test_every_command_explains_itself(
    calls: list[Any], args: tuple[str, ...], usage: str, mentions: tuple[str, ...]
) -> None:
    for flag in ("--help", "-h"):
        result = _invoke(*args, flag)
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"Usage: {usage}")
        assert all(word in result.output for word in mentions)
    assert calls == []


def test_python_dash_m_bench_is_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "placement", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: python -m bench placement [OPTIONS]")


def test_the_servers_the_throughput_study_starts_name_their_kinds() -> None:
    runner = CliRunner()
    result = runner.invoke(servers.cli, ["--help"], prog_name="python -m bench.throughput.servers")
    assert result.exit_code == 0, result.output
    assert all(kind in result.output for kind in ("podium-answer", "podium-decide", "kopf"))
    refused = runner.invoke(servers.cli, ["nope", "--port", "1", "--certs", "."])
    assert refused.exit_code == 2
