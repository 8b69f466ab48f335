"""The names of podium's record and policy: valid DNS subdomain names (at most 253 characters,
k8s.io/apimachinery ``pkg/util/validation/validation.go``, IsDNS1123Subdomain), readable, and
distinct for every gang."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from webhook.core import labels

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def test_an_object_name_reads_as_kind_job_and_a_short_hash_of_the_gang() -> None:
    name = labels.object_name("PyTorchJob", "llama", "uid-1")
    assert re.fullmatch(r"podium-pytorchjob-llama-[0-9a-f]{8}", name)


def test_a_new_job_reusing_a_name_gets_another_object_name() -> None:
    assert labels.object_name("PyTorchJob", "llama", "uid-1") != labels.object_name(
        "PyTorchJob", "llama", "uid-2"
    )


@given(
    kind=st.sampled_from(["PyTorchJob", "JobSet", "LeaderWorkerSet"]),
    name=st.from_regex(DNS_SUBDOMAIN, fullmatch=True).filter(lambda n: len(n) <= 253),
    key=st.text(min_size=1, max_size=70),
)
def test_any_job_name_gives_a_valid_object_name(kind: str, name: str, key: str) -> None:
    got = labels.object_name(kind, name, key)
    assert len(got) <= 253
    assert DNS_SUBDOMAIN.fullmatch(got), got
