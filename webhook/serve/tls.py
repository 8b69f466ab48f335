"""The webhook's TLS: a server `ssl.SSLContext`, and a reloader that swaps its key pair live.

`CertReloader` is cert-manager's ``file_source.go`` in Python: it re-reads the certificate and key
files every few seconds and loads a new pair into the *same* context, so new handshakes get the
new certificate without a restart while connections already open keep the one they started with
(OpenSSL copies the pair into each connection when the connection is created).

A pair is loaded only after it has been proven whole: both files are read once, the bytes are
written to private in-memory files, a scratch context must accept them (the key must match the
certificate), and only then is the live context loaded from those same bytes. A half-written or
mismatched pair — such as the moment between the two renames of a renewal — is logged and skipped,
and the old pair keeps serving. Loading in two steps matters: OpenSSL drops a context's key when a
certificate it does not fit is loaded, so a failed load straight into the live context would
leave it with no usable pair at all.

Serving with uvicorn (≥ 0.47 for ``ssl_context_factory``)::

    ctx = tls.server_context(cert_file, key_file)
    reloader = tls.CertReloader(ctx, cert_file, key_file)
    config = uvicorn.Config(app, host=..., port=8443, ssl_context_factory=lambda _c, _d: ctx)
    server = uvicorn.Server(config)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(reloader.run(stop))
        try:
            await server.serve()
        finally:
            stop.set()
            await task

    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(main())

The reloader must run on the event loop that serves, as above: loading a pair is then never
concurrent with a handshake being set up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from cryptography import x509

logger = logging.getLogger(__name__)

TLSVersionName = Literal["1.2", "1.3"]
_VERSIONS: dict[str, ssl.TLSVersion] = {
    "1.2": ssl.TLSVersion.TLSv1_2,
    "1.3": ssl.TLSVersion.TLSv1_3,
}

DEFAULT_INTERVAL = 10.0


def server_context(
    cert_file: str | os.PathLike[str],
    key_file: str | os.PathLike[str],
    *,
    min_version: TLSVersionName = "1.2",
    client_ca_file: str | os.PathLike[str] | None = None,
) -> ssl.SSLContext:
    """A TLS server context: TLS ≥ 1.2 (or ≥ 1.3), no renegotiation, the given key pair.

    With ``client_ca_file``, every client must present a certificate signed by one of its CAs
    (the kube-apiserver can, through an AdmissionConfiguration kubeconfig).
    """
    try:
        minimum = _VERSIONS[min_version]
    except KeyError:
        raise ValueError(
            f"min_version must be one of {sorted(_VERSIONS)}, got {min_version!r}"
        ) from None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = minimum
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        ctx.load_verify_locations(cafile=client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class Reload(enum.StrEnum):
    #: The files are as they were at the last check (or hold the pair already loaded).
    UNCHANGED = "unchanged"
    #: A new pair was loaded into the context.
    RELOADED = "reloaded"
    #: The files changed but do not hold a usable pair; the previous pair keeps serving.
    REJECTED = "rejected"


@dataclasses.dataclass(frozen=True, slots=True)
class _Pair:
    cert: bytes
    key: bytes

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.cert + b"\0" + self.key).hexdigest()


#: What `os.stat` says about both files; any difference means "read them again".
_Fingerprint = tuple[tuple[int, int, int, int], tuple[int, int, int, int]]


class CertReloader:
    """Keeps an `ssl.SSLContext`'s key pair in step with a certificate and key file.

    ``check_once`` does one check and says what it did; ``run`` checks every ``interval`` seconds
    until its stop event is set. The constructor loads the files' current pair through the same
    checked path, so the context and the reloader agree on what is being served.
    """

    def __init__(
        self,
        ctx: ssl.SSLContext,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        *,
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.ctx = ctx
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.interval = interval
        self.reloads = 0
        self.last_error: str | None = None
        self._fingerprint: _Fingerprint | None = None
        self._loaded: _Pair | None = None
        self._rejected: str | None = None
        self._serial: int | None = None
        self._not_after: float | None = None
        self.check_once()
        self.reloads = 0

    @property
    def serial(self) -> int | None:
        """Serial number of the certificate being served (None if none was loaded by us)."""
        return self._serial

    def not_after(self) -> float | None:
        """When the certificate being served expires (Unix time; None if none was loaded)."""
        return self._not_after

    def check_once(self) -> Reload:
        """Look at the files once; load a new, whole pair into the context if there is one."""
        try:
            fingerprint = (_stat(self.cert_file), _stat(self.key_file))
        except OSError as error:
            return self._reject(f"cannot stat the key pair: {error}", digest=None)
        if fingerprint == self._fingerprint:
            return Reload.UNCHANGED
        try:
            pair = _Pair(self.cert_file.read_bytes(), self.key_file.read_bytes())
        except OSError as error:
            return self._reject(f"cannot read the key pair: {error}", digest=None)
        self._fingerprint = fingerprint
        digest = pair.digest
        if self._loaded is not None and digest == self._loaded.digest:
            # Back to the pair being served (say, a bad edit undone): nothing is wrong any more.
            self._rejected, self.last_error = None, None
            return Reload.UNCHANGED
        if digest == self._rejected:
            return Reload.REJECTED
        try:
            _load_checked(self.ctx, pair)
        except (ssl.SSLError, ValueError, OSError) as error:
            return self._reject(f"{self.cert_file} and {self.key_file}: {error}", digest=digest)
        self._loaded, self._rejected, self.last_error = pair, None, None
        self.reloads += 1
        self._serial, self._not_after = _serial_and_expiry_of(pair.cert)
        logger.info(
            "serving certificate reloaded from %s (serial %x)", self.cert_file, self._serial or 0
        )
        return Reload.RELOADED

    def _reject(self, reason: str, *, digest: str | None) -> Reload:
        self._rejected = digest
        self.last_error = reason
        # The next check looks again: a half-written pair is usually whole a moment later.
        self._fingerprint = None if digest is None else self._fingerprint
        logger.warning("keeping the current serving certificate: %s", reason)
        return Reload.REJECTED

    async def run(self, stop_event: asyncio.Event) -> None:
        """Check every ``interval`` seconds until ``stop_event`` is set."""
        while not stop_event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_event.wait(), timeout=self.interval)
                return
            try:
                self.check_once()
            except Exception:  # a reloader that dies silently would serve a stale pair forever
                logger.exception("serving certificate check failed; trying again")


def _stat(path: Path) -> tuple[int, int, int, int]:
    # stat follows symlinks, so a Secret volume's atomic `..data` swap shows up as a new inode.
    st = path.stat()
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)


def _serial_and_expiry_of(cert_pem: bytes) -> tuple[int | None, float | None]:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return None, None
    return cert.serial_number, cert.not_valid_after_utc.timestamp()


def _load_checked(ctx: ssl.SSLContext, pair: _Pair) -> None:
    """Load ``pair`` into ``ctx`` only if a scratch context accepts exactly the same bytes."""
    with _private_file(pair.cert) as cert_path, _private_file(pair.key) as key_path:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
        ctx.load_cert_chain(cert_path, key_path)


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A path that reads ``data`` and that nobody can change: an anonymous in-memory file on
    Linux (so a read-only root file system needs no writable /tmp), else a 0600 temp file."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("podium-tls", os.MFD_CLOEXEC)
        try:
            with os.fdopen(os.dup(fd), "wb") as file:
                file.write(data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile(prefix="podium-tls-") as file:  # created 0600
        file.write(data)
        file.flush()
        yield file.name
