"""The CLI behaves as kubectl does: one ``-o table|wide|json|yaml`` on every command that prints
objects (the same format piped or not), AGE where a table would show a time, tables in 80
columns unless ``-o wide``, podium's own release UPDATEs hidden from ``audit`` unless asked, a
hint when stdin is a terminal, the namespace of the kubeconfig's context, refused nonsense (an
inverted time window, a ``--cluster`` file without Nodes) and errors in plain words.

``tests/fixtures/audit/demo.jsonl`` is the audit trail of a ``make demo`` run (three jobs held
and released in namespace ml-team, the demo's dry-run probes, a guard entry)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.ops.conftest import kubeconfig
from tests.ops.test_report import cluster, ran, shadow_entry
from tests.scenarios import NS, base_cluster, pytorch_pod, pytorchjob
from webhook.kube import errors
from webhook.ops import auditview, cli, cli_options, output
from webhook.ops import report as shadow_report

runner = CliRunner()

DEMO = Path(__file__).parent.parent / "fixtures" / "audit" / "demo.jsonl"
EXAMPLES = Path(__file__).parent.parent.parent / "examples"
FORMATS = ["table", "wide", "json", "yaml"]


def invoke(*args: str, stdin: str | None = None, **env: str) -> Any:
    return runner.invoke(cli.app, list(args), input=stdin, env=env or None)


def widest(text: str) -> int:
    return max(len(line) for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines())


def parsed(text: str, fmt: str) -> Any:
    return json.loads(text) if fmt == "json" else yaml.safe_load(text)


# -- -o ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["review"], ["audit"], ["doctor"], ["report"], ["certs", "show"]],
    ids=" ".join,
)
def test_every_command_that_prints_objects_takes_the_same_o(command: list[str]) -> None:
    text = invoke(*command, "-h", COLUMNS="100").stdout
    assert "-o, --output table|wide|json|yaml" in text, text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.one_of(st.sampled_from([*FORMATS, "summary", "JSON", "xml", ""]), st.text()))
def test_o_takes_exactly_the_four_formats(value: str) -> None:
    """Any other value is exit 2 and one line naming the four; never a traceback."""
    result = invoke("audit", str(DEMO), "-o", value)
    if value in FORMATS:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2, result.output
        assert "is not one of 'table', 'wide', 'json', 'yaml'" in result.stderr
        assert "Traceback" not in result.output


def test_review_keeps_summary_as_the_name_of_its_table() -> None:
    args = ["review", str(EXAMPLES / "pytorchjob-worker-0.yaml")]
    args += ["--cluster", str(EXAMPLES / "cluster.yaml")]
    args += ["--config", str(EXAMPLES / "podium-pin.yaml")]
    table = invoke(*args)
    assert table.exit_code == 0, table.output
    assert invoke(*args, "-o", "summary").stdout == table.stdout
    assert invoke(*args, "-o", "table").stdout == table.stdout
    assert "pinned to zone us-east-1c" in " ".join(table.stdout.split())
    assert widest(table.stdout) <= output.TABLE_WIDTH
    assert all(line == line.rstrip() for line in table.stdout.splitlines())
    assert invoke(*args, "-o", "doc").exit_code == 2


@pytest.mark.parametrize("command", [["audit", str(DEMO)], ["review"]], ids=["audit", "review"])
def test_the_default_format_is_the_same_piped_or_on_a_terminal(command: list[str]) -> None:
    if command == ["review"]:
        command = ["review", str(EXAMPLES / "pytorchjob-worker-0.yaml")]
        command += ["--cluster", str(EXAMPLES / "cluster.yaml")]
    piped = invoke(*command, COLUMNS="200").stdout
    terminal = invoke(*command, TTY_COMPATIBLE="1", NO_COLOR="1", COLUMNS="200").stdout
    words = set(re.sub(r"\x1b\[[0-9;]*m", "", terminal).split())
    # the same rows and words (a terminal's table has a title and a rule, and lower-case heads)
    assert {w for w in piped.split() if not w.isupper()} <= words
    assert not piped.lstrip().startswith("{")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_doctor_and_report_print_yaml_as_well_as_json(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, now: datetime
) -> None:
    from webhook.ops import doctor  # noqa: PLC0415

    job = pytorchjob("split", workers=1)
    objects = cluster(job)
    pods = [pytorch_pod(job, "master", 0).obj(), pytorch_pod(job, "worker", 0).obj()]
    trail = tmp_path / "audit.jsonl"
    trail.write_text("".join(json.dumps(shadow_entry(p, objects, now)) + "\n" for p in pods))
    live = [*objects, ran(pods[0], "a-1", now), ran(pods[1], "b-1", now)]

    async def collect(*_args: Any, **_kwargs: Any) -> list[Any]:
        return live

    class Closable:
        configuration = None

        def close(self) -> None:
            pass

    monkeypatch.setattr(cli_options, "connect_cluster", lambda *_: (Closable(), None))
    monkeypatch.setattr(shadow_report, "collect", collect)
    monkeypatch.setattr(doctor, "collect", collect)
    reported = invoke("report", str(trail), "-o", fmt)
    assert reported.exit_code == 1, reported.output  # the split job
    assert parsed(reported.stdout, fmt)["split"] == 1
    diagnosed = invoke("doctor", "-o", fmt)
    assert "findings" in json.dumps(parsed(diagnosed.stdout, fmt)), diagnosed.output
    # doctor's table: a row per job in 80 columns, each finding and its fix in words below;
    # -o wide: a row per finding, the fix beside it
    table = invoke("doctor")
    assert table.exit_code == 1 and widest(table.stdout) <= output.TABLE_WIDTH, table.stdout
    row = next(line for line in table.stdout.splitlines() if "PyTorchJob/split" in line)
    assert row.split()[-2:] == ["broken", "split-zones"]
    words = " ".join(table.stdout.split())
    assert "team-a/PyTorchJob/split: split-zones: pods run in 2 zones" in words
    assert "fix: delete the job's pods" in words
    wide = invoke("doctor", "-o", "wide").stdout
    assert widest(wide) > output.TABLE_WIDTH and "FIX" in wide.splitlines()[0]
    table = invoke("report", str(trail))
    assert widest(table.stdout) <= output.TABLE_WIDTH, table.stdout
    assert (
        "SPLIT: podium would have kept it in one zone"
        in invoke("report", str(trail), "-o", "wide").stdout
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_certs_show_takes_every_format(fmt: str, tmp_path: Path) -> None:
    from webhook import certs  # noqa: PLC0415

    certs.issue(tmp_path / "certs", service="podium", namespace="podium-system")
    result = invoke("certs", "show", "--dir", str(tmp_path / "certs"), "-o", fmt)
    assert result.exit_code == 0, result.output
    if fmt in ("json", "yaml"):
        assert {c["status"] for c in parsed(result.stdout, fmt)["certificates"]} == {"ok"}
    else:
        assert "CN=podium.podium-system.svc" in result.stdout


def test_certs_show_fits_80_columns_and_wide_says_the_rest(tmp_path: Path) -> None:
    """By default the file's name, the subject and when it expires and renews (in kubectl's
    durations); ``-o wide`` adds the path, the SANs and the times themselves."""
    from webhook import certs  # noqa: PLC0415

    certs.issue(tmp_path / "certs", service="podium", namespace="podium-system")
    default = invoke("certs", "show", "--dir", str(tmp_path / "certs")).stdout
    assert widest(default) <= 80, default
    assert "tls.crt" in default and str(tmp_path) not in default
    assert "podium.podium-system.svc.cluster.local" not in default  # a SAN
    assert re.search(r"tls\.crt\s+CN=podium\.podium-system\.svc\s+\d+d\s+\d+d\s+ok", default)
    wide = invoke("certs", "show", "--dir", str(tmp_path / "certs"), "-o", "wide").stdout
    assert str(tmp_path / "certs" / "tls.crt") in wide
    assert "podium.podium-system.svc.cluster.local" in wide
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", wide)


@pytest.mark.parametrize(
    ("source", "short"),
    [
        ("/etc/podium/tls/tls.crt", "tls.crt"),
        ("certs/ca-bundle.pem", "ca-bundle.pem"),
        (
            "MutatingWebhookConfiguration podium pods.podium.dev caBundle",
            "caBundle pods.podium.dev",
        ),
        ("Secret podium-system/podium-tls tls.crt", "Secret podium-tls tls.crt"),
        ("Secret podium-system/podium-tls", "Secret podium-tls"),
    ],
)
def test_certs_show_names_a_source_in_a_few_words(source: str, short: str) -> None:
    from webhook.ops import certs_cli  # noqa: PLC0415

    assert certs_cli._short_source(source) == short


# -- AGE, 80 columns, own releases -------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (45, "45s"),
        (119, "119s"),
        (120, "2m"),
        (303, "5m3s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 20 * 60, "3h20m"),
        (8 * 3600, "8h"),
        (47 * 3600 + 59 * 60, "47h"),
        (48 * 3600, "2d"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (733 * 86400, "2y3d"),
        (8 * 365 * 86400, "8y"),
    ],
)
def test_age_is_kubectls(seconds: int, shown: str) -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert output.age(now - timedelta(seconds=seconds), now) == shown


@given(st.integers(min_value=0, max_value=100 * 365 * 86400))
def test_age_is_short_and_in_units(seconds: int) -> None:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    shown = output.age(now - timedelta(seconds=seconds), now)
    assert re.fullmatch(r"(\d+[smhdy]){1,2}", shown) and len(shown) <= 7, shown


def test_audit_shows_age_and_the_time_under_wide(tmp_path: Path) -> None:
    entry = json.loads(DEMO.read_text().splitlines()[3])
    at = datetime.now(UTC) - timedelta(days=10, hours=12)  # "10d" for twelve hours either side
    entry["time"] = at.isoformat(timespec="milliseconds")
    trail = tmp_path / "audit.jsonl"
    trail.write_text(json.dumps(entry) + "\n")
    table = invoke("audit", str(trail), "--utc").stdout
    assert table.splitlines()[0].split()[0] == "AGE" and table.splitlines()[1].startswith("10d ")
    assert at.strftime("%Y-%m-%d") not in table
    wide = invoke("audit", str(trail), "--utc", "-o", "wide").stdout
    assert auditview.format_time(at, utc=True, precise=True) in wide


def test_the_demos_audit_fits_80_columns_and_wide_shows_more() -> None:
    for args in (["-n", "ml-team"], ["-n", "ml-team", "--show-own-releases"]):
        table = invoke("audit", str(DEMO), *args)
        assert table.exit_code == 0, table.output
        assert widest(table.stdout) <= output.TABLE_WIDTH, table.stdout
        assert "NAMESPACE" not in table.stdout  # -n chose it, as kubectl leaves it out
    wide = invoke("audit", str(DEMO), "-n", "ml-team", "-o", "wide").stdout
    assert widest(wide) > output.TABLE_WIDTH
    assert "PyTorchJob/llama-ft" in wide and "best-fit (release: released)" in wide
    assert "NAMESPACE" in invoke("audit", str(DEMO)).stdout


def test_podiums_own_release_updates_are_hidden_unless_asked() -> None:
    own = sum(1 for line in DEMO.read_text().splitlines() if '"own-release"' in line)
    assert own == 9
    shown = invoke("audit", str(DEMO), "-n", "ml-team")
    assert "own-release" not in shown.stdout
    assert f"({own} of podium's own release UPDATEs hidden: --show-own-releases" in shown.stderr
    rows = shown.stdout.split("\n\n")[0].splitlines()[1:]
    asked = invoke("audit", str(DEMO), "-n", "ml-team", "--show-own-releases")
    asked_rows = asked.stdout.split("\n\n")[0].splitlines()[1:]
    assert len(asked_rows) == len(rows) + own == 21
    assert "hidden" not in asked.stderr
    doc = json.loads(invoke("audit", str(DEMO), "-o", "json").stdout)
    assert not [r for r in doc["records"] if r["reason"] == "own-release"]
    doc = json.loads(invoke("audit", str(DEMO), "-o", "json", "--show-own-releases").stdout)
    assert len([r for r in doc["records"] if r["reason"] == "own-release"]) == own
    # --pod names a pod that was released: its own UPDATE only when asked
    pod = invoke("audit", str(DEMO), "--pod", "llama-ft-worker-0", "-o", "json").stdout
    assert [r["outcome"] for r in json.loads(pod)["records"]] == ["held", "released"]


# -- stdin, namespace, refusals ----------------------------------------------------------------


@pytest.mark.parametrize("command", ["audit", "report"])
def test_a_hint_when_stdin_is_a_terminal(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = invoke(command, stdin=DEMO.read_text())
    assert "Reading podium's log from stdin" not in quiet.stderr
    monkeypatch.setattr(output, "stdin_is_terminal", lambda: True)
    hinted = invoke(command, stdin="")
    assert hinted.stderr.startswith("Reading podium's log from stdin (the terminal; Ctrl-D ends")
    assert f"--tail=-1 --prefix --timestamps | podium {command}" in hinted.stderr
    assert "Reading" not in invoke(command, str(DEMO)).stderr  # a file: nothing to say


class _Objects:
    """The object API ``release`` talks to: records its patch, or says the job is not there."""

    def __init__(self, missing: bool = False) -> None:
        self.patched: list[tuple[str, str, str]] = []
        self.missing = missing

    async def create(self, _obj: Any) -> dict[str, Any]:
        return {"status": {"userInfo": {"username": "alice"}}}

    async def merge_patch(
        self, _api_version: str, kind: str, namespace: str, name: str, _patch: Any
    ) -> None:
        if self.missing:
            raise errors.NotFound(f"{kind} {name} not found")
        self.patched.append((kind, namespace, name))


@pytest.mark.parametrize(
    ("context_namespace", "args", "expected"),
    [
        ("ml", [], "ml"),
        (None, [], "default"),
        ("ml", ["-n", "other"], "other"),
    ],
)
def test_release_takes_the_namespace_of_the_kubeconfigs_context(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    context_namespace: str | None,
    args: list[str],
    expected: str,
) -> None:
    config = kubeconfig("https://127.0.0.1:1", context="work")
    if context_namespace:
        config["contexts"][0]["context"]["namespace"] = context_namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    objects = _Objects()

    class Closable:
        def close(self) -> None:
            pass

    monkeypatch.setattr(cli_options, "connect_cluster", lambda *_: (Closable(), objects))
    result = invoke("release", "pytorchjob/ft", "--kubeconfig", str(path), *args)
    assert result.exit_code == 0, result.output
    assert objects.patched == [("PyTorchJob", expected, "ft")]
    assert f"PyTorchJob/ft in {expected} into the best zone (by alice)" in result.stdout


def test_release_of_a_job_that_is_not_there_says_where_it_looked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Closable:
        def close(self) -> None:
            pass

    monkeypatch.setattr(
        cli_options, "connect_cluster", lambda *_: (Closable(), _Objects(missing=True))
    )
    result = invoke("release", "pytorchjob/ft", "-n", "ml")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: there is no PyTorchJob ft in namespace ml (kubectl -n ml get pytorchjobs; "
        "another namespace: -n NS)\n"
    )


_WHEN = st.tuples(st.integers(min_value=1, max_value=500), st.sampled_from("smhd"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(since=_WHEN, until=_WHEN)
def test_a_window_that_ends_before_it_starts_is_refused(
    since: tuple[int, str], until: tuple[int, str]
) -> None:
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    since_text, until_text = (f"{n}{unit}" for n, unit in (since, until))
    result = invoke("audit", str(DEMO), "--since", since_text, "--until", until_text)
    back_since, back_until = (n * seconds[unit] for n, unit in (since, until))
    if back_since < back_until:  # --since is nearer now than --until
        assert result.exit_code == 2
        assert result.stderr.startswith(
            f"Error: --since {since_text} is later than --until {until_text}"
        )
    else:
        assert result.exit_code == 0, result.output
        assert "Error" not in result.stderr


def test_an_inverted_window_of_timestamps_is_refused_too() -> None:
    result = invoke(
        "audit", str(DEMO), "--since", "2026-12-02T00:00:00Z", "--until", "2026-12-01T00:00:00Z"
    )
    assert result.exit_code == 2 and "did you mean --since 2026-12-01T00:00:00Z" in result.stderr


def test_a_cluster_file_without_nodes_is_refused(tmp_path: Path) -> None:
    pod = EXAMPLES / "pytorchjob-worker-0.yaml"
    result = invoke("review", str(pod), "--cluster", str(pod))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"Error: --cluster {pod} holds no Node (only Pod): it must be a snapshot of the cluster "
        "(`podium snapshot > cluster.json`, or `kubectl get nodes,namespaces -o yaml` and the "
        "pods and jobs around the one reviewed)\n"
    )
    job = pytorchjob()
    without_nodes = [o for o in base_cluster(job) if o["kind"] != "Node"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all(without_nodes))
    assert invoke("review", str(pod), "--cluster", str(tmp_path / "c.yaml")).exit_code == 2
    (tmp_path / "n.yaml").write_text(yaml.safe_dump_all(base_cluster(job)))
    assert invoke("review", str(pod), "--cluster", str(tmp_path / "n.yaml")).exit_code == 0


# -- errors in words ---------------------------------------------------------------------------

#: What Python says and a person should not have to read.
PYTHON_TEXT = re.compile(r"\[Errno|None None|could not convert|is not a valid|Traceback")


@pytest.mark.parametrize(
    ("config", "input_doc", "message"),
    [
        (
            "zone-chooser: nearest\n",
            None,
            "Error: setting zone-chooser='nearest' is invalid: it must be one of: hold, pin, "
            "scheduler, auto (podium = pin)",
        ),
        (
            "hold-timeout-seconds: soon\n",
            None,
            "Error: setting hold-timeout-seconds='soon' is invalid: it must be a number, zero or "
            "more seconds",
        ),
        (None, "missing", "Error: cannot read {input}: No such file or directory"),
        (
            None,
            "{}",
            "Error: {input} holds no kind, not an admission.k8s.io/v1 AdmissionReview or a v1 Pod "
            "(e.g. kubectl get pod NAME -o yaml > pod.yaml)",
        ),
        (
            None,
            '{"apiVersion": "v1", "kind": "Service"}',
            "Error: {input} holds a Service (v1), not an admission.k8s.io/v1 AdmissionReview",
        ),
    ],
)
def test_errors_are_plain_words(
    tmp_path: Path, config: str | None, input_doc: str | None, message: str
) -> None:
    pod = EXAMPLES / "pytorchjob-worker-0.yaml"
    args = ["review", str(pod), "--cluster", str(EXAMPLES / "cluster.yaml")]
    if config is not None:
        (tmp_path / "c.yaml").write_text(config)
        args += ["--config", str(tmp_path / "c.yaml")]
    if input_doc is not None:
        pod = tmp_path / "in.json"
        if input_doc != "missing":
            pod.write_text(input_doc)
        args[1] = str(pod)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message.format(input=pod)), result.stderr
    assert not PYTHON_TEXT.search(result.stderr), result.stderr


def test_a_missing_settings_file_says_which_flag(tmp_path: Path) -> None:
    result = invoke("serve", "--no-tls", "--config", str(tmp_path / "nope.yaml"))
    assert result.stderr == (
        f"Error: cannot read settings file {tmp_path / 'nope.yaml'}: No such file or directory "
        "(check the --config path)\n"
    )


def test_unreadable_audit_inputs_are_plain_words(tmp_path: Path) -> None:
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    for path, why in [
        (tmp_path, "Is a directory"),
        (tmp_path / "bad.gz", "a compressed file cut short or damaged"),
    ]:
        result = invoke("audit", str(path))
        assert result.stderr == f"Error: cannot read {path}: {why}\n"
        assert not PYTHON_TEXT.search(result.stderr)


def test_the_namespace_the_demo_uses_is_the_tests() -> None:
    """The fixture is the demo's: its jobs ran in the namespace the scenarios use too."""
    assert NS and "ml-team" in DEMO.read_text()
