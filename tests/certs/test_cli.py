"""``webhook.ops.certs_cli``: ``podium certs``, offline and against a (fake) cluster."""

from __future__ import annotations

import base64
import datetime
import json
import socket
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from typer.testing import CliRunner

from tests.certs.support import (
    DAY,
    SECRET_PATH,
    T0,
    WEBHOOK_PATH,
    FakeApiServer,
    assert_server_side_apply,
    kubeconfig_for,
)
from webhook import certs
from webhook.ops import certs_cli


class TestCLI:
    def test_issue_then_show_rotate_and_secret(self, cli: CliRunner, tmp_path: Path) -> None:
        state_dir = tmp_path / "certs"
        result = cli.invoke(
            certs_cli.app,
            ["issue", "--dir", str(state_dir), "--san", "127.0.0.1,localhost", "--days", "10"],
        )
        assert result.exit_code == 0, result.output
        assert "127.0.0.1" in result.output
        leaf = certs.load_state(state_dir).leaf.cert
        assert certs.san_strings(leaf)[-2:] == ["localhost", "127.0.0.1"]
        lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
        assert lifetime == 10 * DAY + certs.CLOCK_SKEW

        result = cli.invoke(
            certs_cli.app, ["show", "--dir", str(state_dir)], env={"COLUMNS": "200"}
        )
        assert result.exit_code == 0, result.output
        assert "podium.podium-system.svc" in result.output
        assert "tls.crt" in result.output and "ca-bundle.pem" in result.output

        result = cli.invoke(certs_cli.app, ["rotate", "--dir", str(state_dir), "--offline"])
        assert result.exit_code == 0, result.output
        assert "Nothing due" in result.output

        result = cli.invoke(
            certs_cli.app, ["secret", "--dir", str(state_dir), "--name", "tls", "--namespace", "x"]
        )
        assert result.exit_code == 0, result.output
        secret = yaml.safe_load(result.stdout)
        assert secret["metadata"] == {
            "name": "tls",
            "namespace": "x",
            "labels": {
                "app.kubernetes.io/name": "podium",
                "app.kubernetes.io/managed-by": "podium-certs",
            },
        }
        assert base64.b64decode(secret["data"]["tls.key"]) == (state_dir / "tls.key").read_bytes()
        assert (
            base64.b64decode(secret["data"]["ca.crt"]) == (state_dir / "ca-bundle.pem").read_bytes()
        )

    def test_rotate_reports_what_it_did(self, cli: CliRunner, tmp_path: Path) -> None:
        certs.issue(tmp_path, service="s", namespace="n", leaf_lifetime=DAY, now=T0)
        result = cli.invoke(certs_cli.app, ["rotate", "--dir", str(tmp_path), "--offline"])
        assert result.exit_code == 0, result.output
        assert "renew-leaf: renewed the serving certificate" in result.output
        assert "tls.crt changed: apply it" in result.output

    @pytest.mark.parametrize("san", ["bad name", "*.wild.example", "a,,b c"])
    def test_a_bad_san_is_a_usage_error(self, cli: CliRunner, tmp_path: Path, san: str) -> None:
        result = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path / "c"), "--san", san])
        assert result.exit_code == 2
        assert not (tmp_path / "c").exists()

    def test_issue_twice_needs_force(self, cli: CliRunner, tmp_path: Path) -> None:
        assert cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path)]).exit_code == 0
        again = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path)])
        assert again.exit_code == 2
        assert "already holds a CA" in again.output and "--force" in again.output
        forced = cli.invoke(certs_cli.app, ["issue", "--dir", str(tmp_path), "--force"])
        assert forced.exit_code == 0

    @pytest.mark.parametrize("command", ["rotate", "show", "secret", "inject"])
    def test_an_empty_directory_is_a_clear_error(
        self, cli: CliRunner, tmp_path: Path, command: str
    ) -> None:
        result = cli.invoke(certs_cli.app, [command, "--dir", str(tmp_path)])
        assert result.exit_code == 2
        assert result.stderr.startswith("Error: ")
        assert len(result.stderr.splitlines()) == 1

    def test_inject_applies_the_bundle_through_a_kubeconfig(
        self, cli: CliRunner, tmp_path: Path, apiserver: FakeApiServer
    ) -> None:
        certs.issue(tmp_path / "certs", service="s", namespace="n")
        kubeconfig = kubeconfig_for(tmp_path, apiserver.url)
        result = cli.invoke(
            certs_cli.app,
            ["inject", "--dir", str(tmp_path / "certs"), "--kubeconfig", str(kubeconfig)],
        )
        assert result.exit_code == 0, result.output
        assert "now trusts 1 CA" in result.output
        assert len(apiserver.requests) == 1
        bundle = (tmp_path / "certs" / "ca-bundle.pem").read_bytes()
        assert_server_side_apply(apiserver.requests[0], bundle)
        assert apiserver.requests[0]["headers"]["authorization"] == "Bearer t"


def serve_cluster(
    apiserver: FakeApiServer, bundle: Sequence[x509.Certificate], leaf: x509.Certificate | None
) -> None:
    """The fake apiserver holds the webhook configuration with ``bundle`` as its caBundle, and
    the Secret with ``leaf`` (none when None)."""
    apiserver.objects[WEBHOOK_PATH] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "podium"},
        "webhooks": [
            {
                "name": "pods.podium.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
                "clientConfig": {"caBundle": base64.b64encode(certs.certs_to_pem(bundle)).decode()},
            }
        ],
    }
    apiserver.objects.pop(SECRET_PATH, None)
    if leaf is not None:
        pem = base64.b64encode(certs.cert_to_pem(leaf)).decode()
        apiserver.objects[SECRET_PATH] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "podium-tls", "namespace": "podium-system"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": pem, "tls.key": "", "ca.crt": pem},
        }


class TestCLIWithACluster:
    def test_rotate_promotes_only_what_the_cluster_trusts(
        self, cli: CliRunner, tmp_path: Path, apiserver: FakeApiServer
    ) -> None:
        state_dir = tmp_path / "certs"
        now = datetime.datetime.now(datetime.UTC)
        certs.issue(
            state_dir,
            service="podium",
            namespace="podium-system",
            ca_lifetime=90 * DAY,
            leaf_lifetime=30 * DAY,
            now=now - 61 * DAY,
        )
        a = certs.load_state(state_dir)
        serve_cluster(apiserver, [a.ca.cert], a.leaf.cert)
        args = ["rotate", "--dir", str(state_dir), "--kubeconfig"]
        args.append(str(kubeconfig_for(tmp_path, apiserver.url)))

        staged = cli.invoke(certs_cli.app, args)
        assert staged.exit_code == 0, staged.output
        assert "stage-ca" in staged.stdout and "ca-bundle.pem changed" in staged.stdout

        held = cli.invoke(certs_cli.app, args)  # nobody injected
        assert held.exit_code == 1, held.output
        assert "promote-ca held" in held.stdout and "podium certs inject" in held.stdout
        assert certs.load_state(state_dir).next_ca is not None

        serve_cluster(apiserver, certs.load_state(state_dir).bundle, a.leaf.cert)  # injected
        promoted = cli.invoke(certs_cli.app, args)
        assert promoted.exit_code == 0, promoted.output
        assert "promote-ca: promoted" in promoted.stdout
        assert "tls.crt changed: apply it" in promoted.stdout

        forced = cli.invoke(certs_cli.app, [*args, "--force", "--min-overlap-hours", "0"])
        assert forced.exit_code == 0, forced.output
        # The Secret still holds A's leaf: forced, with a warning that says what it risks.
        assert "drop-ca: dropped" in forced.stdout
        assert "Warning: --force: drop-ca although the Secret still holds" in forced.stderr

    def test_show_cluster_says_whether_the_cabundle_trusts_the_secret(
        self, cli: CliRunner, tmp_path: Path, apiserver: FakeApiServer
    ) -> None:
        state = certs.issue(tmp_path / "certs", service="podium", namespace="podium-system")
        stranger = certs.issue_ca("someone-else")
        kubeconfig = str(kubeconfig_for(tmp_path, apiserver.url))
        show = ["show", "--dir", str(tmp_path / "certs"), "--cluster", "--kubeconfig", kubeconfig]

        serve_cluster(apiserver, [state.ca.cert], state.leaf.cert)
        result = cli.invoke(certs_cli.app, [*show, "-o", "json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        sources = [row["source"] for row in doc["certificates"]]
        assert "MutatingWebhookConfiguration podium pods.podium.dev caBundle" in sources
        assert "Secret podium-system/podium-tls tls.crt" in sources
        assert str(tmp_path / "certs" / "tls.crt") in sources
        assert doc["checks"] == [
            {"check": "caBundle trusts the Secret's serving certificate", "ok": True, "fix": None}
        ]

        serve_cluster(apiserver, [stranger.cert], state.leaf.cert)
        result = cli.invoke(certs_cli.app, show)
        assert result.exit_code == 1
        assert "PROBLEM: caBundle trusts the Secret's serving certificate" in result.stdout

    def test_show_cluster_exits_1_on_a_row_in_error(
        self, cli: CliRunner, tmp_path: Path, apiserver: FakeApiServer
    ) -> None:
        """No Secret: the row says error, and so does the exit status (a script can alert)."""
        state = certs.issue(tmp_path / "certs", service="podium", namespace="podium-system")
        kubeconfig = str(kubeconfig_for(tmp_path, apiserver.url))
        show = ["show", "--dir", str(tmp_path / "certs"), "--cluster", "--kubeconfig", kubeconfig]
        serve_cluster(apiserver, [state.ca.cert], None)
        result = cli.invoke(certs_cli.app, show)
        assert result.exit_code == 1, result.output
        assert "does not exist" in result.stdout and "error" in result.stdout
        result = cli.invoke(certs_cli.app, [*show, "-o", "wide"])  # the sources whole
        assert result.exit_code == 1, result.output
        assert "Secret podium-system/podium-tls" in result.stdout
        result = cli.invoke(certs_cli.app, [*show, "-o", "json"])
        assert result.exit_code == 1
        rows = json.loads(result.stdout)["certificates"]
        assert {"source": "Secret podium-system/podium-tls", "error": "does not exist"} in rows

    def test_show_json_lists_every_file(self, cli: CliRunner, tmp_path: Path) -> None:
        certs.issue(tmp_path, service="podium", namespace="podium-system")
        result = cli.invoke(certs_cli.app, ["show", "--dir", str(tmp_path), "-o", "json"])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.stdout)["certificates"]
        assert [Path(r["source"]).name for r in rows] == ["tls.crt", "ca.pem", "ca-bundle.pem"]
        assert rows[0]["sans"][:1] == ["podium"] and rows[0]["status"] == "ok"
        assert rows[1]["isCA"] is True

    @pytest.mark.parametrize("command", ["inject", "rotate"])
    def test_an_unreachable_apiserver_is_one_line_and_exit_2(
        self, cli: CliRunner, tmp_path: Path, command: str
    ) -> None:
        certs.issue(tmp_path / "certs", service="s", namespace="n")
        with socket.socket() as sock:  # a port nothing listens on
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        kubeconfig = kubeconfig_for(tmp_path, f"https://127.0.0.1:{port}")
        result = cli.invoke(
            certs_cli.app,
            [command, "--dir", str(tmp_path / "certs"), "--kubeconfig", str(kubeconfig)],
        )
        assert result.exit_code == 2
        (line,) = result.stderr.splitlines()
        assert line.startswith("Error: ")
        assert f"cannot reach the Kubernetes API at https://127.0.0.1:{port}" in line
        assert "Traceback" not in result.output
        if command == "rotate":
            assert "--offline" in line

    def test_a_missing_context_is_one_line(self, cli: CliRunner, tmp_path: Path) -> None:
        certs.issue(tmp_path / "certs", service="s", namespace="n")
        kubeconfig = kubeconfig_for(tmp_path, "https://127.0.0.1:1")
        result = cli.invoke(
            certs_cli.app,
            [
                "inject",
                "--dir",
                str(tmp_path / "certs"),
                "--kubeconfig",
                str(kubeconfig),
                "--context",
                "nope",
            ],
        )
        assert result.exit_code == 2
        (line,) = result.stderr.splitlines()
        assert "cannot load a Kubernetes configuration" in line and "nope" in line
