"""Certificates the cluster keeps itself (``podium serve --certs self``), as Gatekeeper's
cert-controller and Kueue's internalcert do: the whole state of a rotation lives in one Secret, the
leader decides each round what to do with it (pure: `decide`), carries it out (`carry_out`, where
keys are made), writes the Secret and then copies its ``ca.crt`` into the webhook configuration's
``caBundle``; every replica reads the Secret and serves its ``tls.crt``.

The Secret's keys (values base64, as in any Secret)::

    tls.crt, tls.key              what every replica serves
    ca.crt                        the bundle the webhook configuration must trust (cert-manager's
                                  key name: a PodMonitor checks ``/metrics`` against it)
    signer.crt, signer.key        the CA that signs ``tls.crt``
    signer-next.crt, -next.key    a CA staged in ``ca.crt`` that signs nothing yet (mid-rotation)

and two annotations: ``podium.dev/rotate`` (anything new there asks for a CA rotation now, say
after a leaked key) and ``podium.dev/rotated`` (the last request podium acted on).

The rotation is `webhook.certs.rotation`'s, with the cluster read every round (`ClusterTrust`):
a staged CA signs only once the webhook configuration trusts it, and a retired CA leaves the
bundle only once the new CA's leaf has been in the Secret for ``min_overlap``, which is far longer
than a replica takes to pick it up (it reads the Secret every few seconds). Anything the Secret
holds that podium cannot use (nothing at all on a new install, a CA past its end, a key that does
not match) starts over with a fresh CA (`Decision.issue`).

A floor of its own like the rest of the package: nothing here talks to the cluster.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
from collections.abc import Mapping, Sequence

from cryptography import x509
from cryptography.x509.oid import NameOID

from webhook.certs import issuing
from webhook.certs.errors import CertError, CertStateError
from webhook.certs.issuing import (
    DEFAULT_CA_LIFETIME,
    DEFAULT_CA_NAME,
    DEFAULT_LEAF_LIFETIME,
    issue_ca,
    issue_leaf,
)
from webhook.certs.keys import KeyPair, certs_from_pem, certs_to_pem, is_signed_by, key_from_pem
from webhook.certs.names import parse_sans, san_strings
from webhook.certs.rotation import (
    Action,
    ClusterTrust,
    Plan,
    apply_rotation,
    plan_rotation,
)
from webhook.certs.state import CertState

TLS_CRT = "tls.crt"
TLS_KEY = "tls.key"
CA_CRT = "ca.crt"
SIGNER_CRT = "signer.crt"
SIGNER_KEY = "signer.key"
NEXT_CRT = "signer-next.crt"
NEXT_KEY = "signer-next.key"

#: Anything new here asks for a CA rotation now; podium copies it to `ROTATED` once it started one.
ROTATE_ANNOTATION = "podium.dev/rotate"
ROTATED_ANNOTATION = "podium.dev/rotated"

#: How long a new CA's leaf is in the Secret before the old CA leaves the bundle. Replicas read
#: the Secret every few seconds (`webhook.serve.selfcerts`); five minutes leave a wide margin.
DEFAULT_SELF_OVERLAP = datetime.timedelta(minutes=5)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """What the leader keeps: the serving certificate's names (the first is its common name),
    the lifetimes, and the overlap."""

    names: tuple[str, ...]
    leaf_lifetime: datetime.timedelta = DEFAULT_LEAF_LIFETIME
    ca_lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME
    min_overlap: datetime.timedelta = DEFAULT_SELF_OVERLAP
    ca_name: str = DEFAULT_CA_NAME

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("the serving certificate needs at least one name")
        parse_sans(self.names)  # a bad name fails here, not at the first issue
        for what, value in (("leaf", self.leaf_lifetime), ("CA", self.ca_lifetime)):
            if value <= datetime.timedelta(0):
                raise ValueError(f"the {what} lifetime must be positive, got {value}")
        if self.min_overlap < datetime.timedelta(0):
            raise ValueError(f"the overlap cannot be negative, got {self.min_overlap}")


# -- the Secret -----------------------------------------------------------------------------------


def _decoded(data: Mapping[str, object], key: str) -> bytes:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise CertStateError(f"the Secret has no {key}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as error:
        raise CertStateError(f"the Secret's {key} is not base64") from error


def _pair(data: Mapping[str, object], cert_key: str, key_key: str) -> KeyPair:
    try:
        pair = KeyPair(
            certs_from_pem(_decoded(data, cert_key))[0], key_from_pem(_decoded(data, key_key))
        )
    except CertStateError:
        raise
    except CertError as error:
        raise CertStateError(f"the Secret's {cert_key} or {key_key}: {error}") from error
    if not pair.matches:
        raise CertStateError(f"the Secret's {key_key} does not belong to its {cert_key}")
    return pair


def serving_pair(data: Mapping[str, object]) -> KeyPair:
    """The pair a replica serves: ``tls.crt`` and ``tls.key``, checked to match.
    `CertStateError` when the Secret does not hold one."""
    return _pair(data, TLS_CRT, TLS_KEY)


def state_from_secret(data: Mapping[str, object] | None) -> CertState:
    """The rotation state a Secret's ``data`` holds; `CertStateError` (one line) when it holds
    none podium can use (empty, as the chart creates it, or damaged)."""
    if not data:
        raise CertStateError("the Secret holds no certificate yet")
    leaf = serving_pair(data)
    ca = _pair(data, SIGNER_CRT, SIGNER_KEY)
    try:
        bundle = tuple(certs_from_pem(_decoded(data, CA_CRT)))
    except CertStateError:
        raise
    except CertError as error:
        raise CertStateError(f"the Secret's {CA_CRT}: {error}") from error
    next_ca = _pair(data, NEXT_CRT, NEXT_KEY) if data.get(NEXT_CRT) else None
    if ca.cert not in bundle:
        raise CertStateError(f"the Secret's {CA_CRT} does not hold its {SIGNER_CRT}")
    return CertState(ca=ca, bundle=bundle, leaf=leaf, next_ca=next_ca)


def secret_data(state: CertState) -> dict[str, str]:
    """A Secret's ``data`` for ``state`` (the inverse of `state_from_secret`)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    data = {
        TLS_CRT: b64(state.leaf.cert_pem()),
        TLS_KEY: b64(state.leaf.key_pem()),
        CA_CRT: b64(certs_to_pem(state.bundle)),
        SIGNER_CRT: b64(state.ca.cert_pem()),
        SIGNER_KEY: b64(state.ca.key_pem()),
    }
    if state.next_ca is not None:
        data[NEXT_CRT] = b64(state.next_ca.cert_pem())
        data[NEXT_KEY] = b64(state.next_ca.key_pem())
    return data


def bundle_of(data: Mapping[str, object]) -> tuple[x509.Certificate, ...]:
    """The CAs a Secret's ``ca.crt`` holds (none when it holds none)."""
    try:
        return tuple(certs_from_pem(_decoded(data, CA_CRT)))
    except CertError:
        return ()


def rotation_requested(annotations: Mapping[str, object]) -> str | None:
    """The rotation asked for through `ROTATE_ANNOTATION` and not yet acted on, or None."""
    asked = annotations.get(ROTATE_ANNOTATION)
    if not isinstance(asked, str) or not asked or asked == annotations.get(ROTATED_ANNOTATION):
        return None
    return asked


# -- the decision ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """One round of the leader. ``issue``: start over with a fresh CA and leaf (``reason`` says
    why); otherwise ``plan`` (a rotation step, possibly empty), ``reshape`` (the leaf is
    re-issued because its names are not the policy's), and ``rotate`` (a CA rotation asked for
    through the annotation starts now)."""

    issue: bool = False
    reason: str = ""
    plan: Plan = dataclasses.field(default_factory=lambda: Plan(()))
    reshape: bool = False
    rotate: bool = False

    @property
    def changes(self) -> bool:
        """Whether carrying it out writes anything new to the Secret."""
        return self.issue or self.reshape or self.rotate or bool(self.plan.actions)


def in_rotation(state: CertState) -> bool:
    """A CA is staged, or a retired one is still in the bundle."""
    return state.next_ca is not None or bool(state.retired)


def decide(
    state: CertState | None,
    *,
    now: datetime.datetime,
    policy: Policy,
    trust: ClusterTrust | None,
    problem: str = "",
    rotate_requested: bool = False,
) -> Decision:
    """What the leader does this round with the state the Secret holds (None: no usable state,
    ``problem`` says why) and what the webhook configuration trusts (``trust``; None when it
    could not be read, which holds back a promotion: only the cluster says when the apiserver
    trusts the staged CA)."""
    now = issuing.check_time(now)
    if state is None:
        return Decision(issue=True, reason=problem or "the Secret holds no certificate yet")
    if not _usable_signer(state, now):
        return Decision(issue=True, reason="every CA in the Secret has expired")
    unread = ClusterTrust({})  # trusts nothing: the gates hold until the cluster is read
    seen = ClusterTrust(
        trust.bundles if trust is not None else unread.bundles, secret_leaf=state.leaf.cert
    )
    plan = plan_rotation(state, now=now, min_overlap=policy.min_overlap, cluster=seen)
    rotate = rotate_requested and not in_rotation(state) and Action.STAGE_CA not in plan.actions
    reshape = set(san_strings(state.leaf.cert)) != set(_canonical(policy.names))
    return Decision(plan=plan, reshape=reshape, rotate=rotate)


def _usable_signer(state: CertState, now: datetime.datetime) -> bool:
    """The signing CA, or a staged one that can take over, is still valid."""
    cas = [state.ca] + ([state.next_ca] if state.next_ca is not None else [])
    return any(now < ca.cert.not_valid_after_utc for ca in cas)


def _canonical(names: Sequence[str]) -> list[str]:
    """The names as a certificate spells them back (`san_strings`: DNS names, then IPs)."""
    parsed = parse_sans(names)
    dns = [str(n.value) for n in parsed if isinstance(n, x509.DNSName)]
    ips = [str(n.value) for n in parsed if isinstance(n, x509.IPAddress)]
    return dns + ips


#: How many CAs the webhook trusted before a fresh start stay in the new bundle.
KEPT_ON_ISSUE = 2


def carry_out(
    state: CertState | None,
    decision: Decision,
    *,
    now: datetime.datetime,
    policy: Policy,
    trusted: Sequence[x509.Certificate] = (),
) -> CertState | None:
    """The state after ``decision`` (new keys are made here); None when nothing changes.

    A fresh start keeps in its bundle the (at most `KEPT_ON_ISSUE` newest, unexpired) CAs the
    webhook configuration trusted (``trusted``): replicas still serving a certificate they signed
    (a switch from ``podium certs`` or cert-manager, a damaged Secret) stay verified until the
    overlap has passed and the rotation drops them like any retired CA."""
    now = issuing.check_time(now)
    if decision.issue or state is None:
        ca = issue_ca(
            f"{policy.ca_name}@{int(now.timestamp())}", lifetime=policy.ca_lifetime, now=now
        )
        alive = [c for c in dict.fromkeys(trusted) if now < c.not_valid_after_utc]
        alive.sort(key=lambda c: c.not_valid_before_utc)
        kept = tuple(alive[-KEPT_ON_ISSUE:]) if KEPT_ON_ISSUE else ()
        return CertState(ca=ca, bundle=(ca.cert, *kept), leaf=_leaf(ca, policy, now))
    if not decision.changes:
        return None
    actions = list(decision.plan.actions)
    if decision.rotate:
        actions.append(Action.STAGE_CA)
    after = apply_rotation(
        state,
        [a for a in actions if not (decision.reshape and a is Action.RENEW_LEAF)],
        now=now,
        leaf_lifetime=policy.leaf_lifetime,
        ca_lifetime=policy.ca_lifetime,
    )
    if decision.reshape:
        after = dataclasses.replace(after, leaf=_leaf(after.ca, policy, now))
    return after


def _leaf(ca: KeyPair, policy: Policy, now: datetime.datetime) -> KeyPair:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, policy.names[0])])
    return issue_leaf(
        ca,
        subject=subject,
        sans=parse_sans(policy.names),
        lifetime=policy.leaf_lifetime,
        now=now,
    )


def serves_validly(state: CertState, now: datetime.datetime) -> bool:
    """The leaf is within its validity and signed by a CA of the bundle that is too: what a
    client trusting the bundle accepts (names aside)."""
    leaf = state.leaf.cert
    if not leaf.not_valid_before_utc <= now < leaf.not_valid_after_utc:
        return False
    return any(
        is_signed_by(leaf, ca) and ca.not_valid_before_utc <= now < ca.not_valid_after_utc
        for ca in state.bundle
    )
