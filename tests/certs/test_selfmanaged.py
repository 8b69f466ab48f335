"""``webhook.certs.selfmanaged``: the leader's decisions about the certificate it keeps in a
Secret (tables), the Secret's round trip, and a simulated cluster over random clocks and
lifetimes in which no admission fails (hypothesis)."""

from __future__ import annotations

import base64
import dataclasses
import datetime

import pytest
from cryptography import x509
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.certs.support import DAY, T0
from webhook import certs
from webhook.certs import selfmanaged
from webhook.certs.rotation import Action

NAMES = ("podium.podium-system.svc", "podium", "127.0.0.1")
POLICY = selfmanaged.Policy(
    names=NAMES, leaf_lifetime=30 * DAY, ca_lifetime=90 * DAY, min_overlap=DAY
)
HOUR = datetime.timedelta(hours=1)


def fresh(now: datetime.datetime = T0, policy: selfmanaged.Policy = POLICY) -> certs.CertState:
    state = selfmanaged.carry_out(None, selfmanaged.Decision(issue=True), now=now, policy=policy)
    assert state is not None
    return state


def trusting(*cas: x509.Certificate) -> certs.ClusterTrust:
    return certs.ClusterTrust({"pods.podium.dev": tuple(cas)})


def step(
    state: certs.CertState,
    now: datetime.datetime,
    *,
    trust: certs.ClusterTrust | None = None,
    rotate: bool = False,
) -> certs.CertState:
    """One round with the webhook trusting the state's bundle (unless told otherwise)."""
    seen = trust if trust is not None else trusting(*state.bundle)
    decision = selfmanaged.decide(
        state, now=now, policy=POLICY, trust=seen, rotate_requested=rotate
    )
    after = selfmanaged.carry_out(state, decision, now=now, policy=POLICY)
    return state if after is None else after


def staged(now: datetime.datetime = T0) -> certs.CertState:
    """A CA rotation asked for: B staged beside A."""
    after = step(fresh(now), now + HOUR, rotate=True)
    assert after.next_ca is not None
    return after


def promoted(now: datetime.datetime = T0) -> certs.CertState:
    """B signs, A still trusted."""
    mid = staged(now)
    after = step(mid, now + 2 * HOUR)
    assert after.ca == mid.next_ca and len(after.bundle) == 2
    return after


# -- the table ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    state: certs.CertState | None
    now: datetime.datetime
    issue: bool = False
    actions: tuple[Action, ...] = ()
    rotate: bool = False
    reshape: bool = False
    asked: bool = False
    trust: str = "bundle"  # bundle | signer | none | unread


def cases() -> list[Case]:
    made = fresh()
    mid = staged()
    after = promoted()
    expired_ca = fresh(T0 - 100 * DAY)
    renamed = fresh(policy=dataclasses.replace(POLICY, names=("old.podium-system.svc",)))
    return [
        Case("nothing yet", None, T0, issue=True),
        Case("fresh", made, T0 + DAY),
        Case("leaf before 2/3", made, T0 + 19 * DAY),
        Case("leaf at 2/3", made, T0 + 21 * DAY, actions=(Action.RENEW_LEAF,)),
        Case("leaf expired", made, T0 + 31 * DAY, actions=(Action.RENEW_LEAF,)),
        Case("CA at 2/3", made, T0 + 61 * DAY, actions=(Action.STAGE_CA, Action.RENEW_LEAF)),
        Case("every CA expired", expired_ca, T0, issue=True),
        Case("rotation asked", made, T0 + DAY, rotate=True, asked=True),
        Case("staged, trusted", mid, T0 + 2 * HOUR, actions=(Action.PROMOTE_CA, Action.RENEW_LEAF)),
        Case("staged, not trusted yet", mid, T0 + 2 * HOUR, trust="signer"),
        Case("staged, webhook unread", mid, T0 + 2 * HOUR, trust="unread"),
        Case("staged, asked again", mid, T0 + 2 * HOUR, trust="signer", asked=True),
        Case("promoted, within overlap", after, T0 + 2 * HOUR + 23 * HOUR),
        Case("promoted, overlap over", after, T0 + 2 * HOUR + 25 * HOUR, actions=(Action.DROP_CA,)),
        Case("promoted, asked again", after, T0 + 3 * HOUR, asked=True),
        Case("other names", renamed, T0 + DAY, reshape=True),
    ]


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_the_leaders_decision(case: Case) -> None:
    trust = None
    if case.state is not None and case.trust != "unread":
        trust = {
            "bundle": trusting(*case.state.bundle),
            "signer": trusting(case.state.ca.cert),
            "none": trusting(),
        }[case.trust]
    decision = selfmanaged.decide(
        case.state, now=case.now, policy=POLICY, trust=trust, rotate_requested=case.asked
    )
    assert (decision.issue, decision.plan.actions, decision.rotate, decision.reshape) == (
        case.issue,
        case.actions,
        case.rotate,
        case.reshape,
    )
    assert decision.changes == bool(case.issue or case.actions or case.rotate or case.reshape)
    after = selfmanaged.carry_out(case.state, decision, now=case.now, policy=POLICY)
    assert (after is None) == (not decision.changes)
    if after is not None:
        assert selfmanaged.serves_validly(after, case.now)
        assert set(certs.san_strings(after.leaf.cert)) == {*NAMES}
        assert len(after.bundle) <= 2


def test_a_fresh_start_keeps_the_newest_cas_the_webhook_trusted() -> None:
    old = [certs.issue_ca(f"old-{n}", lifetime=90 * DAY, now=T0 + n * DAY).cert for n in range(3)]
    expired = certs.issue_ca("expired", lifetime=DAY, now=T0 - 10 * DAY).cert
    now = T0 + 5 * DAY
    state = selfmanaged.carry_out(
        None,
        selfmanaged.Decision(issue=True),
        now=now,
        policy=POLICY,
        trusted=[expired, old[2], old[0], old[1], old[2]],
    )
    assert state is not None
    assert state.bundle == (state.ca.cert, old[1], old[2])
    assert state.retired == (old[1], old[2])
    # ...until the overlap has passed, then the next round drops them.
    assert step(state, now + HOUR).bundle == state.bundle
    assert step(state, now + DAY + HOUR).bundle == (state.ca.cert,)


def test_a_rotation_runs_stage_promote_drop() -> None:
    start = fresh()
    mid = step(start, T0 + HOUR, rotate=True)
    assert mid.next_ca is not None
    assert mid.bundle == (start.ca.cert, mid.next_ca.cert)
    assert mid.leaf == start.leaf  # nothing the new CA signs is served before it is trusted
    after = step(mid, T0 + 2 * HOUR)
    assert after.ca == mid.next_ca and after.bundle == mid.bundle
    assert certs.is_signed_by(after.leaf.cert, after.ca.cert)
    done = step(after, T0 + 2 * HOUR + 25 * HOUR)
    assert done.bundle == (after.ca.cert,) and done.next_ca is None
    assert done.leaf == after.leaf


# -- the Secret -----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [fresh(), staged(), promoted()], ids=["one", "staged", "two"])
def test_the_secret_round_trips(state: certs.CertState) -> None:
    data = selfmanaged.secret_data(state)
    # (keys compare by identity: compared as the Secret spells them)
    assert selfmanaged.secret_data(selfmanaged.state_from_secret(data)) == data
    assert selfmanaged.serving_pair(data).cert == state.leaf.cert
    assert selfmanaged.bundle_of(data) == state.bundle
    assert (selfmanaged.NEXT_CRT in data) == (state.next_ca is not None)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: {}, "holds no certificate yet"),
        (lambda d: {k: v for k, v in d.items() if k != "tls.key"}, "has no tls.key"),
        (lambda d: {**d, "tls.crt": "not base64!"}, "tls.crt is not base64"),
        (lambda d: {**d, "tls.crt": b64(b"nothing")}, "tls.crt or tls.key"),
        (lambda d: {**d, "tls.key": d["signer.key"]}, "tls.key does not belong to its tls.crt"),
        (lambda d: {**d, "ca.crt": d["tls.crt"]}, "ca.crt does not hold its signer.crt"),
    ],
)
def test_a_secret_podium_cannot_use_says_why(change: object, problem: str) -> None:
    data = selfmanaged.secret_data(fresh())
    assert callable(change)
    with pytest.raises(certs.CertStateError, match=problem):
        selfmanaged.state_from_secret(change(data))


def test_a_rotation_asked_for_once() -> None:
    ask, done = selfmanaged.ROTATE_ANNOTATION, selfmanaged.ROTATED_ANNOTATION
    assert selfmanaged.rotation_requested({}) is None
    assert selfmanaged.rotation_requested({ask: "1"}) == "1"
    assert selfmanaged.rotation_requested({ask: "1", done: "1"}) is None
    assert selfmanaged.rotation_requested({ask: "2", done: "1"}) == "2"
    assert selfmanaged.rotation_requested({ask: ""}) is None


@pytest.mark.parametrize(
    "change",
    [
        {"names": ()},
        {"names": ("*.podium",)},
        {"leaf_lifetime": datetime.timedelta(0)},
        {"min_overlap": -HOUR},
    ],
)
def test_a_policy_podium_cannot_keep_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        dataclasses.replace(POLICY, **change)  # type: ignore[arg-type]


# -- a simulated cluster --------------------------------------------------------------------------


@st.composite
def worlds(
    draw: st.DrawFn,
) -> tuple[selfmanaged.Policy, datetime.timedelta, list[tuple[float, bool, bool]]]:
    """Lifetimes, a replica's lag behind the Secret (shorter than the overlap), and rounds: each
    a clock step, whether a rotation is asked, and whether the webhook configuration could not be
    read (never twice in a row).

    The leader's rounds are frequent next to the lifetimes (every few seconds against days; here
    at most a twentieth of the leaf's life) and a CA lives at least two leaves: a CA whose last
    third is shorter than two rounds, or a webhook configuration unreadable for a third of the
    CA's life, expires with nothing to take over (hypothesis found both)."""
    leaf_hours = draw(st.integers(min_value=2, max_value=24 * 90))
    leaf = datetime.timedelta(hours=leaf_hours)
    ca = leaf * draw(st.integers(min_value=2, max_value=12))
    overlap = leaf * draw(st.floats(min_value=0.01, max_value=0.1))
    lag = overlap * draw(st.floats(min_value=0.0, max_value=0.99))
    policy = dataclasses.replace(POLICY, leaf_lifetime=leaf, ca_lifetime=ca, min_overlap=overlap)
    rounds = draw(
        st.lists(
            st.tuples(st.floats(min_value=0.0, max_value=0.05), st.booleans(), st.booleans()),
            min_size=1,
            max_size=60,
        )
    )
    for at in range(1, len(rounds)):
        if rounds[at - 1][2]:
            rounds[at] = (*rounds[at][:2], False)
    return policy, lag, rounds


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_no_admission_fails_whatever_the_clock_and_lifetimes(
    world: tuple[selfmanaged.Policy, datetime.timedelta, list[tuple[float, bool, bool]]],
) -> None:
    """The leader runs a round after each clock step: decide, write the Secret, inject its bundle
    (or, when ``unread``, fail to read the webhook configuration). A replica serves what the
    Secret held ``lag`` ago. After the first issue, at every moment — between the Secret's
    write and the injection too — the webhook's bundle verifies what the replica serves, that
    certificate is valid, and the bundle holds at most two CAs."""
    policy, lag, rounds = world
    now = T0
    state = fresh(now, policy)
    webhook: tuple[x509.Certificate, ...] = state.bundle
    history: list[tuple[datetime.datetime, certs.KeyPair]] = [(now, state.leaf)]

    def served(at: datetime.datetime) -> certs.KeyPair:
        return [leaf for since, leaf in history if since <= at - lag or since == history[0][0]][-1]

    def check(at: datetime.datetime) -> None:
        leaf = served(at).cert
        assert any(certs.is_signed_by(leaf, ca) for ca in webhook), "the apiserver distrusts it"
        assert leaf.not_valid_before_utc <= at < leaf.not_valid_after_utc, "expired"
        assert len(webhook) <= 2

    for fraction, asked, unread in rounds:
        now += policy.leaf_lifetime * fraction
        check(now)
        trust = None if unread else trusting(*webhook)
        decision = selfmanaged.decide(
            state, now=now, policy=policy, trust=trust, rotate_requested=asked
        )
        assert not decision.issue, decision.reason
        after = selfmanaged.carry_out(state, decision, now=now, policy=policy)
        if after is not None:
            if after.leaf != state.leaf:
                history.append((now, after.leaf))
            state = after
            check(now)  # the Secret written, the webhook not injected yet
            assert selfmanaged.serves_validly(state, now)
        if not unread:
            webhook = state.bundle
            check(now)
