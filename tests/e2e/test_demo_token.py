"""The kept demo's credentials (scripts/demo.py): podium runs as the chart's ServiceAccount with a
TokenRequest token of the lifetime asked for (the demo's day, not the tests' hour), and
`Podium.renew_token` mints the next one, which a restarted podium works with."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts import demo
from testbed.controlplane import LocalCluster
from testbed.podium import Podium

pytestmark = pytest.mark.e2e


def claims(kubeconfig: Path) -> dict[str, Any]:
    """The claims of the token in ``kubeconfig`` (read, not verified: the apiserver does that)."""
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return decoded


def test_the_demos_token_lives_a_day_and_a_renewed_one_works(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    podium = Podium(local_cluster, tmp_path / "podium", token_seconds=demo.TOKEN_SECONDS)
    first = claims(podium.kubeconfig)
    assert first["exp"] - first["iat"] == demo.TOKEN_SECONDS == 24 * 3600
    podium.renew_token()
    renewed = claims(podium.kubeconfig)
    assert renewed["exp"] - renewed["iat"] == demo.TOKEN_SECONDS
    assert renewed["jti"] != first["jti"]  # a new token, not the old one again
    podium.start()  # ready only once its watches have synced: the renewed token is accepted
    try:
        assert podium.ready()
    finally:
        podium.stop()
