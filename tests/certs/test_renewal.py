"""``webhook.certs.renewal``: when a certificate is due."""

from __future__ import annotations

import datetime

import pytest

from tests.certs.support import DAY, T0
from webhook import certs


class TestRenewalTiming:
    @pytest.mark.parametrize(
        ("after_issue", "due"),
        [
            (datetime.timedelta(0), False),
            (59 * DAY, False),
            # 2/3 of (90 days + the 5-minute backdating), counted from the backdated start
            (60 * DAY - datetime.timedelta(minutes=1, seconds=41), False),
            (60 * DAY - datetime.timedelta(minutes=1, seconds=40), True),
            (60 * DAY, True),
            (91 * DAY, True),
        ],
    )
    def test_due_at_two_thirds_of_the_lifetime(
        self, ca: certs.KeyPair, after_issue: datetime.timedelta, due: bool
    ) -> None:
        assert certs.needs_renewal(ca.cert, T0 + after_issue) is due

    def test_renewal_time(self, ca: certs.KeyPair) -> None:
        start = T0 - certs.CLOCK_SKEW
        assert certs.renewal_time(ca.cert) == start + (T0 + 90 * DAY - start) * 2 / 3
