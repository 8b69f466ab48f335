# ruff: noqa: E501 - the metrics text is quoted as the apiserver exposes it
"""The burst study's report (``bench/latency``): the committed tables are what the report code
makes of the committed raw results, and the figures are read from the apiserver's histogram as
it is exposed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bench.latency import burst, noop, report
from bench.report import MISSING
from bench.throughput import servers
from testbed.podium import WEBHOOK_MANIFEST, Podium

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"

METRICS = """\
# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit",le="0.005"} 3
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit",le="0.025"} 4
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit",le="+Inf"} 4
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit"} 0.02
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.podium.dev",operation="CREATE",rejected="false",type="admit"} 4
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other.example",operation="CREATE",rejected="false",type="admit",le="0.005"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other.example",operation="CREATE",rejected="false",type="admit",le="0.025"} 0
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other.example",operation="CREATE",rejected="false",type="admit",le="+Inf"} 9
apiserver_admission_webhook_admission_duration_seconds_sum{name="other.example",operation="CREATE",rejected="false",type="admit"} 90
apiserver_admission_webhook_admission_duration_seconds_count{name="other.example",operation="CREATE",rejected="false",type="admit"} 9
"""


def _results() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DOCS / burst.RESULTS).read_text())
    return data


def test_the_committed_tables_are_rendered_from_the_committed_results() -> None:
    document = (DOCS / burst.DOCUMENT).read_text()
    assert report.document(_results(), document) == document
    assert report.markdown(_results()) in document


def test_the_committed_run_has_both_modes_and_every_pod() -> None:
    runs = {run["mode"]: run for run in _results()["runs"]}
    assert set(runs) == set(burst.MODES)
    spec = _results()["spec"]
    for run in runs.values():
        assert run["pods"] == spec["gangs"] * spec["pods"]
        assert run["histogram"]["count"] >= run["pods"]


def test_only_podiums_webhook_is_read_and_the_5ms_share_comes_from_its_bucket() -> None:
    hist = burst.histogram(METRICS)
    assert hist == {"buckets": {"0.005": 3, "0.025": 4, "+Inf": 4}, "count": 4, "sum": 0.02}
    assert report.share_within(hist) == 0.75
    assert report.mean_ms(hist) == 5.0


def test_the_burst_is_what_the_histogram_gained() -> None:
    before = burst.histogram(METRICS)
    after = {"buckets": {"0.005": 5, "0.025": 8, "+Inf": 10}, "count": 10, "sum": 0.5}
    gained = burst.difference(after, before)
    assert gained == {"buckets": {"0.005": 2, "0.025": 4, "+Inf": 6}, "count": 6, "sum": 0.48}
    assert report.share_within(gained) == 2 / 6


OWN_METRICS = """\
# TYPE podium_admission_duration_seconds histogram
podium_admission_duration_seconds_bucket{le="0.001"} 3.0
podium_admission_duration_seconds_bucket{le="+Inf"} 4.0
podium_admission_duration_seconds_count 4.0
podium_admission_duration_seconds_sum 0.006
# TYPE podium_admissions counter
podium_admissions_total{outcome="held",reason="held"} 4.0
"""


def test_podiums_own_time_is_read_from_its_histogram_and_missing_for_the_noop() -> None:
    own = burst.own_histogram(OWN_METRICS)
    assert own == {"buckets": {"0.001": 3, "+Inf": 4}, "count": 4, "sum": 0.006}
    gained = burst.difference({**own, "count": 6, "sum": 0.010}, own)
    assert report.own_mean_ms({"podium_histogram": gained}) == pytest.approx(2.0)
    assert report.own_mean_ms({"podium_histogram": None}) is None
    assert report.own_mean_ms({}) is None  # a run made before the bench read it


def test_no_calls_or_no_such_bucket_is_shown_as_missing_not_zero() -> None:
    empty = {"buckets": {}, "count": 0, "sum": 0.0}
    assert report.share_within(empty) is None and report.mean_ms(empty) is None
    assert report.share_within({"buckets": {"0.01": 1}, "count": 1, "sum": 0.001}) is None


def _event(verb: str, resource: str, agent: str, namespace: str = "ns", **ref: str) -> Any:
    return {
        "verb": verb,
        "userAgent": agent,
        "objectRef": {"resource": resource, "namespace": namespace, **ref},
        "responseStatus": {"code": 201},
    }


def test_writes_count_podiums_not_the_bench_nor_the_control_plane() -> None:
    events = [
        _event("create", "configmaps", "OpenAPI-Generator/37.0.2/python"),  # before the burst
        _event("create", "pods", "OpenAPI-Generator/37.0.2/python"),
        _event("create", "pytorchjobs", "OpenAPI-Generator/37.0.2/python"),
        _event("patch", "pods", "kube-scheduler/v1.37.2", subresource="status"),
        _event("create", "configmaps", "kube-controller-manager/v1.37.2"),
        _event("get", "configmaps", "OpenAPI-Generator/37.0.2/python"),
        _event("create", "ciliumnetworkpolicies", "OpenAPI-Generator/37.0.2/python", "other"),
        _event("create", "configmaps", "OpenAPI-Generator/37.0.2/python"),
        _event("patch", "pods", "OpenAPI-Generator/37.0.2/python"),
    ]
    assert burst._writes(events, "ns", since=1) == {
        "create configmaps 201": 1,
        "patch pods 201": 1,
    }


# --- the no-op arm: the floor any webhook pays, wired as podium is (no cluster here) ---------


class FakeCluster:
    """What `Podium` and the no-op read of a cluster before anything is started."""

    kubeconfig = Path("/nonexistent/kubeconfig")
    ca_bundle = "Q0E="
    ca_file = Path("/nonexistent/ca.crt")

    def issue_certificate(self, name: str, *, directory: Path, **_: Any) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / f"{name}.crt", directory / f"{name}.key"
        cert.write_bytes(b"CERT " + str(directory).encode())
        key.write_bytes(b"KEY " + str(directory).encode())
        return cert, key


def _review(uid: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "namespace": namespace,
            "operation": "CREATE",
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
        },
    }


async def test_the_noop_allows_without_a_patch_under_each_reviews_uid_and_lists_them() -> None:
    app = servers.noop_app()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://127.0.0.1") as client:
        answers = [
            (await client.post(servers.NOOP_PATH, json=_review(uid, "burst-noop"))).json()
            for uid in ("uid-1", "uid-2")
        ]
        listed = (await client.get("/answered")).json()
    assert answers == [
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": r}
        for r in ({"uid": "uid-1", "allowed": True}, {"uid": "uid-2", "allowed": True})
    ]
    assert listed == [
        {"namespace": "burst-noop", "requestUID": "uid-1"},
        {"namespace": "burst-noop", "requestUID": "uid-2"},
    ]


def test_the_noop_is_registered_with_podiums_configuration_but_its_own_url(
    tmp_path: Path,
) -> None:
    cluster: Any = FakeCluster()
    hook = noop.NoOpWebhook(cluster, tmp_path / "noop")
    podium = Podium(cluster, tmp_path / "podium", chart_rbac=None)
    mine, podiums = hook.webhook_configuration(), podium.webhook_configuration()
    shipped = yaml.safe_load(WEBHOOK_MANIFEST.read_text())
    assert [h.pop("clientConfig") for h in mine["webhooks"]] == [
        {"url": f"https://127.0.0.1:{hook.port}{servers.NOOP_PATH}", "caBundle": "Q0E="}
    ]
    assert [h.pop("clientConfig")["url"] for h in podiums["webhooks"]] == [f"{podium.url}/mutate"]
    assert mine == podiums
    for hook_config, shipped_hook in zip(mine["webhooks"], shipped["webhooks"], strict=True):
        for field in (
            "name",
            "rules",
            "namespaceSelector",
            "matchConditions",
            "timeoutSeconds",
            "failurePolicy",
            "sideEffects",
        ):
            assert hook_config[field] == shipped_hook[field], field


def test_the_noop_serves_the_certificate_issued_for_it_through_the_bench_server(
    tmp_path: Path,
) -> None:
    cluster: Any = FakeCluster()
    hook = noop.NoOpWebhook(cluster, tmp_path)
    assert hook.command() == [
        sys.executable,
        "-m",
        "bench.throughput.servers",
        "noop",
        "--port",
        str(hook.port),
        "--certs",
        str(tmp_path / "tls"),
    ]
    assert servers.Kind("noop") == "noop"
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == hook.cert.read_bytes()
    assert (tmp_path / "tls" / "tls.key").read_bytes() == hook.key.read_bytes()


def test_each_arm_gets_its_webhook_and_the_floor_runs_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster: Any = FakeCluster()
    started: list[tuple[Path, str | None]] = []

    def podium(_cluster: Any, work_dir: Path, *, config: str | None = None) -> str:
        started.append((work_dir, config))
        return "podium"

    assert burst.ARMS == ("noop", "hold", "pin")
    assert isinstance(burst.webhook(cluster, tmp_path / "noop", "noop"), noop.NoOpWebhook)
    monkeypatch.setattr(burst, "Podium", podium)
    assert burst.webhook(cluster, tmp_path / "hold", "hold") == "podium"
    assert started == [(tmp_path / "hold", "zone-chooser: hold\n")]
    with pytest.raises(ValueError, match="no such arm"):
        burst.webhook(cluster, tmp_path, "kopf")


def _run(mode: str, mean_ms: float) -> dict[str, Any]:
    return {
        "mode": mode,
        "pods": 8,
        "seconds": 1.0,
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [1.0, 1.0, 1.0],
        "histogram": {"buckets": {"0.005": 2, "+Inf": 8}, "count": 8, "sum": mean_ms * 8 / 1000},
        "outcomes": {"allowed" if mode == "noop" else "held": 8},
        "writes": {},
        "held_effects": 0,
    }


def test_each_mode_is_read_as_a_multiple_of_the_noops_mean() -> None:
    results = {
        "machine": {"cpus": 2, "python": "3.11"},
        "spec": {"gangs": 1, "pods": 8, "gpus": 1, "threads": 1},
        "zones": {"zone-a": 1},
        "runs": [_run("noop", 4.0), _run("hold", 5.0), _run("pin", 10.0)],
    }
    assert report.floor_ms(results["runs"]) == 4.0
    rows: dict[str, str] = {}
    for line in report.markdown(results).splitlines():  # the first table: the buckets follow
        rows.setdefault(line.split(" | ")[0], line)
    assert "| 4.00 | 1.00× |" in rows["| noop"]
    assert "| 5.00 | 1.25× |" in rows["| hold"]
    assert "| 10.00 | 2.50× |" in rows["| pin"]
    assert "8 allowed" in rows["| noop"]
    # a run without the no-op arm (older results) says so rather than guess
    assert report.floor_ms(results["runs"][1:]) is None
    assert report.times(5.0, None) == report.times(None, 4.0) == MISSING
