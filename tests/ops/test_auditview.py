"""``podium audit``: reading records back from log lines, filters, grouping by gang, output."""

from __future__ import annotations

import copy
import gzip
import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from typer.testing import CliRunner

from tests.scenarios import audit_entry_for, base_cluster, pytorch_pod, pytorchjob
from webhook.ops import auditview
from webhook.ops.cli import app

runner = CliRunner()

UID_A = "aaaaaaaa-1111-4111-8111-111111111111"
UID_B = "bbbbbbbb-2222-4222-8222-222222222222"


@pytest.fixture
def base(now: datetime) -> dict[str, Any]:
    """A real admission record (a PyTorchJob's master pinned to zone-c)."""
    pj = pytorchjob()
    return dict(audit_entry_for(pytorch_pod(pj, "master").obj(), base_cluster(pj), now))


def rec(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``base`` with fields replaced; ``job_*`` keys change the job (``job_uid`` also sets the
    gang), ``at`` is the time."""
    out = copy.deepcopy(base)
    job = out["job"]
    for key in [k for k in changes if k.startswith("job_")]:
        job[key[4:]] = changes.pop(key)
        if key == "job_uid":
            job.setdefault("gang", job["uid"])
            job["gang"] = changes.pop("gang", job["uid"])
    if "gang" in changes:
        job["gang"] = changes.pop("gang")
    if "at" in changes:
        out["time"] = changes.pop("at").isoformat(timespec="milliseconds")
    out.update(changes)
    return out


def write(path: Path, records: list[dict[str, Any]], prefix: str = "") -> Path:
    path.write_text("".join(prefix + json.dumps(r) + "\n" for r in records))
    return path


def invoke(*args: str, stdin: str | None = None, **env: str) -> Any:
    return runner.invoke(app, ["audit", *args], input=stdin, env=env or None)


# -- reading ------------------------------------------------------------------------------------


def test_read_skips_and_counts_foreign_lines(base: dict[str, Any]) -> None:
    lines = [
        '{"time":"2026-11-29T12:00:00Z","level":"info","logger":"podium.server","message":"hi"}',
        "{broken json",
        "",
        "[pod/podium-abc/podium] " + json.dumps(base),
        "2026-11-29T12:00:00.123456789Z " + json.dumps(base),
        "[pod/podium-abc/podium] 2026-11-29T12:00:00.123456789Z " + json.dumps(base),
        json.dumps(base),
    ]
    tally = auditview.Tally()
    assert list(auditview.read(lines, tally)) == [base] * 4
    assert tally.skipped == 2  # the blank line is not counted


def test_inputs_globs_gzip_stdin_merged_by_time(
    tmp_path: Path, base: dict[str, Any], now: datetime
) -> None:
    early, mid, late = (
        rec(base, pod=p, at=now + timedelta(seconds=s))
        for p, s in (("early", 0), ("mid", 1), ("late", 2))
    )
    write(tmp_path / "a.log", [late, early], prefix="[pod/podium-a/podium] ")
    with gzip.open(tmp_path / "b.log.gz", "wt") as fh:
        fh.write("not a record\n" + json.dumps(mid) + "\n")
    result = invoke(str(tmp_path / "*.log*"), "-o", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [r["pod"] for r in doc["records"]] == ["early", "mid", "late"]
    assert doc["skippedLines"] == 1
    assert "1 line(s) skipped" in result.stderr
    # gzip on stdin too, recognised by its magic bytes
    piped = runner.invoke(
        app, ["audit", "-", "-o", "json"], input=gzip.compress(json.dumps(mid).encode())
    )
    assert [r["pod"] for r in json.loads(piped.stdout)["records"]] == ["mid"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.log"], "missing.log: no such file"),
        (["nothing-*.log"], "nothing-*.log: no file matches"),
        (
            ["--outcome", "weird"],
            "'pinned', 'unpinned', 'grouped', 'held', 'released', 'skipped', 'denied',",
        ),
        (["-o", "xml"], "'table', 'wide', 'json', 'yaml'"),
        (["--since", "yesterday"], "--since: 'yesterday' is neither a duration"),
        (["--job", "pytorchjob/"], "--job: 'pytorchjob/' is not NAME or KIND/NAME"),
    ],
)
def test_bad_arguments_exit_2_with_one_message(
    tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke(*args, stdin="")
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.output


# -- filters ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "matches"),
    [
        ("llama", True),
        ("pytorchjob/llama", True),
        ("PyTorchJob/llama", True),
        ("pytorchjobs/llama", True),
        ("pytorchjobs.kubeflow.org/llama", True),
        ("mpijob/llama", False),
        ("pytorchjob/other", False),
        (UID_A, True),
    ],
)
def test_job_query(base: dict[str, Any], query: str, matches: bool) -> None:
    record = rec(base, job_uid=UID_A)
    assert auditview.JobQuery.parse(query).matches(record["job"]) is matches


@pytest.mark.parametrize(
    ("field", "value", "other"),
    [
        ("namespace", "team-a", "team-b"),
        ("pod", "llama-master-0", "llama-worker-0"),
        ("zone", "zone-c", "zone-a"),
        ("reason", "best-fit", "recorded"),
        ("user", "system:serviceaccount:kubeflow:training-operator", "alice"),
    ],
)
def test_field_filters(base: dict[str, Any], field: str, value: str, other: str) -> None:
    record = rec(base, **{field: value})
    assert auditview.Filter(**{field: value}).matches(record)
    assert not auditview.Filter(**{field: other}).matches(record)


def test_outcome_filter(base: dict[str, Any]) -> None:
    record = rec(base, outcome="fail-open")
    assert auditview.Filter(outcome=auditview.Outcome.FAIL_OPEN).matches(record)
    assert not auditview.Filter(outcome=auditview.Outcome.PINNED).matches(record)


def test_pod_finds_pods_with_generated_names(tmp_path: Path, base: dict[str, Any]) -> None:
    """A pod with a generated name is admitted before it has one: its entry keeps the
    generateName prefix, and --pod NAME finds it by that prefix."""
    records = [
        rec(base, pod="llama-launcher-"),
        rec(base, pod="js-workers-0-0-", coordinator=False),
        rec(base, pod="llama-master-0"),
    ]
    path = write(tmp_path / "audit.jsonl", records)
    for pod, expected in [
        ("llama-launcher-x7k2p", ["llama-launcher-"]),
        ("js-workers-0-0-abcde", ["js-workers-0-0-"]),
        ("llama-master-0", ["llama-master-0"]),
        ("llama-master-01", []),  # a whole name is not a prefix
    ]:
        result = invoke(str(path), "--pod", pod, "-o", "json")
        assert result.exit_code == 0, result.output
        assert [r["pod"] for r in json.loads(result.stdout)["records"]] == expected, pod


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("15m", timedelta(minutes=15)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(minutes=90)),
        ("500ms", timedelta(milliseconds=500)),
    ],
)
def test_durations_count_back_from_now(now: datetime, text: str, expected: timedelta) -> None:
    assert auditview.parse_moment(text, now=now) == now - expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-29T11:00:00Z", datetime(2026, 11, 29, 11, tzinfo=UTC)),
        ("2026-11-29T12:30:00+01:00", datetime(2026, 11, 29, 11, 30, tzinfo=UTC)),
        ("2026-11-29 11:00:00.5Z", datetime(2026, 11, 29, 11, 0, 0, 500000, tzinfo=UTC)),
    ],
)
def test_timestamps(now: datetime, text: str, expected: datetime) -> None:
    assert auditview.parse_moment(text, now=now) == expected


def test_a_timestamp_without_zone_is_local_time(now: datetime) -> None:
    parsed = auditview.parse_moment("2026-11-29", now=now)
    assert parsed.tzinfo is not None
    assert parsed.replace(tzinfo=None) == datetime(2026, 11, 29)


def test_since_and_until(tmp_path: Path, base: dict[str, Any], now: datetime) -> None:
    records = [rec(base, pod=f"p{h}", at=now + timedelta(hours=h)) for h in range(4)]
    path = write(tmp_path / "audit.jsonl", records)
    since = (now + timedelta(hours=1)).isoformat()
    until = (now + timedelta(hours=2)).isoformat()
    result = invoke(str(path), "--since", since, "--until", until, "-o", "json")
    assert [r["pod"] for r in json.loads(result.stdout)["records"]] == ["p1", "p2"]
    # records from 2026 are long before "the last hour" of the real clock
    assert json.loads(invoke(str(path), "--since", "1h", "-o", "json").stdout)["records"] == []


# -- grouping by gang ---------------------------------------------------------------------------


def test_two_lws_groups_in_two_zones_are_two_healthy_gangs(base: dict[str, Any]) -> None:
    lws = {"job_kind": "LeaderWorkerSet", "job_name": "serve", "job_uid": UID_A}
    records = [
        rec(base, **lws, gang=f"{UID_A}-g0", zone="zone-a"),
        rec(base, **lws, gang=f"{UID_A}-g0", zone="zone-a"),
        rec(base, **lws, gang=f"{UID_A}-g1", zone="zone-b"),
    ]
    summary = auditview.summarize(records)
    assert [(g.job, g.gang, g.verdict) for g in summary.gangs] == [
        ("LeaderWorkerSet/serve", f"{UID_A}-g0", "ok"),
        ("LeaderWorkerSet/serve", f"{UID_A}-g1", "ok"),
    ]
    assert summary.split == []


def test_a_resubmitted_job_is_a_new_gang(base: dict[str, Any], now: datetime) -> None:
    records = [
        rec(base, job_uid=UID_A, zone="zone-a", at=now),
        rec(base, job_uid=UID_B, zone="zone-b", at=now + timedelta(hours=3)),
    ]
    gangs = auditview.summarize(records).gangs
    assert [(g.name, g.uid, dict(g.zones), g.verdict) for g in gangs] == [
        ("llama", UID_A, {"zone-a": 1}, "ok"),
        ("llama", UID_B, {"zone-b": 1}, "ok"),
    ]


def test_split_dry_runs_and_reconciler_records(base: dict[str, Any]) -> None:
    records = [
        rec(base, zone="zone-a"),
        rec(base, zone="zone-b", dryRun=True),  # created nothing: not a zone taken
        rec(base, zone=None, outcome="reconcile", action="create", result="created"),
    ]
    (gang,) = auditview.summarize(records).gangs
    assert (gang.admissions, gang.dry_runs, gang.reconciled, gang.verdict) == (1, 1, 1, "ok")
    (gang,) = auditview.summarize([*records, rec(base, zone="zone-b")]).gangs
    assert gang.verdict == "split"
    assert gang.as_dict()["zones"] == {"zone-a": 1, "zone-b": 1}


def test_not_every_pod_pinned_is_a_check(base: dict[str, Any]) -> None:
    (gang,) = auditview.summarize([rec(base), rec(base, outcome="fail-open", zone=None)]).gangs
    assert gang.verdict == "check"


def test_pinned_without_room_is_a_check_the_records_cannot_settle(
    base: dict[str, Any], tmp_path: Path
) -> None:
    """A gang pinned by no-fit-most-free went to a zone without room for all of it: not ``ok``.
    Whether its pods still wait there is not in the records (``podium doctor`` reads the pods):
    a check, not a failure — the exit status stays 0."""
    records = [rec(base, reason="no-fit-most-free"), rec(base, pod="w", reason="recorded")]
    (gang,) = auditview.summarize(records).gangs
    assert (gang.verdict, gang.as_dict()["verdict"]) == ("no-room", "no-room")
    (healthy,) = auditview.summarize([rec(base, reason="best-fit")]).gangs
    assert healthy.verdict == "ok"
    result = invoke(str(write(tmp_path / "audit.jsonl", records)))
    assert result.exit_code == 0, result.output
    assert "pinned without room (podium doctor: are its pods Pending?)" in result.output


# -- the command --------------------------------------------------------------------------------


@pytest.fixture
def trail(tmp_path: Path, base: dict[str, Any], now: datetime) -> Path:
    """llama split over two zones (one warning), other fine."""
    records = [
        rec(base, pod="llama-master-0", zone="zone-c", at=now),
        rec(
            base,
            pod="llama-worker-0",
            zone="zone-b",
            coordinator=False,
            role="worker",
            warnings=["hmm"],
            at=now + timedelta(seconds=1),
        ),
        rec(
            base,
            pod="other-master-0",
            job_name="other",
            job_uid=UID_B,
            zone="zone-a",
            at=now + timedelta(seconds=2),
        ),
    ]
    return write(tmp_path / "audit.jsonl", records)


def test_split_job_exits_1_and_says_so(trail: Path) -> None:
    result = invoke(str(trail), "--utc")
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "SPLIT across zones" in out
    assert "2026-11-29 12:00:00 UTC" in out
    assert "* coordinator" in out and "! answered with warnings" in out
    assert "~ dry run" not in out  # only the markers that appear are explained
    # a filter that leaves the split job out: exit 0
    assert invoke(str(trail), "--job", "pytorchjob/other").exit_code == 0


def test_plain_text_when_piped_and_a_table_on_a_terminal(trail: Path) -> None:
    piped = invoke(str(trail), "--utc").stdout
    assert not set("─│┃━") & set(piped)
    assert piped.splitlines()[0].split() == [c.upper() for c in auditview.COLUMNS]
    assert all(line == line.rstrip() for line in piped.splitlines())
    terminal = invoke(str(trail), "--utc", TTY_COMPATIBLE="1", COLUMNS="160").stdout
    assert "podium admissions (3)" in terminal and "─" in terminal
    visible = re.sub(r"\x1b\[[0-9;]*m", "", terminal)
    assert max(len(line) for line in visible.splitlines()) <= 160


@pytest.mark.parametrize("columns", [80, 100])
def test_a_narrow_terminal_shows_every_value_whole(
    trail: Path, base: dict[str, Any], columns: int
) -> None:
    """Too narrow for the table's names: one block per record, ``column: value`` lines, each
    value whole on its line (not ``ml-t/eam``); the per-job summary likewise."""
    records = [json.loads(line) for line in trail.read_text().splitlines()]
    long_names = [rec(r, namespace="ml-team-research", pod=f"{r['pod']}-abcde") for r in records]
    trail.write_text("".join(json.dumps(r) + "\n" for r in long_names))
    terminal = invoke(str(trail), "--utc", TTY_COMPATIBLE="1", COLUMNS=str(columns)).stdout
    lines = [line.rstrip() for line in re.sub(r"\x1b\[[0-9;]*m", "", terminal).splitlines()]
    assert max(len(line) for line in lines) <= columns
    shown = {tuple(part.strip() for part in line.split(":", 1)) for line in lines if ":" in line}
    for record in long_names:
        for column, cell in zip(auditview.COLUMNS, auditview.row(record, utc=True), strict=True):
            assert (column, cell) in shown, (column, cell)
    for gang in auditview.summarize(long_names).gangs:
        assert ("namespace", gang.namespace) in shown and ("job", gang.job) in shown


def test_local_time_by_default(trail: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert "2026-11-29 21:00:00 JST" in invoke(str(trail)).stdout
    finally:
        monkeypatch.undo()
        time.tzset()


def test_wide_shows_gang_user_and_warnings(trail: Path) -> None:
    out = invoke(str(trail), "-o", "wide", "--utc").stdout
    assert "GANG" in out.splitlines()[0] and "warning: hmm" in out
    assert "2026-11-29 12:00:01.000 UTC" in out


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_carry_the_summary(trail: Path, fmt: str) -> None:
    result = invoke(str(trail), "-o", fmt)
    assert result.exit_code == 1
    doc = json.loads(result.stdout) if fmt == "json" else yaml.safe_load(result.stdout)
    assert len(doc["records"]) == 3 and doc["split"] == 1
    assert [(j["job"]["name"], j["verdict"]) for j in doc["jobs"]] == [
        ("llama", "split"),
        ("other", "ok"),
    ]


def test_filters_that_leave_nothing_say_so_in_one_line_and_exit_0(trail: Path) -> None:
    result = invoke(str(trail), "-n", "nowhere")
    assert (result.exit_code, result.stdout) == (0, "No audit records match.\n")


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_an_input_without_audit_records_cannot_be_audited(tmp_path: Path, fmt: str) -> None:
    """The wrong file or the wrong log source: exit 2 and one line naming what was read, so
    ``podium audit … || alert`` does not pass on it."""
    result = invoke("-o", fmt, stdin="just a log line\n")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "Error: no podium audit records in stdin: 1 line(s), none of them a podium audit "
        "record (is it podium's log? kubectl -n podium-system logs "
        "-l app.kubernetes.io/name=podium --tail=-1)"
    ]
    empty = tmp_path / "empty.log"
    empty.write_text("")
    result = invoke(str(empty), "-n", "ml", "-o", fmt)
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"Error: no podium audit records in {empty}: the input is empty\n"


def test_follow_stdin_prints_as_records_come(trail: Path) -> None:
    result = invoke("-f", "--utc", stdin=trail.read_text())
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["TIME", "NAMESPACE"]
    assert "llama-master-0" in lines[1] and "SPLIT across zones" in result.stdout
    assert result.exit_code == 1
    as_json = invoke("-f", "-o", "json", stdin=trail.read_text()).stdout.splitlines()
    assert [json.loads(line)["pod"] for line in as_json] == [
        "llama-master-0",
        "llama-worker-0",
        "other-master-0",
    ]


def test_follow_lines_tails_appends_truncation_and_rotation(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("one\npart")
    stop = threading.Event()
    seen: list[str] = []

    def writer() -> None:
        def wait_for(n: int) -> None:
            deadline = time.monotonic() + 5
            while len(seen) < n and time.monotonic() < deadline:
                time.sleep(0.01)

        wait_for(1)
        with path.open("a") as fh:
            fh.write("ial\n")
        wait_for(2)
        (tmp_path / "rotated").write_text("")
        path.rename(tmp_path / "audit.jsonl.1")
        path.write_text("three\n")
        wait_for(3)
        stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    lines: Iterator[str] = auditview.follow_lines([str(path)], stop=stop.is_set, interval=0.01)
    for line in lines:
        seen.append(line)
    thread.join()
    assert seen == ["one", "partial", "three"]


def test_follow_refuses_stdin_with_files_and_gzip(tmp_path: Path) -> None:
    gz = tmp_path / "a.gz"
    gz.write_bytes(gzip.compress(b"x\n"))
    assert "cannot follow a compressed file" in invoke("-f", str(gz)).stderr
    assert "either stdin or files" in invoke("-f", "-", str(gz), stdin="").stderr


def test_every_outcome_an_entry_can_carry_is_an_outcome_to_filter_by() -> None:
    """``--outcome`` offers ``audit.Outcome``: every outcome the engine decides and every
    ``outcome="…"`` that builds an entry (the guard's, the reconciler's, fail-open) is in it."""
    from webhook.core import audit, engine  # noqa: PLC0415

    known = {o.value for o in audit.Outcome}
    assert set(get_args(engine.Outcome)) <= known
    source = Path(audit.__file__).parent.parent
    written = {
        m
        for path in source.rglob("*.py")
        for m in re.findall(r'\boutcome="([a-z-]+)"', path.read_text())
    }
    assert {"guard", "reconcile", "fail-open"} <= written
    assert written <= known, written - known


def test_outcome_accepts_the_guards_entries(tmp_path: Path, base: dict[str, Any]) -> None:
    guard = rec(base, outcome="guard", reason="crd-changed", job=None, pod="", zone=None)
    path = write(tmp_path / "audit.jsonl", [base, guard])
    result = invoke(str(path), "--outcome", "guard", "-o", "json")
    assert result.exit_code == 0, result.output
    assert [r["outcome"] for r in json.loads(result.stdout)["records"]] == ["guard"]


def test_two_gangs_whose_uids_share_8_characters_show_apart(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    """UIDs are cut short as git cuts commits: to 8 characters, or as many as tell them apart."""
    records = [
        rec(base, job_name="one", job_uid="job-uid-1"),
        rec(base, job_name="two", job_uid="job-uid-2", gang="job-uid-2-g1"),
    ]
    path = write(tmp_path / "audit.jsonl", records)
    for fmt in ("table", "wide"):
        out = invoke(str(path), "-o", fmt).stdout
        assert "job-uid-1" in out and "job-uid-2-g1" in out, out
    assert auditview.uid_width(["1f2d3819-aaaa", "9c0e77a1-bbbb"]) == 8
    assert auditview.uid_width(["job-uid-1", "job-uid-2", ""]) == 9


def test_shadow_decisions_pin_nothing_so_they_split_nothing(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    """Two shadow decisions of one job in two zones: nothing was pinned (``podium report``
    judges where the pods ran), so the summary counts them and flags no split."""
    records = [rec(base, shadow=True, zone="zone-a"), rec(base, shadow=True, zone="zone-c")]
    (gang,) = auditview.summarize(records).gangs
    assert (gang.shadows, gang.admissions, dict(gang.zones), gang.verdict) == (2, 0, {}, "ok")
    assert auditview.row(records[0])[5] == "pinned ^"
    assert "^ shadow mode" in (auditview.legend(records) or "")
    result = invoke(str(write(tmp_path / "a.jsonl", records)), "-o", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["jobs"][0]["shadow"] == 2
