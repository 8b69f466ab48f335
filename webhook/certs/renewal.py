"""Renewal timing (2/3 of the lifetime, cert-manager's rule) and a certificate's summary."""

from __future__ import annotations

import dataclasses
import datetime

from cryptography import x509

from webhook.certs import issuing
from webhook.certs.names import san_strings

#: The fraction of its lifetime after which a certificate is renewed.
RENEW_AT = 2 / 3


def renewal_time(cert: x509.Certificate) -> datetime.datetime:
    """When 2/3 of the certificate's lifetime will have passed."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * RENEW_AT


def needs_renewal(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return issuing.check_time(now) >= renewal_time(cert)


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
