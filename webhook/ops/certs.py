"""Serving certificates for podium's webhook: issue, store, rotate, and hand to the cluster.

Everything is ECDSA P-256 and made with ``cryptography``. A certificate is due for renewal once 2/3
of its lifetime has passed (cert-manager's rule). The CA rotates without an outage because the
clients (the kube-apiserver, through the webhook's ``caBundle``) learn about a new CA one rotation
step before anything signed by it is served, and forget the old CA only once nothing it signed is
served any more::

    step  ca.pem (signs)  ca-next.pem   ca-bundle.pem   tls.crt signed by
    0     A               -             A               A
    1     A               B (staged)    A + B           A    A reached 2/3 of its life: stage B
    2     B               -             A + B           B    B promoted, the leaf re-issued by B
    3     B               -             B               B    A's leaves are gone: drop A

Leaf renewals happen at any step, signed by whichever CA signs at that step. Between two steps the
caller must inject ``ca-bundle.pem`` into the webhook configuration (`apply_ca_bundle`) and give
every replica time to reload (`webhook.serve.tls.CertReloader`).

Nothing relies on the caller doing that in time. Two steps are *gated*, so that running ``rotate``
every minute (as a cron job may) is as safe as running it daily:

* step 2 (promote B) waits until the apiserver trusts B: the webhook configuration's caBundle,
  as read from the cluster (`ClusterTrust`), holds it — or, when the cluster is not read
  (``--offline``), until B has been staged for ``min_overlap`` (default 24 h);
* step 3 (drop A) waits until the serving certificate is signed by B (in the state directory and,
  when the cluster is read, in the Secret) *and* has been for ``min_overlap``, so every replica
  has long reloaded a leaf of B before the apiserver forgets A.

``force`` takes a gated step anyway; the plan then says what it risks (`Plan.warnings`).

The decision is `plan_rotation` (pure: state, ``now`` and what the cluster holds in, a `Plan`
out); `apply_rotation` carries it out in memory and `write_state` puts it on disk in an order
where every prefix is safe: a new CA reaches the bundle before a leaf it signs, each file is
replaced atomically.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import enum
import functools
import ipaddress
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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

DEFAULT_CA_LIFETIME = datetime.timedelta(days=730)
DEFAULT_LEAF_LIFETIME = datetime.timedelta(days=90)
DEFAULT_CA_NAME = "podium-ca"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
#: Certificates start this long before they are issued, so that a peer whose clock is a little
#: behind does not see a brand-new certificate as "not yet valid".
CLOCK_SKEW = datetime.timedelta(minutes=5)
#: The fraction of its lifetime after which a certificate is renewed.
RENEW_AT = 2 / 3

#: How long a staged CA must be trusted before it signs (when the cluster is not read), and a
#: new CA's leaf served before the old CA is dropped.
DEFAULT_MIN_OVERLAP = datetime.timedelta(hours=24)

FIELD_MANAGER = "podium-certs"
WEBHOOK_CONFIG = "podium"
WEBHOOK_NAMES: tuple[str, ...] = ("pods.podium.dev",)
SECRET_NAME = "podium-tls"
SECRET_NAMESPACE = "podium-system"

_HOSTNAME_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_MAX_HOSTNAME = 253


class CertError(Exception):
    """A certificate, key or state directory that podium cannot use."""


class InvalidSANError(CertError, ValueError):
    """A subject alternative name that is neither an IP address nor a valid DNS name."""


class CertStateError(CertError):
    """A state directory that is missing files or whose files contradict each other."""


# --- keys and certificates -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key. Not checked to match: see `matches` and `load_pair`."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def matches(self) -> bool:
        return bool(self.cert.public_key() == self.key.public_key())

    def cert_pem(self) -> bytes:
        return cert_to_pem(self.cert)

    def key_pem(self) -> bytes:
        return key_to_pem(self.key)


def cert_to_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def certs_to_pem(certs: Iterable[x509.Certificate]) -> bytes:
    return b"".join(cert_to_pem(cert) for cert in certs)


def certs_from_pem(data: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM blob, in order; at least one."""
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as error:
        raise CertError(f"not a PEM certificate: {error}") from error


def key_to_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def key_from_pem(data: bytes) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise CertError(f"not an unencrypted PEM private key: {error}") from error
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError(f"expected an ECDSA key, got {type(key).__name__}")
    return key


def load_pair(cert_pem: bytes, key_pem: bytes) -> KeyPair:
    """Parse a certificate (the first one in ``cert_pem``) and its key; refuse a mismatch."""
    pair = KeyPair(certs_from_pem(cert_pem)[0], key_from_pem(key_pem))
    if not pair.matches:
        raise CertError("the private key does not belong to the certificate")
    return pair


@functools.lru_cache(maxsize=256)
def is_signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Whether ``issuer``'s key signed ``cert`` (and the names line up). Cached: a rotation plan
    asks about the same few certificates again and again."""
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


# --- subject alternative names ---------------------------------------------------------------


def parse_san(value: str) -> x509.GeneralName:
    """An IP address (v4 or v6, no zone) or a lower-cased RFC 1123 host name.

    Wildcards, trailing dots, spaces and names whose last label is all digits (which would read as
    a mistyped IP address) are refused with `InvalidSANError`.
    """
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        pass
    else:
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
            raise InvalidSANError(f"{value!r}: an IPv6 zone cannot go into a certificate")
        return x509.IPAddress(address)
    name = value.lower()
    labels = name.split(".")
    if (
        not name
        or len(name) > _MAX_HOSTNAME
        or not all(_HOSTNAME_LABEL.fullmatch(label) for label in labels)
        or labels[-1].isdigit()
    ):
        raise InvalidSANError(f"{value!r} is neither an IP address nor a DNS host name")
    return x509.DNSName(name)


def parse_sans(values: Iterable[str]) -> tuple[x509.GeneralName, ...]:
    """Command-line SANs: each value may hold several, comma-separated; duplicates collapse."""
    names: dict[x509.GeneralName, None] = {}
    for value in values:
        for part in value.split(","):
            if part:
                names[parse_san(part)] = None
    return tuple(names)


def serving_names(
    service: str, namespace: str, *, cluster_domain: str | None = DEFAULT_CLUSTER_DOMAIN
) -> list[str]:
    """The DNS names a Service is reached by. The apiserver dials ``<svc>.<ns>.svc``."""
    names = [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]
    if cluster_domain:
        names.append(f"{service}.{namespace}.svc.{cluster_domain}")
    return names


def san_strings(cert: x509.Certificate) -> list[str]:
    """A certificate's DNS and IP SANs as text (empty when it has none)."""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    dns: list[str] = sans.get_values_for_type(x509.DNSName)
    ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    return dns + ips


# --- issuing ---------------------------------------------------------------------------------


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _check_time(now: datetime.datetime | None) -> datetime.datetime:
    if now is None:
        return _utcnow()
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now


def _check_lifetime(lifetime: datetime.timedelta) -> None:
    if lifetime <= datetime.timedelta(0):
        raise ValueError(f"lifetime must be positive, got {lifetime}")


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def issue_ca(
    common_name: str,
    *,
    lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A self-signed CA that may sign leaves only (path length 0)."""
    now = _check_time(now)
    _check_lifetime(lifetime)
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert, key)


def issue_leaf(
    ca: KeyPair,
    *,
    subject: x509.Name,
    sans: Sequence[x509.GeneralName],
    lifetime: datetime.timedelta,
    now: datetime.datetime,
    usages: Sequence[x509.ObjectIdentifier] = (ExtendedKeyUsageOID.SERVER_AUTH,),
) -> KeyPair:
    """A leaf signed by ``ca``: serverAuth by default; a client certificate may have no SANs."""
    _check_lifetime(lifetime)
    key = _new_key()
    # A leaf never outlives the CA that vouches for it.
    not_after = min(now + lifetime, ca.cert.not_valid_after_utc)
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def issue_serving(
    ca: KeyPair,
    *,
    service: str,
    namespace: str,
    extra_sans: Iterable[str] = (),
    lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME,
    cluster_domain: str | None = DEFAULT_CLUSTER_DOMAIN,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A serverAuth leaf for a Service, signed by ``ca``, valid for its DNS names plus extras.

    ``extra_sans`` are parsed like the command line's ``--san`` (`parse_sans`), so
    ``("127.0.0.1", "localhost")`` adds an IP and a DNS SAN.
    """
    now = _check_time(now)
    base = serving_names(service, namespace, cluster_domain=cluster_domain)
    sans = parse_sans([*base, *extra_sans])
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, base[2])])
    return issue_leaf(ca, subject=subject, sans=sans, lifetime=lifetime, now=now)


def reissue_serving(
    leaf: x509.Certificate,
    ca: KeyPair,
    *,
    lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A new key and certificate with ``leaf``'s subject and SANs, signed by ``ca``."""
    now = _check_time(now)
    try:
        sans = list(leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except x509.ExtensionNotFound as error:
        raise CertStateError("the serving certificate has no SANs to carry over") from error
    return issue_leaf(ca, subject=leaf.subject, sans=sans, lifetime=lifetime, now=now)


# --- renewal timing --------------------------------------------------------------------------


def renewal_time(cert: x509.Certificate) -> datetime.datetime:
    """When 2/3 of the certificate's lifetime will have passed."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * RENEW_AT


def needs_renewal(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return _check_time(now) >= renewal_time(cert)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CertSummary:
    """What a person wants to see about a certificate (`podium certs show`)."""

    subject: str
    issuer: str
    serial: int
    is_ca: bool
    sans: list[str]
    not_before: datetime.datetime
    not_after: datetime.datetime
    renew_at: datetime.datetime


def summarize(cert: x509.Certificate) -> CertSummary:
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    return CertSummary(
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        serial=cert.serial_number,
        is_ca=is_ca,
        sans=san_strings(cert),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        renew_at=renewal_time(cert),
    )


# --- state on disk ---------------------------------------------------------------------------


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


# --- rotation --------------------------------------------------------------------------------


class Action(enum.StrEnum):
    #: Retired CAs left the bundle: nothing they signed is served any more.
    DROP_CA = "drop-ca"
    #: The staged CA, trusted for a whole step, now signs; the leaf is re-issued by it.
    PROMOTE_CA = "promote-ca"
    #: The signing CA reached 2/3 of its life: a new CA joins the bundle, signing nothing yet.
    STAGE_CA = "stage-ca"
    #: A new leaf key and certificate, signed by the signing CA.
    RENEW_LEAF = "renew-leaf"


def staged_at(ca: x509.Certificate) -> datetime.datetime:
    """When a CA was made (its not-before minus the allowance for clock skew)."""
    return issued_at(ca)


def issued_at(cert: x509.Certificate) -> datetime.datetime:
    """When a certificate was made (its not-before minus the allowance for clock skew)."""
    return cert.not_valid_before_utc + CLOCK_SKEW


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterTrust:
    """What the cluster holds, as read: the CAs each named webhook's ``caBundle`` trusts, and
    the serving certificate in the Secret (None when the Secret was not read or does not exist)."""

    bundles: Mapping[str, tuple[x509.Certificate, ...]]
    secret_leaf: x509.Certificate | None = None

    def trusts(self, cert: x509.Certificate) -> bool:
        """Every named webhook's caBundle holds ``cert``."""
        return bool(self.bundles) and all(cert in bundle for bundle in self.bundles.values())

    def verifies(self, leaf: x509.Certificate) -> bool:
        """Every named webhook's caBundle holds a CA that signed ``leaf``."""
        return bool(self.bundles) and all(
            any(is_signed_by(leaf, ca) for ca in bundle) for bundle in self.bundles.values()
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Hold:
    """A step that is due but not safe yet, and why. ``waiting``: only time is missing (the next
    runs will take it); otherwise something must be done first (inject, apply the Secret)."""

    action: Action
    reason: str
    waiting: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...]
    held: tuple[Hold, ...] = ()
    #: What a forced step risks, and trust problems found in the cluster.
    warnings: tuple[str, ...] = ()


def plan_rotation(
    state: CertState,
    *,
    now: datetime.datetime,
    min_overlap: datetime.timedelta = DEFAULT_MIN_OVERLAP,
    cluster: ClusterTrust | None = None,
    force: bool = False,
) -> Plan:
    """The actions of one rotation step, decided from the state as it was before the step and,
    when given, from what the cluster holds.

    Deciding from the old state is what spaces the CA changes a step apart: a CA staged in this
    step is promoted in a later one, and a CA retired in this step is dropped in a later one. The
    gates (see the module's docstring) hold a promotion and a drop back until they are safe;
    ``force`` takes them anyway and says what that risks.
    """
    actions: list[Action] = []
    held: list[Hold] = []
    warnings: list[str] = []

    def gate(action: Action, blocker: Hold | None, risk: str) -> None:
        if blocker is None:
            actions.append(action)
        elif force:
            actions.append(action)
            warnings.append(f"--force: {action} although {blocker.reason}; {risk}")
        else:
            held.append(blocker)

    retired = state.retired
    if retired and not any(is_signed_by(state.leaf.cert, cert) for cert in retired):
        gate(
            Action.DROP_CA,
            _drop_blocker(state, now=now, min_overlap=min_overlap, cluster=cluster),
            "a replica still serving a certificate of the dropped CA is not verified once the "
            "bundle is injected, and its admissions fail open",
        )
    staged = state.next_ca is not None and state.next_ca.cert in state.bundle
    if staged:
        assert state.next_ca is not None
        gate(
            Action.PROMOTE_CA,
            _promote_blocker(state.next_ca.cert, now=now, min_overlap=min_overlap, cluster=cluster),
            "until the apiserver's caBundle holds the new CA, it cannot verify podium and every "
            "training pod is admitted unpinned (failurePolicy Ignore)",
        )
    elif state.next_ca is not None or needs_renewal(state.ca.cert, now):
        # (A staged CA missing from the bundle is a staging that stopped half-way: finish it.)
        actions.append(Action.STAGE_CA)
    if Action.PROMOTE_CA in actions:
        actions.append(Action.RENEW_LEAF)
    elif (
        not state.leaf.matches
        or not is_signed_by(state.leaf.cert, state.ca.cert)
        or needs_renewal(state.leaf.cert, now)
    ):
        if now < state.ca.cert.not_valid_after_utc:
            actions.append(Action.RENEW_LEAF)
        else:  # an expired CA signs nothing that anyone would verify
            held.append(
                Hold(
                    Action.RENEW_LEAF,
                    f"the signing CA expired at {state.ca.cert.not_valid_after_utc:%Y-%m-%d %H:%M}Z"
                    ": the staged CA must be promoted first",
                    waiting=False,
                )
            )
    if cluster is not None and not cluster.verifies(state.leaf.cert):
        warnings.append(
            "the webhook's caBundle in the cluster does not trust the CA of the serving "
            "certificate: the apiserver cannot verify podium now; run `podium certs inject`"
        )
    return Plan(tuple(actions), tuple(held), tuple(warnings))


def _promote_blocker(
    staged: x509.Certificate,
    *,
    now: datetime.datetime,
    min_overlap: datetime.timedelta,
    cluster: ClusterTrust | None,
) -> Hold | None:
    if cluster is not None:
        if cluster.trusts(staged):
            return None
        return Hold(
            Action.PROMOTE_CA,
            "the webhook's caBundle in the cluster does not hold the staged CA yet: run "
            "`podium certs inject`",
            waiting=False,
        )
    ready = staged_at(staged) + min_overlap
    if now >= ready:
        return None
    return Hold(
        Action.PROMOTE_CA,
        f"the staged CA has been trusted for less than the overlap ({_hours(min_overlap)}); "
        f"due {ready:%Y-%m-%d %H:%M}Z, if ca-bundle.pem was injected",
        waiting=True,
    )


def _drop_blocker(
    state: CertState,
    *,
    now: datetime.datetime,
    min_overlap: datetime.timedelta,
    cluster: ClusterTrust | None,
) -> Hold | None:
    if not is_signed_by(state.leaf.cert, state.ca.cert):
        return Hold(
            Action.DROP_CA,
            "the serving certificate is not signed by the current CA yet",
            waiting=True,
        )
    if (
        cluster is not None
        and cluster.secret_leaf is not None
        and not is_signed_by(cluster.secret_leaf, state.ca.cert)
    ):
        return Hold(
            Action.DROP_CA,
            "the Secret still holds a serving certificate of the old CA: apply "
            "`podium certs secret | kubectl apply -f -`",
            waiting=False,
        )
    ready = issued_at(state.leaf.cert) + min_overlap
    if now >= ready:
        return None
    return Hold(
        Action.DROP_CA,
        f"the current CA's serving certificate has been out for less than the overlap "
        f"({_hours(min_overlap)}); due {ready:%Y-%m-%d %H:%M}Z",
        waiting=True,
    )


def _hours(delta: datetime.timedelta) -> str:
    return f"{delta.total_seconds() / 3600:g} h"


def apply_rotation(
    state: CertState,
    actions: Iterable[Action],
    *,
    now: datetime.datetime,
    leaf_lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME,
    ca_lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME,
) -> CertState:
    """Carry out planned actions in memory (this is where new keys are generated)."""
    todo = set(actions)
    ca, next_ca, bundle, leaf = state.ca, state.next_ca, state.bundle, state.leaf
    if Action.DROP_CA in todo:
        retired = set(state.retired)
        bundle = tuple(cert for cert in bundle if cert not in retired)
    if Action.PROMOTE_CA in todo:
        assert next_ca is not None, "PROMOTE_CA needs a staged CA"
        ca, next_ca = next_ca, None
    if Action.STAGE_CA in todo:
        if next_ca is None:
            next_ca = issue_ca(_next_ca_name(ca.cert, now), lifetime=ca_lifetime, now=now)
        if next_ca.cert not in bundle:
            bundle = (*bundle, next_ca.cert)
    if Action.RENEW_LEAF in todo:
        leaf = reissue_serving(leaf.cert, ca, lifetime=leaf_lifetime, now=now)
    return CertState(ca=ca, bundle=bundle, leaf=leaf, next_ca=next_ca)


def _next_ca_name(current: x509.Certificate, now: datetime.datetime) -> str:
    """``podium-ca@1767225600``: the old CA's base name and when the new one was made."""
    names = current.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    base = str(names[0].value).split("@", 1)[0] if names else DEFAULT_CA_NAME
    return f"{base}@{int(now.timestamp())}"


@dataclasses.dataclass(frozen=True, slots=True)
class Rotation:
    actions: tuple[Action, ...]
    state: CertState
    held: tuple[Hold, ...] = ()
    warnings: tuple[str, ...] = ()


def rotate_state(
    state: CertState,
    *,
    now: datetime.datetime,
    leaf_lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME,
    ca_lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME,
    min_overlap: datetime.timedelta = DEFAULT_MIN_OVERLAP,
    cluster: ClusterTrust | None = None,
    force: bool = False,
) -> Rotation:
    """One rotation step in memory: plan, apply."""
    plan = plan_rotation(state, now=now, min_overlap=min_overlap, cluster=cluster, force=force)
    after = apply_rotation(
        state, plan.actions, now=now, leaf_lifetime=leaf_lifetime, ca_lifetime=ca_lifetime
    )
    return Rotation(plan.actions, after, plan.held, plan.warnings)


def rotate(
    state_dir: Path,
    *,
    now: datetime.datetime | None = None,
    leaf_lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME,
    ca_lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME,
    min_overlap: datetime.timedelta = DEFAULT_MIN_OVERLAP,
    cluster: ClusterTrust | None = None,
    force: bool = False,
) -> Rotation:
    """One rotation step on a state directory: load, plan, apply, write what changed."""
    now = _check_time(now)
    before = load_state(state_dir)
    rotation = rotate_state(
        before,
        now=now,
        leaf_lifetime=leaf_lifetime,
        ca_lifetime=ca_lifetime,
        min_overlap=min_overlap,
        cluster=cluster,
        force=force,
    )
    write_state(state_dir, rotation.state, previous=before)
    return rotation


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
    now = _check_time(now)
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


# --- handing it to the cluster ---------------------------------------------------------------


def secret_manifest(
    *,
    name: str,
    namespace: str,
    tls_crt: bytes,
    tls_key: bytes,
    ca_crt: bytes,
) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret; ``ca.crt`` carries the CA bundle, as cert-manager does."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "podium",
                "app.kubernetes.io/managed-by": FIELD_MANAGER,
            },
        },
        "data": {"tls.crt": b64(tls_crt), "tls.key": b64(tls_key), "ca.crt": b64(ca_crt)},
    }


def ca_bundle_patch(
    webhook_config_name: str,
    bundle_pem: bytes,
    *,
    webhook_names: Sequence[str] = WEBHOOK_NAMES,
) -> dict[str, Any]:
    """A server-side-apply body that sets ``caBundle`` of the named webhooks and nothing else.

    ``webhooks`` is a map-list keyed by ``name`` (``+listType=map``), so under server-side apply
    each entry here merges into the existing webhook of that name; fields this body does not
    mention stay owned by whoever set them.
    """
    if not webhook_names:
        raise ValueError("name at least one webhook")
    bundle = base64.b64encode(bundle_pem).decode("ascii")
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": webhook_config_name},
        "webhooks": [
            {"name": name, "clientConfig": {"caBundle": bundle}} for name in webhook_names
        ],
    }


def apply_ca_bundle(
    api_client: Any,
    name: str,
    bundle_pem: bytes,
    *,
    webhook_names: Sequence[str] = WEBHOOK_NAMES,
) -> Any:
    """Server-side-apply ``caBundle`` onto a MutatingWebhookConfiguration (no get-then-replace).

    ``force=True`` takes the field over from another manager (an earlier injector); the result is
    the updated configuration as the client's model object.
    """
    # Imported here: the client costs most of a second to import and only this function needs it.
    from kubernetes import client  # noqa: PLC0415

    api = client.AdmissionregistrationV1Api(api_client)
    return api.patch_mutating_webhook_configuration(
        name,
        ca_bundle_patch(name, bundle_pem, webhook_names=webhook_names),
        field_manager=FIELD_MANAGER,
        force=True,
        _content_type="application/apply-patch+yaml",
        _request_timeout=(5.0, 30.0),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterCerts:
    """What ``certs show --cluster`` and ``rotate`` read: each webhook's caBundle and the Secret
    (``None`` when it does not exist)."""

    webhook_config: str
    bundles: Mapping[str, tuple[x509.Certificate, ...]]
    secret: str
    secret_leaf: x509.Certificate | None
    secret_bundle: tuple[x509.Certificate, ...]
    secret_found: bool

    @property
    def trust(self) -> ClusterTrust:
        return ClusterTrust(self.bundles, self.secret_leaf)


class ClusterReadError(CertError):
    """The cluster could not be read (unreachable, forbidden, not found); one line."""


def _pem_certs(data: bytes) -> tuple[x509.Certificate, ...]:
    return tuple(certs_from_pem(data)) if data.strip() else ()


def read_cluster(
    api_client: Any,
    *,
    name: str = WEBHOOK_CONFIG,
    webhook_names: Sequence[str] = WEBHOOK_NAMES,
    secret: tuple[str, str] | None = (SECRET_NAMESPACE, SECRET_NAME),
    timeout: tuple[float, float] = (5.0, 30.0),
) -> ClusterCerts:
    """Read the webhook configuration's caBundles and the serving Secret from the cluster.

    Raises `ClusterReadError` when the webhook configuration (or a named webhook in it) is not
    there or the API cannot be reached; a missing Secret is not an error (``secret_found``)."""
    from kubernetes import client  # noqa: PLC0415

    from webhook.ops import connect  # noqa: PLC0415

    try:
        config = client.AdmissionregistrationV1Api(api_client).read_mutating_webhook_configuration(
            name, _request_timeout=timeout
        )
    except client.ApiException as err:
        if err.status == 404:
            raise ClusterReadError(
                f"MutatingWebhookConfiguration {name} does not exist (pass --name)"
            ) from err
        raise ClusterReadError(connect.describe(err, api_client)) from err
    except Exception as err:  # urllib3's connection errors, timeouts
        raise ClusterReadError(connect.describe(err, api_client)) from err
    hooks = {w.name: w for w in config.webhooks or []}
    bundles: dict[str, tuple[x509.Certificate, ...]] = {}
    for hook in webhook_names:
        if hook not in hooks:
            known = ", ".join(sorted(hooks)) or "none"
            raise ClusterReadError(
                f"MutatingWebhookConfiguration {name} has no webhook {hook} (it has: {known}; "
                "pass --webhook)"
            )
        encoded = (hooks[hook].client_config and hooks[hook].client_config.ca_bundle) or ""
        bundles[hook] = _pem_certs(base64.b64decode(encoded))
    leaf: x509.Certificate | None = None
    ca_crt: tuple[x509.Certificate, ...] = ()
    found = False
    where = ""
    if secret is not None:
        namespace, secret_name = secret
        where = f"{namespace}/{secret_name}"
        try:
            obj = client.CoreV1Api(api_client).read_namespaced_secret(
                secret_name, namespace, _request_timeout=timeout
            )
        except client.ApiException as err:
            if err.status != 404:
                raise ClusterReadError(connect.describe(err, api_client)) from err
        except Exception as err:
            raise ClusterReadError(connect.describe(err, api_client)) from err
        else:
            found = True
            data = obj.data or {}
            crt = _pem_certs(base64.b64decode(data.get("tls.crt") or ""))
            leaf = crt[0] if crt else None
            ca_crt = _pem_certs(base64.b64decode(data.get("ca.crt") or ""))
    return ClusterCerts(name, bundles, where, leaf, ca_crt, found)
