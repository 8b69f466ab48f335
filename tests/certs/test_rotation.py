"""``webhook.certs.rotation``: the steps, their gates, and a rotation run every minute."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from hypothesis import given
from hypothesis import strategies as st

from tests.certs.support import DAY, HOOK, T0, A, common_name, files, mode, staged, step, trust
from webhook import certs


class TestRotation:
    def test_the_ca_rotation_sequence_step_by_step(self, state_dir: Path) -> None:
        a = certs.load_state(state_dir).ca.cert

        # Nothing is due a day in.
        r = step(state_dir, DAY)
        assert r.actions == ()

        # The leaf reaches 2/3 of its 30 days: renewed, still by A.
        r = step(state_dir, 21 * DAY)
        assert r.actions == (A.RENEW_LEAF,)
        assert r.state.bundle == (a,)
        assert certs.is_signed_by(r.state.leaf.cert, a)
        assert certs.needs_renewal(r.state.leaf.cert, T0 + 21 * DAY) is False

        # A reaches 2/3 of its 90 days: B is staged in the bundle, but A still signs.
        r = step(state_dir, 61 * DAY)
        assert r.actions == (A.STAGE_CA, A.RENEW_LEAF)
        assert r.state.next_ca is not None
        b = r.state.next_ca.cert
        assert r.state.ca.cert == a
        assert r.state.bundle == (a, b)
        assert certs.is_signed_by(r.state.leaf.cert, a)
        assert files(state_dir) == [
            "ca-bundle.pem",
            "ca-key.pem",
            "ca-next-key.pem",
            "ca-next.pem",
            "ca.pem",
            "tls.crt",
            "tls.key",
        ]
        assert mode(state_dir / "ca-next-key.pem") == 0o600
        assert common_name(b) == f"podium-ca@{int((T0 + 61 * DAY).timestamp())}"

        # The next step, even at the same moment: B has been trusted for a step, so it signs.
        r = step(state_dir, 61 * DAY)
        assert r.actions == (A.PROMOTE_CA, A.RENEW_LEAF)
        assert r.state.ca.cert == b
        assert r.state.next_ca is None
        assert r.state.bundle == (a, b)
        assert certs.is_signed_by(r.state.leaf.cert, b)
        assert "ca-next.pem" not in files(state_dir)
        assert certs.san_strings(r.state.leaf.cert)[-1] == "127.0.0.1"

        # A signed nothing that is served any more: dropped.
        r = step(state_dir, 62 * DAY)
        assert r.actions == (A.DROP_CA,)
        assert r.state.bundle == (b,)
        assert certs.is_signed_by(r.state.leaf.cert, b)

        r = step(state_dir, 63 * DAY)
        assert r.actions == ()

    def test_planning_is_pure(self, state_dir: Path) -> None:
        state = certs.load_state(state_dir)
        now = T0 + 61 * DAY
        assert certs.plan_rotation(state, now=now) == certs.plan_rotation(state, now=now)
        assert certs.load_state(state_dir).leaf.cert == state.leaf.cert

    def test_min_overlap_holds_a_promotion_back_offline(self, state_dir: Path) -> None:
        step(state_dir, 61 * DAY)
        held = step(state_dir, 61 * DAY + datetime.timedelta(hours=1), min_overlap=2 * DAY)
        assert held.actions == ()
        assert held.state.next_ca is not None
        promoted = step(state_dir, 63 * DAY + datetime.timedelta(minutes=1), min_overlap=2 * DAY)
        assert promoted.actions == (A.PROMOTE_CA, A.RENEW_LEAF)

    def test_a_staging_that_stopped_before_the_bundle_is_finished(self, state_dir: Path) -> None:
        bundle_before = (state_dir / "ca-bundle.pem").read_bytes()
        staged = step(state_dir, 61 * DAY)
        assert staged.state.next_ca is not None
        (state_dir / "ca-bundle.pem").write_bytes(bundle_before)  # as if we stopped right there

        r = step(state_dir, 61 * DAY)
        assert r.actions == (A.STAGE_CA,)
        assert r.state.next_ca is not None
        assert r.state.next_ca.cert == staged.state.next_ca.cert  # the same CA, not another one
        assert r.state.bundle == (staged.state.ca.cert, staged.state.next_ca.cert)

    def test_a_promotion_that_stopped_between_the_ca_files_is_finished(
        self, state_dir: Path
    ) -> None:
        staged = step(state_dir, 61 * DAY)
        assert staged.state.next_ca is not None
        (state_dir / "ca-key.pem").write_bytes(staged.state.next_ca.key_pem())

        healed = certs.load_state(state_dir)
        assert healed.ca.cert == staged.state.next_ca.cert
        assert healed.ca.matches
        assert (state_dir / "ca.pem").read_bytes() == staged.state.next_ca.cert_pem()

        r = step(state_dir, 61 * DAY)
        assert r.state.ca.cert == staged.state.next_ca.cert
        assert r.state.next_ca is None
        assert certs.is_signed_by(r.state.leaf.cert, r.state.ca.cert)

    def test_a_leaf_whose_key_was_lost_is_renewed(self, state_dir: Path) -> None:
        (state_dir / "tls.key").write_bytes(certs.issue_ca("x").key_pem())
        r = step(state_dir, DAY)
        assert r.actions == (A.RENEW_LEAF,)
        assert r.state.leaf.matches

    def test_a_retired_ca_stays_while_it_signs_the_served_leaf(self, state_dir: Path) -> None:
        state = certs.load_state(state_dir)
        newer = certs.issue_ca("newer", lifetime=90 * DAY, now=T0)
        # Someone put a new CA in place by hand; the leaf is still the old CA's.
        moved = certs.CertState(ca=newer, bundle=(state.ca.cert, newer.cert), leaf=state.leaf)
        actions = certs.plan_rotation(moved, now=T0 + DAY).actions
        assert actions == (A.RENEW_LEAF,)
        renewed = certs.apply_rotation(moved, actions, now=T0 + DAY)
        assert certs.plan_rotation(renewed, now=T0 + 2 * DAY).actions == (A.DROP_CA,)

    def test_rotate_needs_an_issued_directory(self, tmp_path: Path) -> None:
        with pytest.raises(certs.CertStateError, match="issue"):
            certs.rotate(tmp_path)

    @given(
        gaps=st.lists(st.integers(min_value=1, max_value=9 * 24), min_size=20, max_size=60),
    )
    def test_trust_always_runs_a_step_ahead_of_serving(self, gaps: list[int]) -> None:
        """Over many CA lifetimes, with steps at least every 9 days (a third of the leaf's life):

        * the leaf served after a step is signed by a CA the bundle held *before* the step
          (the apiserver learnt about it a step earlier);
        * the bundle after a step still trusts the leaf served *before* it (a replica that has
          not reloaded yet is still trusted);
        * CA and leaf are valid, and at most two CAs are trusted at once.
        """
        ca = certs.issue_ca("podium-ca", lifetime=90 * DAY, now=T0)
        leaf = certs.issue_serving(ca, service="s", namespace="n", lifetime=30 * DAY, now=T0)
        state = certs.CertState(ca=ca, bundle=(ca.cert,), leaf=leaf)
        now = T0
        for hours in gaps:
            now += datetime.timedelta(hours=hours)
            actions = certs.plan_rotation(state, now=now).actions
            new = certs.apply_rotation(
                state, actions, now=now, leaf_lifetime=30 * DAY, ca_lifetime=90 * DAY
            )
            assert any(certs.is_signed_by(new.leaf.cert, c) for c in state.bundle)
            assert any(certs.is_signed_by(state.leaf.cert, c) for c in new.bundle)
            assert new.leaf.cert.not_valid_before_utc <= now < new.leaf.cert.not_valid_after_utc
            assert now < new.ca.cert.not_valid_after_utc
            assert new.ca.cert in new.bundle
            assert len(new.bundle) <= 2
            state = new


class TestGates:
    def test_promotion_waits_for_the_apiserver_to_hold_the_staged_ca(self, state_dir: Path) -> None:
        state = staged(state_dir)
        assert state.next_ca is not None
        a, b = state.ca.cert, state.next_ca.cert
        # Not injected: however long we wait, nothing is promoted, and it says what to do.
        plan = certs.plan_rotation(state, now=T0 + 80 * DAY, cluster=trust(a))
        assert plan.actions == ()
        (hold,) = plan.held
        assert (hold.action, hold.waiting) == (A.PROMOTE_CA, False)
        assert "podium certs inject" in hold.reason
        # Injected: promoted on the next run, no overlap needed.
        plan = certs.plan_rotation(state, now=T0 + 61 * DAY, cluster=trust(a, b))
        assert plan.actions == (A.PROMOTE_CA, A.RENEW_LEAF)
        assert plan.held == () and plan.warnings == ()

    def test_offline_promotion_waits_for_the_overlap(self, state_dir: Path) -> None:
        state = staged(state_dir)
        early = certs.plan_rotation(state, now=T0 + 61 * DAY + datetime.timedelta(hours=23))
        assert early.actions == ()
        assert [(h.action, h.waiting) for h in early.held] == [(A.PROMOTE_CA, True)]
        assert "24 h" in early.held[0].reason
        late = certs.plan_rotation(state, now=T0 + 62 * DAY + datetime.timedelta(minutes=6))
        assert late.actions == (A.PROMOTE_CA, A.RENEW_LEAF)

    def test_the_old_ca_goes_once_the_new_leaf_was_served_for_the_overlap(
        self, state_dir: Path
    ) -> None:
        old_leaf = staged(state_dir).leaf.cert  # still A's
        promoted = step(state_dir, 61 * DAY).state  # promoted at once (no overlap: mechanics)
        a, b = promoted.bundle
        assert certs.is_signed_by(promoted.leaf.cert, b)
        at = T0 + 61 * DAY
        # An hour later: the leaf of B has not been out long enough.
        plan = certs.plan_rotation(promoted, now=at + datetime.timedelta(hours=1))
        assert plan.actions == () and [h.waiting for h in plan.held] == [True]
        # A day later, but the Secret still holds A's leaf: apply it first.
        day_later = at + DAY + datetime.timedelta(minutes=6)
        plan = certs.plan_rotation(promoted, now=day_later, cluster=trust(a, b, secret=old_leaf))
        assert plan.actions == ()
        assert [(h.action, h.waiting) for h in plan.held] == [(A.DROP_CA, False)]
        assert "podium certs secret" in plan.held[0].reason
        plan = certs.plan_rotation(
            promoted, now=day_later, cluster=trust(a, b, secret=promoted.leaf.cert)
        )
        assert plan.actions == (A.DROP_CA,)

    def test_force_takes_a_held_step_and_says_what_it_risks(self, state_dir: Path) -> None:
        state = staged(state_dir)
        plan = certs.plan_rotation(
            state, now=T0 + 61 * DAY, cluster=trust(state.ca.cert), force=True
        )
        assert plan.actions == (A.PROMOTE_CA, A.RENEW_LEAF)
        (warning,) = plan.warnings
        assert warning.startswith("--force: promote-ca although")
        assert "admitted unpinned" in warning

    def test_a_cluster_that_does_not_trust_the_served_leaf_is_reported(
        self, state_dir: Path
    ) -> None:
        state = certs.load_state(state_dir)
        stranger = certs.issue_ca("someone-else", now=T0).cert
        plan = certs.plan_rotation(state, now=T0 + DAY, cluster=trust(stranger))
        assert any("cannot verify podium now" in w for w in plan.warnings)


class Cluster:
    """What a rotate-every-minute cron job acts on: the apiserver's caBundle, the Secret, and the
    replicas serving what the kubelet mounted a little later. ``injects`` decides, per minute,
    whether this run's ``podium certs inject`` got through."""

    #: Minutes between `kubectl apply` of the Secret and every replica serving its new pair
    #: (kubelet sync period plus the reloader's interval).
    MOUNT_DELAY = 2

    def __init__(self, state: certs.CertState) -> None:
        self.bundle = state.bundle
        self.secret = state.leaf.cert
        self.mounted: list[tuple[int, x509.Certificate]] = []
        self.served = state.leaf.cert

    def trust(self) -> certs.ClusterTrust:
        return certs.ClusterTrust({HOOK: self.bundle}, self.secret)

    def apply_secret(self, leaf: x509.Certificate, minute: int) -> None:
        if leaf != self.secret:
            self.secret = leaf
            self.mounted.append((minute + self.MOUNT_DELAY, leaf))

    def tick(self, minute: int) -> None:
        while self.mounted and self.mounted[0][0] <= minute:
            self.served = self.mounted.pop(0)[1]

    def verifies_what_is_served(self, now: datetime.datetime) -> bool:
        """The apiserver's caBundle holds a CA, valid now, that signed the served leaf, itself
        valid now."""
        return now < self.served.not_valid_after_utc and any(
            certs.is_signed_by(self.served, ca) and now < ca.not_valid_after_utc
            for ca in self.bundle
        )


@dataclasses.dataclass
class Run:
    taken: list[str] = dataclasses.field(default_factory=list)
    #: (minute, actions of that minute's run) whenever the apiserver could not verify podium.
    broken: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    #: Minutes whose run exited 1: a step waits for something to be done.
    alerted: list[int] = dataclasses.field(default_factory=list)

    def kinds(self) -> list[str]:
        return [t.split(":")[1] for t in self.taken if not t.endswith("renew-leaf")]


def run_every_minute(
    days: int,
    *,
    injects: Any,
    online: bool,
    min_overlap: datetime.timedelta = certs.DEFAULT_MIN_OVERLAP,
) -> Run:
    """``rotate`` then ``secret | kubectl apply`` then ``inject`` every simulated minute for
    ``days``, and what happened."""
    ca_lifetime, leaf_lifetime = 9 * DAY, 3 * DAY
    ca = certs.issue_ca("podium-ca", lifetime=ca_lifetime, now=T0)
    leaf = certs.issue_serving(ca, service="s", namespace="n", lifetime=leaf_lifetime, now=T0)
    state = certs.CertState(ca=ca, bundle=(ca.cert,), leaf=leaf)
    cluster = Cluster(state)
    run = Run()
    for minute in range(days * 24 * 60):
        now = T0 + datetime.timedelta(minutes=minute)
        rotation = certs.rotate_state(
            state,
            now=now,
            leaf_lifetime=leaf_lifetime,
            ca_lifetime=ca_lifetime,
            min_overlap=min_overlap,
            cluster=cluster.trust() if online else None,
        )
        state = rotation.state
        run.taken += [f"{minute}:{a}" for a in rotation.actions]
        if any(not hold.waiting for hold in rotation.held):
            run.alerted.append(minute)
        cluster.apply_secret(state.leaf.cert, minute)
        if injects(minute):
            cluster.bundle = state.bundle
        cluster.tick(minute)
        if not cluster.verifies_what_is_served(now):
            run.broken.append((minute, ", ".join(str(a) for a in rotation.actions) or "-"))
    return run


class TestRotateEveryMinute:
    """The cron job the issue describes, on a simulated clock: 9-day CAs, 3-day leaves, the
    default 24 h overlap, 20 days (three CA hand-overs), one run a minute."""

    DAYS = 20

    def test_the_apiserver_never_loses_trust_when_injects_fail_for_hours(self) -> None:
        # Every inject fails except in the first five minutes of each 6-hour window.
        run = run_every_minute(self.DAYS, injects=lambda minute: minute % 360 < 5, online=True)
        assert run.broken == []
        assert run.kinds() == ["stage-ca", "promote-ca", "drop-ca"] * 3
        # The runs between a staging and the inject that got through said so (exit 1).
        stagings = [int(t.split(":")[0]) for t in run.taken if t.endswith("stage-ca")]
        assert run.alerted
        assert all(any(s < m <= s + 360 for s in stagings) for m in run.alerted)

    def test_a_missed_inject_holds_the_promotion_and_alerts_every_run(self) -> None:
        run = run_every_minute(6, injects=lambda minute: minute == 0, online=True)
        assert run.broken == []
        assert run.kinds() == ["stage-ca"]
        staged_at = int(next(t for t in run.taken if t.endswith("stage-ca")).split(":")[0])
        assert run.alerted == list(range(staged_at + 1, 6 * 24 * 60))

    def test_offline_the_overlap_covers_an_inject_hours_late(self) -> None:
        run = run_every_minute(
            self.DAYS, injects=lambda minute: minute % (12 * 60) == 0, online=False
        )
        assert run.broken == []
        assert run.kinds() == ["stage-ca", "promote-ca", "drop-ca"] * 3

    def test_the_old_default_broke_trust_within_minutes(self) -> None:
        """The check above can fail: without the gates (no overlap, the cluster not read) the
        same loop staged, promoted and dropped within minutes, before the Secret was mounted
        or the new CA injected."""
        run = run_every_minute(
            self.DAYS,
            injects=lambda minute: minute % 360 < 5,
            online=False,
            min_overlap=datetime.timedelta(0),
        )
        stage, promote, drop = [
            int(t.split(":")[0]) for t in run.taken if not t.endswith("renew-leaf")
        ][:3]
        assert (promote - stage, drop - stage) == (1, 2)
        assert run.broken[0] == (drop, "drop-ca")
