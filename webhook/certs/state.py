"""A state directory on disk: its files, read and written crash-safely, and a fresh one issued."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509

from webhook.certs import issuing
from webhook.certs.errors import CertStateError
from webhook.certs.issuing import (
    DEFAULT_CA_LIFETIME,
    DEFAULT_CA_NAME,
    DEFAULT_LEAF_LIFETIME,
    issue_ca,
    issue_serving,
)
from webhook.certs.keys import KeyPair, certs_from_pem, certs_to_pem, key_from_pem
from webhook.certs.names import DEFAULT_CLUSTER_DOMAIN, parse_sans

#: File names inside a state directory.
CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
NEXT_CA_CERT = "ca-next.pem"
NEXT_CA_KEY = "ca-next-key.pem"
BUNDLE = "ca-bundle.pem"
LEAF_CERT = "tls.crt"
LEAF_KEY = "tls.key"

KEY_MODE = 0o600
CERT_MODE = 0o644


@dataclasses.dataclass(frozen=True, slots=True)
class CertState:
    """The contents of a state directory.

    ``ca`` signs leaves; ``next_ca`` is a CA staged in ``bundle`` but not signing yet; ``bundle``
    is what clients trust (``ca`` always among it); ``leaf`` is what the webhook serves.
    """

    ca: KeyPair
    bundle: tuple[x509.Certificate, ...]
    leaf: KeyPair
    next_ca: KeyPair | None = None

    @property
    def retired(self) -> tuple[x509.Certificate, ...]:
        """Bundle CAs that neither sign nor are staged: kept only for leaves still in flight."""
        current = {self.ca.cert} | ({self.next_ca.cert} if self.next_ca else set())
        return tuple(cert for cert in self.bundle if cert not in current)


def atomic_write(path: Path, data: bytes, *, mode: int = CERT_MODE) -> None:
    """Replace ``path`` with ``data`` so that readers see the old file or the new, never half.

    The temporary file is created with ``mode`` already set (a key is never readable by others,
    not even for a moment) in the same directory, flushed to disk, then renamed over the target.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(directory: Path, name: str) -> bytes:
    try:
        return (directory / name).read_bytes()
    except FileNotFoundError as error:
        raise CertStateError(
            f"{directory / name} is missing; create the directory with `podium certs issue`"
        ) from error


def load_state(directory: Path) -> CertState:
    """Read a state directory.

    The one write it may do finishes a promotion that stopped between its two CA writes
    (``ca-key.pem`` already the staged CA's, ``ca.pem`` not yet): ``ca.pem`` is then rewritten.
    """
    ca = KeyPair(
        certs_from_pem(_read(directory, CA_CERT))[0], key_from_pem(_read(directory, CA_KEY))
    )
    bundle = tuple(certs_from_pem(_read(directory, BUNDLE)))
    leaf = KeyPair(
        certs_from_pem(_read(directory, LEAF_CERT))[0], key_from_pem(_read(directory, LEAF_KEY))
    )
    next_ca: KeyPair | None = None
    has_next = [(directory / name).exists() for name in (NEXT_CA_CERT, NEXT_CA_KEY)]
    if any(has_next):
        next_ca = KeyPair(
            certs_from_pem(_read(directory, NEXT_CA_CERT))[0],
            key_from_pem(_read(directory, NEXT_CA_KEY)),
        )
        if not next_ca.matches:
            raise CertStateError(f"{NEXT_CA_KEY} does not belong to {NEXT_CA_CERT}")
    if not ca.matches:
        # write_state promotes by writing ca-key.pem, then ca.pem; a stop in between leaves the
        # staged CA's key next to the old CA's certificate. Finish that write.
        if next_ca is None or next_ca.key.public_key() != ca.key.public_key():
            raise CertStateError(f"{CA_KEY} does not belong to {CA_CERT}")
        atomic_write(directory / CA_CERT, next_ca.cert_pem())
        ca = next_ca
    if ca.cert not in bundle:
        raise CertStateError(f"{BUNDLE} does not trust {CA_CERT}; re-create with `issue`")
    return CertState(ca=ca, bundle=bundle, leaf=leaf, next_ca=next_ca)


def write_state(directory: Path, state: CertState, *, previous: CertState | None = None) -> None:
    """Write what changed since ``previous`` (everything when None), in a crash-safe order.

    Staged CA first, then the bundle (so clients trust a CA before anything it signs is served),
    then the signing CA (key before certificate, see `load_state`), then the leaf (key before
    certificate; `webhook.serve.tls.CertReloader` ignores the mismatched pair in between), and last
    the staged CA's files once it has been promoted.
    """
    directory.mkdir(parents=True, exist_ok=True)

    def changed(new: KeyPair | tuple[x509.Certificate, ...], old: object) -> bool:
        # A new key always comes with a new certificate, so certificates tell what changed.
        if isinstance(new, KeyPair):
            return not isinstance(old, KeyPair) or new.cert != old.cert
        return new != old

    old = previous
    if state.next_ca is not None and changed(state.next_ca, old and old.next_ca):
        atomic_write(directory / NEXT_CA_KEY, state.next_ca.key_pem(), mode=KEY_MODE)
        atomic_write(directory / NEXT_CA_CERT, state.next_ca.cert_pem())
    if changed(state.bundle, old and old.bundle):
        atomic_write(directory / BUNDLE, certs_to_pem(state.bundle))
    if changed(state.ca, old and old.ca):
        atomic_write(directory / CA_KEY, state.ca.key_pem(), mode=KEY_MODE)
        atomic_write(directory / CA_CERT, state.ca.cert_pem())
    if changed(state.leaf, old and old.leaf):
        atomic_write(directory / LEAF_KEY, state.leaf.key_pem(), mode=KEY_MODE)
        atomic_write(directory / LEAF_CERT, state.leaf.cert_pem())
    if state.next_ca is None:
        for name in (NEXT_CA_CERT, NEXT_CA_KEY):
            with contextlib.suppress(FileNotFoundError):
                (directory / name).unlink()


def issue(
    state_dir: Path,
    *,
    service: str,
    namespace: str,
    extra_sans: Iterable[str] = (),
    leaf_lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME,
    ca_lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME,
    ca_name: str = DEFAULT_CA_NAME,
    cluster_domain: str | None = DEFAULT_CLUSTER_DOMAIN,
    now: datetime.datetime | None = None,
    overwrite: bool = False,
) -> CertState:
    """A fresh CA and serving leaf in ``state_dir``; refuses to replace one unless ``overwrite``."""
    now = issuing.check_time(now)
    if not overwrite and (state_dir / CA_KEY).exists():
        raise CertStateError(
            f"{state_dir} already holds a CA: rotate it (`podium certs rotate`), or replace it "
            "and everything it signed with --force"
        )
    # Parse SANs before generating anything, so a typo fails fast.
    parse_sans(extra_sans)
    ca = issue_ca(f"{ca_name}@{int(now.timestamp())}", lifetime=ca_lifetime, now=now)
    leaf = issue_serving(
        ca,
        service=service,
        namespace=namespace,
        extra_sans=extra_sans,
        lifetime=leaf_lifetime,
        cluster_domain=cluster_domain,
        now=now,
    )
    state = CertState(ca=ca, bundle=(ca.cert,), leaf=leaf)
    write_state(state_dir, state)
    return state
