"""Subject alternative names: parsing ``--san`` values, a Service's DNS names, reading them back."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from cryptography import x509

from webhook.certs.errors import InvalidSANError

DEFAULT_CLUSTER_DOMAIN = "cluster.local"

_HOSTNAME_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_MAX_HOSTNAME = 253


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
