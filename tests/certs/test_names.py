"""``webhook.certs.names``: subject alternative names."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from hypothesis import given
from hypothesis import strategies as st

from webhook import certs


class TestParseSAN:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("127.0.0.1", x509.IPAddress(ipaddress.ip_address("127.0.0.1"))),
            ("::1", x509.IPAddress(ipaddress.ip_address("::1"))),
            ("localhost", x509.DNSName("localhost")),
            ("Podium.Podium-System.SVC", x509.DNSName("podium.podium-system.svc")),
            ("a-1.b2", x509.DNSName("a-1.b2")),
            ("1a.example", x509.DNSName("1a.example")),
        ],
    )
    def test_accepts(self, text: str, expected: x509.GeneralName) -> None:
        assert certs.parse_san(text) == expected

    @pytest.mark.parametrize(
        "text",
        [
            "",
            " ",
            "localhost ",
            "*.example.com",
            "example.com.",
            "-a.example",
            "a-.example",
            "a..b",
            "under_score",
            "1.2.3",
            "256.1.1.1",
            "fe80::1%eth0",
            "a" * 64,
            ".".join(["a" * 63] * 4) + ".com",
            "ünïcode",
        ],
    )
    def test_refuses(self, text: str) -> None:
        with pytest.raises(certs.InvalidSANError):
            certs.parse_san(text)

    def test_several_comma_separated_values_collapse_duplicates(self) -> None:
        assert certs.parse_sans(["a,b", "a", "127.0.0.1,", "B"]) == (
            x509.DNSName("a"),
            x509.DNSName("b"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        )

    @given(st.ip_addresses())
    def test_any_ip_address_round_trips(
        self, address: ipaddress.IPv4Address | ipaddress.IPv6Address
    ) -> None:
        assert certs.parse_san(str(address)) == x509.IPAddress(address)

    @given(
        st.lists(
            st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
            min_size=1,
            max_size=5,
        ).filter(lambda labels: not labels[-1].isdigit())
    )
    def test_any_host_name_round_trips(self, labels: list[str]) -> None:
        name = ".".join(labels)
        assert certs.parse_san(name.upper()) == x509.DNSName(name)

    @given(st.text(max_size=80))
    def test_any_text_is_a_valid_name_or_a_clean_refusal(self, text: str) -> None:
        try:
            name = certs.parse_san(text)
        except certs.InvalidSANError:
            return
        if isinstance(name, x509.DNSName):
            assert name.value == text.lower()
            assert name.value.isascii()
            assert len(name.value) <= 253
            assert all(0 < len(label) <= 63 for label in name.value.split("."))
        else:
            assert isinstance(name, x509.IPAddress)
            assert name.value == ipaddress.ip_address(text)

    @given(st.lists(st.text(alphabet="ab1.,-", max_size=12), max_size=6))
    def test_cli_lists_parse_or_refuse_cleanly_and_without_duplicates(
        self, values: list[str]
    ) -> None:
        try:
            names = certs.parse_sans(values)
        except certs.InvalidSANError:
            return
        assert len(set(names)) == len(names)
