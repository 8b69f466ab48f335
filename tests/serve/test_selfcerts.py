"""``webhook.serve.selfcerts`` on the in-memory API twin: the leader fills the chart's empty
Secret and injects its CA, replicas serve what the Secret holds (a placeholder until then), a
rotation asked for runs to its end, a wiped caBundle comes back, and a write on a Secret that
changed meanwhile is refused whole."""

from __future__ import annotations

import base64
import datetime
import ssl
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from webhook import certs
from webhook.certs import selfmanaged
from webhook.kube import errors, twins
from webhook.serve import selfcerts, tls

NS = "podium-system"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
OVERLAP = datetime.timedelta(minutes=5)


def empty_secret() -> dict[str, Any]:
    """What the chart creates."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "podium-tls", "namespace": NS, "labels": {"a": "b"}},
    }


def webhook_configuration(ca_bundle: str | None = None) -> dict[str, Any]:
    client: dict[str, Any] = {"service": {"name": "podium", "namespace": NS, "path": "/mutate"}}
    if ca_bundle is not None:
        client["caBundle"] = ca_bundle
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "podium"},
        "webhooks": [{"name": "pods.podium.dev", "clientConfig": client, "sideEffects": "None"}],
    }


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now


def keeper(
    api: twins.InMemoryObjects, directory: Path, clock: Clock, *, leader: bool
) -> selfcerts.CertKeeper:
    options = selfcerts.Options(
        namespace=NS, sans=("127.0.0.1",), directory=directory, min_overlap=OVERLAP
    )
    kept = selfcerts.CertKeeper(api, options, is_leader=lambda: leader, clock=clock)
    kept.prepare(None)
    kept.reloader = tls.CertReloader(
        tls.server_context(kept.cert_file, kept.key_file), kept.cert_file, kept.key_file
    )
    return kept


def stored_secret(api: twins.InMemoryObjects) -> dict[str, Any]:
    return dict(api.objects[("", "Secret", NS, "podium-tls")])


def stored_bundle(api: twins.InMemoryObjects) -> bytes:
    config = api.objects[
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration", "", "podium")
    ]
    (hook,) = config["webhooks"]
    return base64.b64decode(hook["clientConfig"].get("caBundle") or "")


def served(kept: selfcerts.CertKeeper) -> x509.Certificate:
    return x509.load_pem_x509_certificate(kept.cert_file.read_bytes())


@pytest.fixture
def api() -> twins.InMemoryObjects:
    objects = twins.InMemoryObjects()
    objects.put(empty_secret())
    objects.put(webhook_configuration())
    return objects


async def test_the_leader_fills_the_empty_secret_and_every_replica_serves_it(
    api: twins.InMemoryObjects, tmp_path: Path
) -> None:
    clock = Clock()
    leader = keeper(api, tmp_path / "leader", clock, leader=True)
    other = keeper(api, tmp_path / "other", clock, leader=False)
    # Until then: a throw-away certificate, and /readyz waits for the real one.
    assert not other.ready() and other.pending() == (selfcerts.PENDING,)
    placeholder = served(other)
    await other.step()  # not the leader: nothing to serve yet
    assert not other.ready() and served(other) == placeholder

    await leader.step()
    secret = stored_secret(api)
    data = secret["data"]
    state = selfmanaged.state_from_secret(data)
    assert secret["metadata"]["labels"] == {"a": "b", "app.kubernetes.io/name": "podium"}
    assert secret["type"] == "Opaque"  # as the chart made it
    assert stored_bundle(api) == base64.b64decode(data["ca.crt"])
    assert x509.load_pem_x509_certificates(stored_bundle(api)) == [state.ca.cert]
    assert leader.ready() and served(leader) == state.leaf.cert

    await other.step()
    assert other.ready() and served(other) == state.leaf.cert
    assert other.reloader is not None and other.reloader.serial == state.leaf.cert.serial_number
    names = certs.san_strings(state.leaf.cert)
    assert names[0] == "podium.podium-system.svc" and "127.0.0.1" in names


async def test_a_replica_started_later_serves_the_secret_at_once(
    api: twins.InMemoryObjects, tmp_path: Path
) -> None:
    clock = Clock()
    await keeper(api, tmp_path / "leader", clock, leader=True).step()
    late = selfcerts.CertKeeper(api, selfcerts.Options(namespace=NS, directory=tmp_path / "late"))
    late.prepare(await late.read_secret())
    late.reloader = tls.CertReloader(
        tls.server_context(late.cert_file, late.key_file), late.cert_file, late.key_file
    )
    assert late.ready()
    assert served(late) == selfmanaged.serving_pair(stored_secret(api)["data"]).cert


async def test_a_rotation_asked_for_runs_to_its_end(
    api: twins.InMemoryObjects, tmp_path: Path
) -> None:
    clock = Clock()
    leader = keeper(api, tmp_path / "leader", clock, leader=True)
    await leader.step()
    before = selfmanaged.state_from_secret(stored_secret(api)["data"])
    await api.merge_patch(
        "v1", "Secret", NS, "podium-tls", {"metadata": {"annotations": {"podium.dev/rotate": "1"}}}
    )
    seen: list[tuple[int, bool]] = []
    for _ in range(4):
        clock.now += datetime.timedelta(seconds=5)
        await leader.step()
        state = selfmanaged.state_from_secret(stored_secret(api)["data"])
        trusted = x509.load_pem_x509_certificates(stored_bundle(api))
        # The webhook trusts what the Secret's bundle holds, and that verifies what is served.
        assert trusted == list(state.bundle)
        assert any(certs.is_signed_by(served(leader), ca) for ca in trusted)
        seen.append((len(state.bundle), state.next_ca is not None))
    # staged, promoted, then held for the overlap
    assert seen == [(2, True), (2, False), (2, False), (2, False)]
    clock.now += OVERLAP
    await leader.step()
    after = selfmanaged.state_from_secret(stored_secret(api)["data"])
    assert len(after.bundle) == 1 and after.ca.cert != before.ca.cert
    assert x509.load_pem_x509_certificates(stored_bundle(api)) == [after.ca.cert]
    annotations = stored_secret(api)["metadata"]["annotations"]
    assert annotations["podium.dev/rotated"] == "1"
    assert served(leader) == after.leaf.cert


async def test_a_wiped_ca_bundle_comes_back(api: twins.InMemoryObjects, tmp_path: Path) -> None:
    clock = Clock()
    leader = keeper(api, tmp_path, clock, leader=True)
    await leader.step()
    expected = stored_bundle(api)
    api.put(webhook_configuration())  # a helm upgrade, a person
    assert stored_bundle(api) == b""
    await leader.step()
    assert stored_bundle(api) == expected
    calls = len(api.calls)
    await leader.step()  # nothing to do: the configuration is read, not written
    # (the Secret and the configuration, read once each: the replica part uses what was read)
    assert [op for op, *_ in api.calls[calls:]] == ["get", "get"]


async def test_without_the_secret_the_leader_creates_it(tmp_path: Path) -> None:
    api = twins.InMemoryObjects()
    api.put(webhook_configuration())
    await keeper(api, tmp_path, Clock(), leader=True).step()
    secret = stored_secret(api)
    assert secret["type"] == "kubernetes.io/tls"
    assert selfmanaged.state_from_secret(secret["data"]) is not None


async def test_without_the_webhook_configuration_the_secret_is_still_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = twins.InMemoryObjects()
    api.put(empty_secret())
    kept = keeper(api, tmp_path, Clock(), leader=True)
    await kept.step()
    assert kept.ready()
    assert "MutatingWebhookConfiguration podium not found" in caplog.text


async def test_a_secret_changed_meanwhile_is_not_written(
    api: twins.InMemoryObjects, tmp_path: Path
) -> None:
    clock = Clock()
    kept = keeper(api, tmp_path, clock, leader=True)
    real_get = api.get
    interfere = True

    async def get_then_someone_writes(*args: str) -> Any:
        found = await real_get(*args)
        if args[1] == "Secret" and interfere:
            api.put({**empty_secret(), "metadata": {**empty_secret()["metadata"], "labels": {}}})
        return found

    api.get = get_then_someone_writes  # type: ignore[method-assign]
    with pytest.raises(errors.Conflict):
        await kept.lead()
    assert "data" not in stored_secret(api)
    # The new CA was trusted first (it signs nothing anyone serves); the next round starts over
    # and keeps it in the bundle until the overlap has passed.
    (first,) = x509.load_pem_x509_certificates(stored_bundle(api))
    interfere = False
    await kept.step()
    state = selfmanaged.state_from_secret(stored_secret(api)["data"])
    assert state.bundle == (state.ca.cert, first)
    assert x509.load_pem_x509_certificates(stored_bundle(api)) == list(state.bundle)
    clock.now += OVERLAP
    await kept.step()
    assert x509.load_pem_x509_certificates(stored_bundle(api)) == [state.ca.cert]


async def test_a_damaged_secret_starts_over_and_the_old_ca_stays_trusted_for_a_while(
    api: twins.InMemoryObjects, tmp_path: Path
) -> None:
    """Also a switch from `podium certs` or cert-manager: replicas still serving the old CA's
    certificate stay verified until the overlap has passed."""
    clock = Clock()
    kept = keeper(api, tmp_path, clock, leader=True)
    await kept.step()
    old = selfmanaged.state_from_secret(stored_secret(api)["data"])
    secret = stored_secret(api)
    secret["data"] = {**secret["data"], "tls.key": secret["data"]["signer.key"]}
    api.put(secret)
    clock.now += datetime.timedelta(seconds=5)
    await kept.step()
    state = selfmanaged.state_from_secret(stored_secret(api)["data"])
    assert state.ca.cert != old.ca.cert
    assert state.bundle == (state.ca.cert, old.ca.cert)
    assert x509.load_pem_x509_certificates(stored_bundle(api)) == list(state.bundle)
    clock.now += OVERLAP
    await kept.step()
    assert x509.load_pem_x509_certificates(stored_bundle(api)) == [state.ca.cert]
    ctx = ssl.create_default_context(cadata=stored_bundle(api).decode())
    assert ctx.cert_store_stats()["x509_ca"] == 1


async def test_a_new_ca_is_trusted_before_the_secret_holds_anything_it_signed(
    api: twins.InMemoryObjects, tmp_path: Path
) -> None:
    kept = keeper(api, tmp_path, Clock(), leader=True)

    def refuse_secret_writes(op: str, key: tuple[str, str, str, str]) -> errors.ApiError | None:
        return errors.ApiError("forbidden") if (op, key[1]) == ("replace", "Secret") else None

    api.fail = refuse_secret_writes
    with pytest.raises(errors.ApiError):
        await kept.lead()
    assert "data" not in stored_secret(api)
    assert len(x509.load_pem_x509_certificates(stored_bundle(api))) == 1


async def test_a_replica_that_cannot_read_the_secret_stops_being_ready(
    api: twins.InMemoryObjects, tmp_path: Path
) -> None:
    """Before the leader could drop a CA (``min_overlap`` after the new certificate), a replica
    that has not read the Secret for half that long leaves the Service's endpoints."""
    clock = Clock()
    await keeper(api, tmp_path / "leader", clock, leader=True).step()
    seconds = [1000.0]
    options = selfcerts.Options(namespace=NS, directory=tmp_path / "other", min_overlap=OVERLAP)
    other = selfcerts.CertKeeper(
        api, options, is_leader=lambda: False, monotonic=lambda: seconds[0]
    )
    other.prepare(await other.read_secret())
    other.reloader = tls.CertReloader(
        tls.server_context(other.cert_file, other.key_file), other.cert_file, other.key_file
    )
    assert other.ready() and other.stale_after == OVERLAP.total_seconds() / 2

    api.fail = lambda op, key: errors.ApiError("unreachable") if key[1] == "Secret" else None
    seconds[0] += other.stale_after - 1
    with pytest.raises(errors.ApiError):
        await other.step()
    assert other.ready()
    seconds[0] += 1
    assert not other.ready() and other.pending() == (selfcerts.STALE,)

    api.fail = twins.no_fault
    await other.step()
    assert other.ready() and other.pending() == ()
