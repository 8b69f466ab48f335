"""``podium review``: the offline contract users' tooling relies on."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from typer.testing import CliRunner

from tests.builders import PodBuilder, pinning
from tests.builders import node as node_builder
from tests.scenarios import base_cluster, pytorch_pod, pytorchjob
from webhook.core import labels, mutation, reviews
from webhook.core.settings import Mode, Settings, ZoneChooser
from webhook.ops import offline
from webhook.ops.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()
#: Most reviews here are of the pin at admission; the default, ``hold``, is reviewed on its own.
PIN_CONFIG = "zone-chooser: pin\n"


def review(
    tmp_path: Path,
    pod_or_review: dict[str, Any],
    objects: list[dict[str, Any]],
    *,
    yaml_docs: bool = True,
    config: str | None = None,
) -> tuple[int, dict[str, Any] | None, str]:
    inp = tmp_path / "input.json"
    inp.write_text(json.dumps(pod_or_review))
    cluster = tmp_path / "cluster.yaml"
    if yaml_docs:
        cluster.write_text(yaml.safe_dump_all(objects))
    else:
        cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    args = ["review", str(inp), "--cluster", str(cluster)]
    if config is None or "zone-chooser" not in config:
        config = PIN_CONFIG + (config or "")
    (tmp_path / "podium.yaml").write_text(config)
    args += ["--config", str(tmp_path / "podium.yaml"), "-o", "json"]
    result = runner.invoke(app, args)
    out = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, out, result.stderr


@pytest.mark.parametrize("yaml_docs", [True, False], ids=["yaml-documents", "v1-List"])
@pytest.mark.parametrize("as_review", [True, False], ids=["AdmissionReview", "bare-Pod"])
def test_output_contract(tmp_path: Path, yaml_docs: bool, as_review: bool) -> None:
    pj = pytorchjob()
    pod = pytorch_pod(pj).obj()
    doc = reviews.review_for_pod(pod, uid="abc") if as_review else pod
    code, out, _ = review(tmp_path, doc, base_cluster(pj), yaml_docs=yaml_docs)
    assert code == 0 and out is not None
    assert set(out) == {"response", "patchedObject", "sideEffects", "audit"}
    resp = out["response"]
    assert (resp["apiVersion"], resp["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert resp["response"]["uid"] == ("abc" if as_review else "offline-review")
    # patchedObject is exactly the input pod with the response's patch applied
    patch = json.loads(base64.b64decode(resp["response"]["patch"]))
    assert jsonpatch.apply_patch(pod, patch) == out["patchedObject"]
    assert [o["kind"] for o in out["sideEffects"]] == ["ConfigMap", "CiliumNetworkPolicy"]
    assert out["audit"]["zone"] == "zone-c" and out["audit"]["reason"] == "best-fit"


def test_side_effects_fed_back_keep_the_zone(tmp_path: Path) -> None:
    pj = pytorchjob(workers=1)
    code, first, _ = review(tmp_path, pytorch_pod(pj, "master").obj(), base_cluster(pj))
    assert code == 0 and first is not None and first["audit"]["zone"] == "zone-b"
    # zone-b fills up meanwhile; the recorded decision still wins.
    hogs = [PodBuilder("other", name=f"h{i}").gpus(8).bound(f"b-{i}").obj() for i in (1, 2)]
    objects = [*base_cluster(pj), *hogs, *first["sideEffects"]]
    code, second, _ = review(tmp_path, pytorch_pod(pj, "worker", 0).obj(), objects)
    assert code == 0 and second is not None
    assert (second["audit"]["zone"], second["audit"]["reason"]) == ("zone-b", "recorded")
    assert second["sideEffects"] == []
    # without the fed-back record the decision would differ
    code, third, _ = review(
        tmp_path, pytorch_pod(pj, "worker", 0).obj(), [*base_cluster(pj), *hogs]
    )
    assert third is not None and third["audit"]["zone"] == "zone-c"


def test_dry_run_review_has_no_side_effects(tmp_path: Path) -> None:
    pj = pytorchjob()
    code, out, _ = review(
        tmp_path, reviews.review_for_pod(pytorch_pod(pj).obj(), dry_run=True), base_cluster(pj)
    )
    assert code == 0 and out is not None
    assert out["sideEffects"] == [] and "patch" in out["response"]["response"]


def test_skipped_pod_is_returned_unchanged(tmp_path: Path) -> None:
    pod = PodBuilder("sandbox", name="web").obj()
    code, out, _ = review(tmp_path, pod, base_cluster())
    assert code == 0 and out is not None
    assert out["patchedObject"] == pod and out["sideEffects"] == []
    assert out["audit"]["reason"] == "namespace-not-enabled"


def test_config_file_changes_policy_mode(tmp_path: Path) -> None:
    pj = pytorchjob()
    code, out, _ = review(
        tmp_path, pytorch_pod(pj).obj(), base_cluster(pj), config="policy-mode: kubernetes\n"
    )
    assert code == 0 and out is not None
    assert [o["kind"] for o in out["sideEffects"]] == ["ConfigMap", "NetworkPolicy"]


@pytest.mark.parametrize(
    ("input_text", "cluster_text", "config", "message"),
    [
        ("{not json", "[]", None, "is neither JSON nor YAML"),
        (
            '{"apiVersion": "v1", "kind": "Service"}',
            "[]",
            None,
            "not an admission.k8s.io/v1 AdmissionReview or a v1 Pod",
        ),
        (
            '{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
            "[]",
            None,
            "the review has no request object",
        ),
        (
            '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
            "- 1\n- 2\n",
            None,
            "every document must be a Kubernetes object",
        ),
        (
            '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
            '{"apiVersion": "v1", "kind": "Node"}',
            None,
            "has no metadata.name",
        ),
        (
            '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
            "[]",
            "policy-mode: calico\n",
            "policy-mode='calico' is invalid",
        ),
        (
            '{"apiVersion": "v1", "kind": "Pod", "metadata": {}}',
            "[]",
            "colour: blue\n",
            "unknown setting 'colour'",
        ),
    ],
)
def test_unusable_input_exits_2_with_one_line(
    tmp_path: Path, input_text: str, cluster_text: str, config: str | None, message: str
) -> None:
    (tmp_path / "in").write_text(input_text)
    (tmp_path / "cluster").write_text(cluster_text)
    args = ["review", str(tmp_path / "in"), "--cluster", str(tmp_path / "cluster")]
    if config:
        (tmp_path / "c.yaml").write_text(config)
        args += ["--config", str(tmp_path / "c.yaml")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and result.stdout == ""
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["review", str(tmp_path / "nope.json"), "--cluster", str(tmp_path / "nope")]
    )
    assert result.exit_code == 2 and "cannot read" in result.stderr


def test_shipped_examples_through_the_installed_command() -> None:
    """The README's example, as a user runs it: the real console script, real files."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "review",
            str(EXAMPLES / "pytorchjob-worker-0.yaml"),
            "--cluster",
            str(EXAMPLES / "cluster.yaml"),
            "--config",
            str(EXAMPLES / "podium-pin.yaml"),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    out = json.loads(proc.stdout)
    assert out["audit"]["zone"] == "us-east-1c"
    assert (
        out["patchedObject"]["metadata"]["labels"][labels.JOB]
        == "6f1c2a8e-7d3b-4b8e-9a51-2c0e4f7d9b10"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.ops.cli",
            "review",
            str(EXAMPLES / "review-master-0.json"),
            "--cluster",
            str(EXAMPLES / "cluster.yaml"),
            "--config",
            str(EXAMPLES / "podium-pin.yaml"),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert (
        json.loads(proc.stdout)["response"]["response"]["uid"]
        == "0c4d3f0e-5a7b-4c1e-8f2a-9b6d1e3c7a55"
    )


# --- for people: the summary on a terminal, and what the snapshot lacked ---------------------


def invoke_review(
    tmp_path: Path,
    pod: dict[str, Any],
    objects: list[Any],
    *args: str,
    output: str | None = "json",
    **env: str,
) -> Any:
    """``podium review`` of ``pod`` against ``objects``, with ``-o output`` unless ``args``
    choose one (None: the default format)."""
    if output is not None and "-o" not in args:
        args = (*args, "-o", output)
    inp = tmp_path / "pod.json"
    inp.write_text(json.dumps(pod))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(objects))
    if "--config" not in args:
        (tmp_path / "pin.yaml").write_text(PIN_CONFIG)
        args = (*args, "--config", str(tmp_path / "pin.yaml"))
    return runner.invoke(
        app, ["review", str(inp), "--cluster", str(cluster), *args], env=env or None
    )


def test_the_summary_is_the_default_piped_or_not_and_json_yaml_say_the_same(
    tmp_path: Path,
) -> None:
    """As kubectl: one default format (-o table, the summary) whether stdout is a terminal or a
    pipe; ``summary``, its old name, still works; json and yaml carry the same answer."""
    pj = pytorchjob()
    pod = pytorch_pod(pj).obj()
    summary = invoke_review(
        tmp_path, pod, base_cluster(pj), output=None, TTY_COMPATIBLE="1", NO_COLOR="1"
    )
    assert summary.exit_code == 0, summary.output
    text = re.sub(r"\x1b\[[0-9;]*m", "", summary.stdout)  # bold, whatever NO_COLOR says
    assert "team-a/llama-worker-0 (PyTorchJob/llama, worker): pinned to zone zone-c" in text
    assert "reason   best-fit: zone-c fits the whole job" in text
    assert "demand   32 nvidia.com/gpu" in text
    assert "zone-c: 64 nvidia.com/gpu" in text and "← chosen" in text
    assert "add /metadata/labels/podium.dev/job = " in text  # readable paths, not ~1
    assert "creates  ConfigMap podium-pytorchjob-llama-" in text and "(decision record)" in text
    piped = invoke_review(tmp_path, pod, base_cluster(pj), output=None)
    assert piped.stdout.splitlines()[0] == text.splitlines()[0]
    assert piped.stdout == invoke_review(tmp_path, pod, base_cluster(pj), output="summary").stdout
    assert piped.stdout == invoke_review(tmp_path, pod, base_cluster(pj), output="table").stdout
    wide = invoke_review(tmp_path, pod, base_cluster(pj), output="wide").stdout
    assert max(len(line) for line in wide.splitlines()) > 80  # lines unwrapped
    assert " ".join(wide.split()) == " ".join(piped.stdout.split())
    piped = invoke_review(tmp_path, pod, base_cluster(pj))
    as_json = invoke_review(tmp_path, pod, base_cluster(pj), "-o", "json", TTY_COMPATIBLE="1")
    as_yaml = invoke_review(tmp_path, pod, base_cluster(pj), "-o", "yaml")

    def timeless(doc: dict[str, Any]) -> dict[str, Any]:
        """Without the moments the three runs were made at."""
        doc["audit"] = {k: v for k, v in doc["audit"].items() if k not in ("time", "latencyMs")}
        for obj in doc["sideEffects"]:
            (obj.get("data") or {}).pop("decidedAt", None)
        return doc

    assert (
        timeless(json.loads(as_json.stdout))
        == timeless(yaml.safe_load(as_yaml.stdout))
        == timeless(json.loads(piped.stdout))
    )


def test_cluster_twice_is_an_error(tmp_path: Path) -> None:
    pj = pytorchjob()
    cluster = tmp_path / "c.yaml"
    cluster.write_text(yaml.safe_dump_all(base_cluster(pj)))
    result = invoke_review(tmp_path, pytorch_pod(pj).obj(), [], "--cluster", str(cluster))
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --cluster was given 2 times")


def _without(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[Any]:
    return [
        o
        for o in objects
        if not (o["kind"] == kind and (name is None or o["metadata"]["name"] == name))
    ]


@pytest.mark.parametrize(
    ("case", "note"),
    [
        ("namespace missing", "namespace team-a is not in the snapshot, so podium took it as not"),
        ("job missing", "PyTorchJob/llama is not in the snapshot: the gang's demand (8 nvidia"),
        ("node without zone", "1 node(s) have no topology.kubernetes.io/zone label (setting zone"),
        ("zone too small", "the pod requires zone zone-a, where the whole gang (32 nvidia.com/gpu"),
    ],
)
def test_what_the_snapshot_lacked_is_a_warning(tmp_path: Path, case: str, note: str) -> None:
    pj = pytorchjob()
    builder = pytorch_pod(pj)
    objects = base_cluster(pj)
    if case == "namespace missing":
        objects = _without(objects, "Namespace", "team-a")
    elif case == "job missing":
        objects = _without(objects, "PyTorchJob")
    elif case == "node without zone":
        objects = [*objects, node_builder("loose", None)]
    else:
        builder = builder.node_selector("topology.kubernetes.io/zone", "zone-a")
    pod = builder.obj()
    piped = invoke_review(tmp_path, pod, objects)
    assert piped.exit_code == 0, piped.output
    assert note in piped.stderr and piped.stderr.startswith("Warning: ")
    assert set(json.loads(piped.stdout)) == {"response", "patchedObject", "sideEffects", "audit"}
    shown = invoke_review(tmp_path, pod, objects, "-o", "summary")
    assert note in " ".join(shown.stdout.split())


def test_a_complete_snapshot_has_no_notes(tmp_path: Path) -> None:
    pj = pytorchjob()
    assert invoke_review(tmp_path, pytorch_pod(pj).obj(), base_cluster(pj)).stderr == ""


def test_yaml_snapshots_load_with_libyaml() -> None:
    from webhook.ops import offline  # noqa: PLC0415

    assert yaml.__with_libyaml__, "PyYAML without libyaml: snapshots load ~25x slower"
    assert offline._YAML_LOADER is yaml.CSafeLoader


# --- zone-chooser: hold — the admission answer, and what the releaser would do ---------------

HOLD_CONFIG = "zone-chooser: hold\n"


def held_pods(pj: dict[str, Any], count: int, at: str | None = None) -> list[Any]:
    """The first ``count`` pods of ``pj`` (a master, then workers) as admission held them, at
    ``at`` (default: a minute ago, well inside hold-timeout-seconds)."""
    at = at or (datetime.now(UTC) - timedelta(minutes=1)).isoformat(timespec="seconds")
    out = []
    for i in range(count):
        rtype, index = ("master", 0) if i == 0 else ("worker", i - 1)
        pod = pytorch_pod(pj, rtype, index).uid().obj()
        held = mutation.hold(pod, gang_key=pj["metadata"]["uid"]).pod
        held["metadata"]["creationTimestamp"] = at
        out.append(held)
    return out


def hogs(nodes: list[str]) -> list[Any]:
    return [PodBuilder("other", name=f"hog-{n}").gpus(8).bound(n).obj() for n in nodes]


def test_hold_mode_says_the_pod_is_held_and_the_gang_would_be_released(tmp_path: Path) -> None:
    """The last pod of a 4 × 8-GPU job, its three others held in the snapshot: admission holds
    it (podium's gate, no zone); the releaser would release the whole gang into zone-c."""
    pj = pytorchjob(workers=3)
    objects = [*base_cluster(pj), *held_pods(pj, 3)]
    code, out, _ = review(tmp_path, pytorch_pod(pj, "worker", 2).obj(), objects, config=HOLD_CONFIG)
    assert code == 0 and out is not None
    assert (out["audit"]["outcome"], out["audit"]["zone"]) == ("held", None)
    assert out["sideEffects"] == []  # a held admission writes nothing
    spec = out["patchedObject"]["spec"]
    assert spec["schedulingGates"] == [{"name": labels.HOLD_GATE}]
    assert "affinity" not in spec
    (verdict,) = out["release"]
    assert verdict["job"] == "PyTorchJob/llama" and verdict["held"] == 4
    assert (verdict["verdict"], verdict["zone"], verdict["reason"]) == (
        "release",
        "zone-c",
        "best-fit",
    )
    assert verdict["pods"] == 4 and verdict["policies"]


def test_hold_mode_says_why_a_gang_waits_and_its_place_in_line(tmp_path: Path) -> None:
    """zone-c is busy (hogs on six of its eight nodes): nothing holds 4 × 8 GPUs, so the gang
    waits, and the review says for what — the words of the releaser's Event."""
    pj = pytorchjob(workers=3)
    busy = hogs([f"c-{i}" for i in range(6)])
    objects = [*base_cluster(pj), *busy, *held_pods(pj, 3)]
    code, out, _ = review(tmp_path, pytorch_pod(pj, "worker", 2).obj(), objects, config=HOLD_CONFIG)
    assert code == 0 and out is not None
    (verdict,) = out["release"]
    assert verdict["verdict"] == "wait" and verdict["position"] == 1
    assert verdict["why"].startswith(
        "needs 4 × 8 nvidia.com/gpu in one zone; the roomiest zone, zone-b, has "
        "16 nvidia.com/gpu free (8/8 per node); 1st in line"
    )
    summary = invoke_review(
        tmp_path,
        pytorch_pod(pj, "worker", 2).obj(),
        objects,
        "-o",
        "summary",
        "--config",
        str(tmp_path / "podium.yaml"),
        NO_COLOR="1",
    )
    assert summary.exit_code == 0, summary.output
    # Lines wrap at the terminal's width (80 here): compare the words.
    text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", summary.stdout).split())
    assert "held behind podium's gate, no zone yet" in text
    assert "releaser team-a/PyTorchJob/llama (4 held): wait: needs 4 × 8 nvidia.com/gpu" in text


def test_the_releaser_verdicts_in_order_with_a_younger_gang_backfilling(tmp_path: Path) -> None:
    """Two held gangs: the older big one waits (1st in line, the zone it waits for kept for
    it); the younger small one would go now into another zone — the releaser's own order."""
    big, small = pytorchjob("big", workers=3), pytorchjob("small", workers=0)
    busy = hogs([f"c-{i}" for i in range(6)])
    objects = [
        *base_cluster(big, small),
        *busy,
        *held_pods(big, 4, "2026-12-01T11:00:00Z"),
        *held_pods(small, 1, "2026-12-01T11:10:00Z"),
    ]
    result = asyncio.run(
        offline.review(
            reviews.review_for_pod(pytorch_pod(small, "master").obj()),
            objects,
            Settings(zone_chooser=ZoneChooser.HOLD),
            now=datetime(2026, 12, 1, 11, 20, tzinfo=UTC),
        )
    )
    assert result.releaser is not None
    assert [(v["job"], v["verdict"]) for v in result.releaser] == [
        ("PyTorchJob/big", "wait"),
        ("PyTorchJob/small", "release"),
    ]
    lines = offline.releaser_lines(result.releaser)
    assert lines[0].startswith("  releaser team-a/PyTorchJob/big (4 held): wait: needs 4 × 8")
    assert "1st in line (first: zone-c is kept for it)" in lines[0]
    assert lines[1].startswith("           team-a/PyTorchJob/small (1 held): release now into")
    assert "after 600s held" in lines[1]


def test_outside_hold_mode_the_review_says_nothing_of_a_releaser(tmp_path: Path) -> None:
    pj = pytorchjob()
    code, out, _ = review(tmp_path, pytorch_pod(pj).obj(), base_cluster(pj))
    assert code == 0 and out is not None and "release" not in out
    text = invoke_review(tmp_path, pytorch_pod(pj).obj(), base_cluster(pj), "-o", "summary")
    assert "releaser" not in text.stdout


def test_the_shipped_hold_example(tmp_path: Path) -> None:
    """`make demo-offline`'s hold example: the last pod of llama-ft is held, and the releaser
    would release the whole gang (three held in the snapshot, and this one) into us-east-1c."""
    args = [
        "review",
        str(EXAMPLES / "pytorchjob-worker-0.yaml"),
        "--cluster",
        str(EXAMPLES / "cluster-held.yaml"),
        "--config",
        str(EXAMPLES / "podium-hold.yaml"),
        "--at",
        "2026-12-01T12:00:00Z",
    ]
    out = json.loads(runner.invoke(app, [*args, "-o", "json"]).stdout)
    assert out["audit"]["outcome"] == "held"
    assert out["release"] == [
        {
            "job": "PyTorchJob/llama-ft",
            "namespace": "ml-team",
            "key": "6f1c2a8e-7d3b-4b8e-9a51-2c0e4f7d9b10",
            "held": 4,
            "heldSince": "2026-12-01T11:58:00+00:00",
            "verdict": "release",
            "zone": "us-east-1c",
            "reason": "best-fit",
            "detail": "us-east-1c has room for all of PyTorchJob/llama-ft "
            "(4 × 8 nvidia.com/gpu), after 120s held",
            "pods": 4,
            "policies": out["release"][0]["policies"],
        }
    ]
    assert len(out["release"][0]["policies"]) == 1
    stdout = runner.invoke(app, [*args, "-o", "summary"], env={"NO_COLOR": "1"}).stdout
    text = " ".join(stdout.split())  # wrapped at the terminal's width: compare the words
    assert (
        "releaser ml-team/PyTorchJob/llama-ft (4 held): release now into zone us-east-1c "
        "(best-fit): us-east-1c has room for all of PyTorchJob/llama-ft (4 × 8 nvidia.com/gpu), "
        "after 120s held"
    ) in text.replace("[bold]", "").replace("[/]", "")


def test_an_unreadable_at_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "review",
            str(EXAMPLES / "pytorchjob-worker-0.yaml"),
            "--cluster",
            str(EXAMPLES / "cluster-held.yaml"),
            "--at",
            "yesterday",
        ],
    )
    assert result.exit_code == 2
    assert "--at 'yesterday' is not an RFC 3339 time" in result.stderr


def test_review_in_shadow_mode_answers_unchanged_and_says_what_enforce_would_do(
    tmp_path: Path,
) -> None:
    pj = pytorchjob()
    config = "mode: shadow\nzone-chooser: pin"
    code, out, _ = review(tmp_path, pytorch_pod(pj).obj(), base_cluster(pj), config=config)
    assert code == 0 and out is not None
    assert "patch" not in out["response"]["response"]
    assert out["sideEffects"] == []
    assert (out["audit"]["shadow"], out["audit"]["zone"]) == (True, "zone-c")
    settings = pinning(mode=Mode.SHADOW)
    doc = reviews.review_for_pod(pytorch_pod(pj).obj())
    result = asyncio.run(offline.review(doc, base_cluster(pj), settings))
    head = offline.summary(result)[0]
    assert "shadow mode, admitted unchanged; enforce mode: pinned to zone" in head


def test_the_summary_at_80_columns_keeps_every_patch_value_whole(tmp_path: Path) -> None:
    """Each patch operation's value, whole (the summary used to cut it at 80 characters with
    `…`); a long value wraps between its items, under the text, never under the label."""
    pj = pytorchjob()
    pod, objects = pytorch_pod(pj).obj(), base_cluster(pj)
    answer = json.loads(invoke_review(tmp_path, pod, objects, "-o", "json").stdout)
    ops = json.loads(base64.b64decode(answer["response"]["response"]["patch"]))
    shown = invoke_review(
        tmp_path, pod, objects, "-o", "summary", TTY_COMPATIBLE="1", NO_COLOR="1", COLUMNS="80"
    ).stdout
    lines = [line.rstrip() for line in re.sub(r"\x1b\[[0-9;]*m", "", shown).splitlines()]
    assert max(len(line) for line in lines) <= 80
    assert "…" not in shown
    words = " ".join(shown.split())
    assert any(len(json.dumps(op["value"])) > 80 for op in ops if "value" in op)  # a long one
    for op in ops:
        if "value" in op:
            assert json.dumps(op["value"], separators=(", ", ": ")) in words, op
    patch = lines.index(next(line for line in lines if line.startswith("  patch ")))
    assert all(line.startswith(" " * 11) for line in lines[patch + 1 : patch + len(ops)])


def test_a_zone_that_does_not_fit_says_how_its_free_capacity_is_split(tmp_path: Path) -> None:
    """zone-c has 16 GPUs free, as 2 on each of its 8 nodes: no 8-GPU pod fits there, and the
    summary says so rather than leave "16 free, does not fit" a riddle."""
    pj = pytorchjob()
    six_each = [
        PodBuilder("other", name=f"six-c-{i}").gpus(6).bound(f"c-{i}").obj() for i in range(8)
    ]
    objects = [*base_cluster(pj), *six_each]
    shown = invoke_review(
        tmp_path, pytorch_pod(pj).obj(), objects, "-o", "wide", NO_COLOR="1"
    ).stdout
    (line,) = [line.rstrip() for line in shown.splitlines() if "zone-c:" in line]
    assert "16 nvidia.com/gpu" in line and "does not fit" in line
    assert line.endswith("(per node: 2 nvidia.com/gpu on 8 nodes)"), line
    (zone_a,) = [line.rstrip() for line in shown.splitlines() if "zone-a:" in line]
    assert zone_a.endswith("does not fit (per node: 8 nvidia.com/gpu on 1 node)"), zone_a
