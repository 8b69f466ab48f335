"""One rotation step: ``plan_rotation`` decides (pure), ``apply_rotation`` carries it out in
memory, ``rotate`` does both on a state directory. The steps and their gates are drawn in the
package's docstring (``webhook.certs``)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Iterable, Mapping
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from webhook.certs import issuing
from webhook.certs.issuing import (
    DEFAULT_CA_LIFETIME,
    DEFAULT_CA_NAME,
    DEFAULT_LEAF_LIFETIME,
    issue_ca,
    issued_at,
    reissue_serving,
)
from webhook.certs.keys import is_signed_by
from webhook.certs.renewal import needs_renewal
from webhook.certs.state import CertState, load_state, write_state

#: How long a staged CA must be trusted before it signs (when the cluster is not read), and a
#: new CA's leaf served before the old CA is dropped.
DEFAULT_MIN_OVERLAP = datetime.timedelta(hours=24)


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
    gates (see the package's docstring) hold a promotion and a drop back until they are safe;
    ``force`` takes them anyway and says what that risks.
    """
    step = _Step(force=force)
    retired = state.retired
    if retired and not any(is_signed_by(state.leaf.cert, cert) for cert in retired):
        step.gate(
            Action.DROP_CA,
            _drop_blocker(state, now=now, min_overlap=min_overlap, cluster=cluster),
            "a replica still serving a certificate of the dropped CA is not verified once the "
            "bundle is injected, and its admissions fail open",
        )
    staged = state.next_ca is not None and state.next_ca.cert in state.bundle
    if staged:
        assert state.next_ca is not None
        step.gate(
            Action.PROMOTE_CA,
            _promote_blocker(state.next_ca.cert, now=now, min_overlap=min_overlap, cluster=cluster),
            "until the apiserver's caBundle holds the new CA, it cannot verify podium and every "
            "training pod is admitted unpinned (failurePolicy Ignore)",
        )
    elif state.next_ca is not None or needs_renewal(state.ca.cert, now):
        # (A staged CA missing from the bundle is a staging that stopped half-way: finish it.)
        step.actions.append(Action.STAGE_CA)
    _plan_leaf(state, step, now=now)
    if cluster is not None and not cluster.verifies(state.leaf.cert):
        step.warnings.append(
            "the webhook's caBundle in the cluster does not trust the CA of the serving "
            "certificate: the apiserver cannot verify podium now; run `podium certs inject`"
        )
    return Plan(tuple(step.actions), tuple(step.held), tuple(step.warnings))


@dataclasses.dataclass(slots=True)
class _Step:
    """A rotation step being planned: what it does, what it holds back, what it warns of."""

    force: bool
    actions: list[Action] = dataclasses.field(default_factory=list)
    held: list[Hold] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def gate(self, action: Action, blocker: Hold | None, risk: str) -> None:
        """Take a gated action when nothing blocks it, or when forced (saying what it risks)."""
        if blocker is None:
            self.actions.append(action)
        elif self.force:
            self.actions.append(action)
            self.warnings.append(f"--force: {action} although {blocker.reason}; {risk}")
        else:
            self.held.append(blocker)


def _plan_leaf(state: CertState, step: _Step, *, now: datetime.datetime) -> None:
    """Re-issue the serving certificate with a promotion, or when it is due or broken — unless
    the signing CA has expired."""
    if Action.PROMOTE_CA in step.actions:
        step.actions.append(Action.RENEW_LEAF)
    elif (
        not state.leaf.matches
        or not is_signed_by(state.leaf.cert, state.ca.cert)
        or needs_renewal(state.leaf.cert, now)
    ):
        if now < state.ca.cert.not_valid_after_utc:
            step.actions.append(Action.RENEW_LEAF)
        else:  # an expired CA signs nothing that anyone would verify
            step.held.append(
                Hold(
                    Action.RENEW_LEAF,
                    f"the signing CA expired at {state.ca.cert.not_valid_after_utc:%Y-%m-%d %H:%M}Z"
                    ": the staged CA must be promoted first",
                    waiting=False,
                )
            )


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
    now = issuing.check_time(now)
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
