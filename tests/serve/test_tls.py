"""Tests for webhook.serve.tls: the server context, and
swapping its key pair live (also under load)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from webhook import certs
from webhook.serve import tls

HOST = "podium.podium-system.svc"
UTC = datetime.UTC


# --- helpers ---------------------------------------------------------------------------------


@dataclass
class Files:
    """A key pair on disk, as a mounted Secret would hold it."""

    directory: Path
    ca: certs.KeyPair

    @property
    def cert(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key(self) -> Path:
        return self.directory / "tls.key"

    def new_leaf(self) -> certs.KeyPair:
        return certs.issue_serving(
            self.ca, service="podium", namespace="podium-system", extra_sans=["127.0.0.1"]
        )

    def write(self, pair: certs.KeyPair) -> None:
        # As a renewal does: each file replaced atomically, key first.
        certs.atomic_write(self.key, pair.key_pem(), mode=0o600)
        certs.atomic_write(self.cert, pair.cert_pem())


@pytest.fixture
def files(tmp_path: Path) -> Files:
    ca = certs.issue_ca("test-ca")
    result = Files(tmp_path, ca)
    result.write(result.new_leaf())
    return result


def client_context(ca: certs.KeyPair | bytes) -> ssl.SSLContext:
    bundle = ca if isinstance(ca, bytes) else ca.cert_pem()
    return ssl.create_default_context(cadata=bundle.decode())


class Handshake:
    """A TLS handshake in memory, no sockets: create it, then `finish` it (maybe much later)."""

    def __init__(self, server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> None:
        self._server_in, self._server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._client_in, self._client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.server = server_ctx.wrap_bio(self._server_in, self._server_out, server_side=True)
        self.client = client_ctx.wrap_bio(self._client_in, self._client_out, server_hostname=HOST)

    def finish(self) -> x509.Certificate:
        """Pump bytes both ways until both sides are done; the server's certificate."""
        for _ in range(20):
            done = True
            for side in (self.client, self.server):
                try:
                    side.do_handshake()
                except ssl.SSLWantReadError:
                    done = False
            moved = self._client_out.pending or self._server_out.pending
            self._server_in.write(self._client_out.read())
            self._client_in.write(self._server_out.read())
            if done and not moved:
                break
        peer = self.client.getpeercert(binary_form=True)
        assert peer is not None
        return x509.load_der_x509_certificate(peer)


def served(server_ctx: ssl.SSLContext, ca: certs.KeyPair) -> int:
    """Serial number of the certificate a new connection gets."""
    return Handshake(server_ctx, client_context(ca)).finish().serial_number


def client_cert(ca: certs.KeyPair, directory: Path) -> tuple[Path, Path]:
    """A client certificate (no EKU, so any purpose) signed by ``ca``, written to files."""
    key = certs.issue_ca("throwaway").key
    now = datetime.datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(ca.key, hashes.SHA256())
    )
    cert_file, key_file = directory / "client.crt", directory / "client.key"
    cert_file.write_bytes(certs.cert_to_pem(cert))
    key_file.write_bytes(certs.key_to_pem(key))
    return cert_file, key_file


# --- server_context --------------------------------------------------------------------------


class TestServerContext:
    def test_defaults_to_tls_1_2_and_up_without_client_certificates(self, files: Files) -> None:
        ctx = tls.server_context(files.cert, files.key)
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
        assert ctx.verify_mode == ssl.CERT_NONE
        assert ctx.options & ssl.OP_NO_RENEGOTIATION
        old_client = client_context(files.ca)
        old_client.maximum_version = ssl.TLSVersion.TLSv1_2
        handshake = Handshake(ctx, old_client)
        handshake.finish()
        assert handshake.client.version() == "TLSv1.2"

    def test_tls_1_3_only_refuses_a_tls_1_2_client(self, files: Files) -> None:
        ctx = tls.server_context(files.cert, files.key, min_version="1.3")
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
        old_client = client_context(files.ca)
        old_client.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(ssl.SSLError):
            Handshake(ctx, old_client).finish()
        handshake = Handshake(ctx, client_context(files.ca))
        handshake.finish()
        assert handshake.client.version() == "TLSv1.3"

    def test_an_unknown_version_is_refused(self, files: Files) -> None:
        with pytest.raises(ValueError, match="min_version"):
            tls.server_context(files.cert, files.key, min_version="1.1")  # type: ignore[arg-type]

    def test_a_mismatched_pair_is_refused_at_start(self, files: Files) -> None:
        other = files.new_leaf()
        files.key.write_bytes(other.key_pem())
        with pytest.raises(ssl.SSLError):
            tls.server_context(files.cert, files.key)

    def test_client_certificates_are_required_when_a_client_ca_is_given(
        self, files: Files, tmp_path: Path
    ) -> None:
        client_ca = certs.issue_ca("apiserver-clients")
        (tmp_path / "clients.pem").write_bytes(client_ca.cert_pem())
        ctx = tls.server_context(files.cert, files.key, client_ca_file=tmp_path / "clients.pem")
        assert ctx.verify_mode == ssl.CERT_REQUIRED

        with pytest.raises(ssl.SSLError):
            Handshake(ctx, client_context(files.ca)).finish()

        good = client_context(files.ca)
        good.load_cert_chain(*client_cert(client_ca, tmp_path))
        handshake = Handshake(ctx, good)
        handshake.finish()
        assert handshake.server.getpeercert() is not None

        stranger = client_context(files.ca)
        stranger.load_cert_chain(*client_cert(certs.issue_ca("someone-else"), tmp_path))
        with pytest.raises(ssl.SSLError):
            Handshake(ctx, stranger).finish()


# --- CertReloader ----------------------------------------------------------------------------


@pytest.fixture
def ctx(files: Files) -> ssl.SSLContext:
    return tls.server_context(files.cert, files.key)


@pytest.fixture
def reloader(ctx: ssl.SSLContext, files: Files) -> tls.CertReloader:
    return tls.CertReloader(ctx, files.cert, files.key, interval=0.01)


def serial_on_disk(files: Files) -> int:
    return x509.load_pem_x509_certificate(files.cert.read_bytes()).serial_number


class TestCertReloader:
    def test_starts_with_what_the_context_serves(
        self, ctx: ssl.SSLContext, reloader: tls.CertReloader, files: Files
    ) -> None:
        assert reloader.serial == serial_on_disk(files) == served(ctx, files.ca)
        assert reloader.check_once() is tls.Reload.UNCHANGED
        assert reloader.reloads == 0

    def test_a_new_pair_is_served_to_new_connections_only(
        self, ctx: ssl.SSLContext, reloader: tls.CertReloader, files: Files
    ) -> None:
        old = served(ctx, files.ca)
        in_flight = Handshake(ctx, client_context(files.ca))  # connection accepted before

        new = files.new_leaf()
        files.write(new)
        assert reloader.check_once() is tls.Reload.RELOADED
        assert reloader.reloads == 1
        assert reloader.serial == new.cert.serial_number
        assert served(ctx, files.ca) == new.cert.serial_number
        assert in_flight.finish().serial_number == old
        assert reloader.check_once() is tls.Reload.UNCHANGED

    def test_says_when_the_served_certificate_expires(
        self, reloader: tls.CertReloader, files: Files
    ) -> None:
        on_disk = x509.load_pem_x509_certificate(files.cert.read_bytes())
        assert reloader.not_after() == on_disk.not_valid_after_utc.timestamp()
        new = files.new_leaf()
        files.write(new)
        reloader.check_once()
        assert reloader.not_after() == new.cert.not_valid_after_utc.timestamp()

    def test_the_moment_between_the_two_renames_is_skipped(
        self, ctx: ssl.SSLContext, reloader: tls.CertReloader, files: Files, caplog: Any
    ) -> None:
        old = served(ctx, files.ca)
        new = files.new_leaf()
        certs.atomic_write(files.key, new.key_pem(), mode=0o600)  # key renamed, cert not yet
        with caplog.at_level(logging.WARNING, logger="webhook.serve.tls"):
            assert reloader.check_once() is tls.Reload.REJECTED
        assert "KEY_VALUES_MISMATCH" in caplog.text
        assert reloader.last_error is not None
        assert served(ctx, files.ca) == old  # the live context still has a whole pair

        certs.atomic_write(files.cert, new.cert_pem())
        assert reloader.check_once() is tls.Reload.RELOADED
        assert reloader.last_error is None
        assert served(ctx, files.ca) == new.cert.serial_number

    @pytest.mark.parametrize(
        "damage",
        [
            pytest.param(lambda f: f.cert.write_bytes(f.cert.read_bytes()[:200]), id="half-cert"),
            pytest.param(lambda f: f.key.write_bytes(f.key.read_bytes()[:100]), id="half-key"),
            pytest.param(lambda f: f.cert.write_bytes(b""), id="empty-cert"),
            pytest.param(lambda f: f.key.write_bytes(b"garbage"), id="garbage-key"),
            pytest.param(lambda f: f.key.unlink(), id="missing-key"),
            pytest.param(
                lambda f: f.cert.write_bytes(certs.issue_ca("x").cert_pem()), id="other-cert"
            ),
        ],
    )
    def test_a_broken_pair_is_ignored(
        self,
        ctx: ssl.SSLContext,
        reloader: tls.CertReloader,
        files: Files,
        damage: Callable[[Files], object],
    ) -> None:
        old = served(ctx, files.ca)
        damage(files)
        assert reloader.check_once() is tls.Reload.REJECTED
        assert served(ctx, files.ca) == old
        assert reloader.serial == old

        repaired = files.new_leaf()
        files.write(repaired)
        assert reloader.check_once() is tls.Reload.RELOADED
        assert served(ctx, files.ca) == repaired.cert.serial_number

    def test_the_same_bad_pair_is_reported_once(
        self, reloader: tls.CertReloader, files: Files, caplog: Any
    ) -> None:
        half = files.cert.read_bytes()[:200]
        with caplog.at_level(logging.WARNING, logger="webhook.serve.tls"):
            for _ in range(3):
                certs.atomic_write(files.cert, half)  # rewritten: a new inode, the same bytes
                assert reloader.check_once() is tls.Reload.REJECTED
        assert len(caplog.records) == 1

    def test_undoing_a_bad_edit_clears_the_error(
        self, reloader: tls.CertReloader, files: Files
    ) -> None:
        good = files.key.read_bytes()
        certs.atomic_write(files.key, b"garbage", mode=0o600)
        assert reloader.check_once() is tls.Reload.REJECTED
        assert reloader.last_error is not None
        certs.atomic_write(files.key, good, mode=0o600)
        assert reloader.check_once() is tls.Reload.UNCHANGED
        assert reloader.last_error is None
        assert reloader.reloads == 0

    def test_the_same_bytes_rewritten_are_not_reloaded(
        self, reloader: tls.CertReloader, files: Files
    ) -> None:
        certs.atomic_write(files.cert, files.cert.read_bytes())
        os.utime(files.key)
        assert reloader.check_once() is tls.Reload.UNCHANGED
        assert reloader.reloads == 0

    def test_works_without_memfd(
        self,
        ctx: ssl.SSLContext,
        reloader: tls.CertReloader,
        files: Files,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.delattr(os, "memfd_create")
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
        new = files.new_leaf()
        files.write(new)
        assert reloader.check_once() is tls.Reload.RELOADED
        assert served(ctx, files.ca) == new.cert.serial_number
        assert list(scratch.iterdir()) == []  # the private copies are gone

    def test_interval_must_be_positive(self, ctx: ssl.SSLContext, files: Files) -> None:
        with pytest.raises(ValueError, match="interval"):
            tls.CertReloader(ctx, files.cert, files.key, interval=0)

    def test_why_a_pair_is_checked_before_the_live_context_sees_it(self, files: Files) -> None:
        """OpenSSL drops a context's key when a certificate that does not fit it is loaded.

        Loading a mismatched pair straight into a live context would therefore leave it unable
        to serve anyone; `CertReloader` tries every pair on a scratch context first.
        """
        ctx = tls.server_context(files.cert, files.key)
        other = files.new_leaf()
        files.cert.write_bytes(other.cert_pem())
        with pytest.raises(ssl.SSLError):
            ctx.load_cert_chain(files.cert, files.key)
        with pytest.raises(ssl.SSLError):
            served(ctx, files.ca)


class TestRun:
    async def test_picks_up_a_new_pair_and_stops_when_told(
        self, ctx: ssl.SSLContext, reloader: tls.CertReloader, files: Files
    ) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(reloader.run(stop))
        new = files.new_leaf()
        files.write(new)
        for _ in range(200):
            if reloader.serial == new.cert.serial_number:
                break
            await asyncio.sleep(0.01)
        assert served(ctx, files.ca) == new.cert.serial_number
        stop.set()
        await asyncio.wait_for(task, timeout=1)

    async def test_survives_an_unexpected_error(
        self, reloader: tls.CertReloader, monkeypatch: pytest.MonkeyPatch, caplog: Any
    ) -> None:
        calls = 0

        def explode() -> tls.Reload:
            nonlocal calls
            calls += 1
            raise RuntimeError("boom")

        monkeypatch.setattr(reloader, "check_once", explode)
        stop = asyncio.Event()
        task = asyncio.create_task(reloader.run(stop))
        while calls < 3:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, timeout=1)
        assert "boom" in caplog.text


# --- rotation under load ---------------------------------------------------------------------


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


class Server:
    """uvicorn on 127.0.0.1 serving our context, with the reloader on the same event loop."""

    def __init__(self, ctx: ssl.SSLContext, reloader: tls.CertReloader, loop: str) -> None:
        self.reloader = reloader
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.config = uvicorn.Config(
            hello,
            loop=loop,
            lifespan="off",
            ws="none",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=60,
            ssl_context_factory=lambda _config, _default: ctx,
        )
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self._run, name="uvicorn", daemon=True)

    def _run(self) -> None:
        with asyncio.Runner(loop_factory=self.config.get_loop_factory()) as runner:
            runner.run(self._serve())

    async def _serve(self) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(self.reloader.run(stop))
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            stop.set()
            await task

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            assert self.thread.is_alive(), "uvicorn died"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
        assert not self.thread.is_alive()


@dataclass
class Tally:
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    serials: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def peer_serial(response: httpx.Response) -> int:
    ssl_object = response.extensions["network_stream"].get_extra_info("ssl_object")
    return x509.load_der_x509_certificate(ssl_object.getpeercert(True)).serial_number


def hammer(url: str, bundle_file: Path, tally: Tally, deadline: float, limit: int) -> None:
    """New connection per request, trusting whatever the bundle says at that moment (as the
    apiserver does with the caBundle it was last given)."""
    contexts: dict[bytes, ssl.SSLContext] = {}
    for _ in range(limit):
        if time.monotonic() >= deadline:
            return
        bundle = bundle_file.read_bytes()
        verify = contexts.get(bundle) or contexts.setdefault(bundle, client_context(bundle))
        try:
            with httpx.Client(verify=verify, timeout=5) as client:
                response = client.get(url)
                response.raise_for_status()
                serial = peer_serial(response)
        except Exception as error:  # every kind of failure counts
            with tally.lock:
                tally.failures.append(repr(error))
            continue
        with tally.lock:
            tally.ok += 1
            tally.serials.add(serial)


def start_state(state_dir: Path) -> certs.CertState:
    """A CA past 2/3 of its life and a leaf due at once, both valid now, by the wall clock."""
    now = datetime.datetime.now(UTC)
    ca = certs.issue_ca(
        "podium-ca",
        lifetime=datetime.timedelta(minutes=60),
        now=now - datetime.timedelta(minutes=50),
    )
    leaf = certs.issue_serving(
        ca,
        service="podium",
        namespace="podium-system",
        extra_sans=["127.0.0.1", "localhost"],
        lifetime=datetime.timedelta(minutes=1),
        now=now,
    )
    state = certs.CertState(ca=ca, bundle=(ca.cert,), leaf=leaf)
    certs.write_state(state_dir, state)
    return state


CLIENTS = 4
STEP_SECONDS = 0.4
RELOAD_SECONDS = 0.05


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_rotation_under_load_fails_no_request(tmp_path: Path, loop: str) -> None:
    """Several clients open new TLS connections for ~3 s while the leaf is renewed six times and
    the CA is handed over once (stage, promote, drop), one rotation step every 0.4 s."""
    first = start_state(tmp_path)
    bundle_file = tmp_path / certs.BUNDLE
    ctx = tls.server_context(tmp_path / certs.LEAF_CERT, tmp_path / certs.LEAF_KEY)
    reloader = tls.CertReloader(
        ctx, tmp_path / certs.LEAF_CERT, tmp_path / certs.LEAF_KEY, interval=RELOAD_SECONDS
    )
    tally = Tally()
    rotations: list[certs.Rotation] = []
    with Server(ctx, reloader, loop) as server:
        url = f"https://127.0.0.1:{server.port}/"
        keep_alive = httpx.Client(verify=client_context(bundle_file.read_bytes()), timeout=5)
        with keep_alive:
            before = keep_alive.get(url)
            deadline = time.monotonic() + 6 * STEP_SECONDS + 0.6
            workers = [
                threading.Thread(
                    target=hammer, args=(url, bundle_file, tally, deadline, 5_000), daemon=True
                )
                for _ in range(CLIENTS)
            ]
            for worker in workers:
                worker.start()
            time.sleep(0.3)
            for _ in range(6):
                rotations.append(
                    certs.rotate(
                        tmp_path,
                        leaf_lifetime=datetime.timedelta(minutes=1),
                        ca_lifetime=datetime.timedelta(minutes=60),
                        # The reloader's side of every step, at test speed: no overlap.
                        min_overlap=datetime.timedelta(0),
                    )
                )
                time.sleep(STEP_SECONDS)
            for worker in workers:
                worker.join(timeout=10)
            assert not any(worker.is_alive() for worker in workers)

            # A connection opened before all this still works, still with its first certificate.
            after = keep_alive.get(url)
            same_connection = [
                r.extensions["network_stream"].get_extra_info("client_addr")
                for r in (before, after)
            ]
            assert same_connection[0] == same_connection[1]
            assert peer_serial(after) == peer_serial(before) == first.leaf.cert.serial_number

        with httpx.Client(verify=client_context(bundle_file.read_bytes()), timeout=5) as fresh:
            final_serial = peer_serial(fresh.get(url))

    A = certs.Action
    assert [r.actions for r in rotations] == [
        (A.STAGE_CA, A.RENEW_LEAF),
        (A.PROMOTE_CA, A.RENEW_LEAF),
        (A.DROP_CA, A.RENEW_LEAF),
        (A.RENEW_LEAF,),
        (A.RENEW_LEAF,),
        (A.RENEW_LEAF,),
    ]
    assert tally.failures == []
    assert tally.ok >= 40, f"only {tally.ok} requests got through"
    leaves = {r.state.leaf.cert.serial_number: r.state.leaf.cert for r in rotations}
    assert final_serial == rotations[-1].state.leaf.cert.serial_number
    assert len(tally.serials) >= 5, "the served certificate did not change often enough"
    issued = {first.leaf.cert.serial_number} | set(leaves)
    assert tally.serials <= issued
    old_ca, new_ca = first.ca.cert, rotations[-1].state.ca.cert
    assert new_ca != old_ca
    signers = {
        "old" if certs.is_signed_by(leaves[s], old_ca) else "new"
        for s in tally.serials
        if s in leaves
    }
    assert signers == {"old", "new"}, "clients did not see both CAs' leaves"
    assert reloader.reloads >= 5
