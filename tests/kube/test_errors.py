"""One error tree and one status mapping (webhook/kube/errors.py).

The statuses are apimachinery's StatusReasons (k8s.io/apimachinery pkg/apis/meta/v1/types.go):
NotFound 404; AlreadyExists and Conflict both 409; Gone and Expired both 410."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.kube import errors


@pytest.mark.parametrize(
    ("status", "guarded", "error"),
    [
        (404, False, errors.NotFound),
        (404, True, errors.NotFound),
        (409, False, errors.AlreadyExists),
        (409, True, errors.Conflict),
        (410, False, errors.Gone),
        (403, False, errors.ApiError),
        (500, True, errors.ApiError),
        (None, False, errors.ApiError),
    ],
)
def test_a_status_maps_to_one_error(
    status: int | None, guarded: bool, error: type[errors.ApiError]
) -> None:
    got = errors.error_for(status, "said no", guarded=guarded)
    assert type(got) is error and got.status == status and str(got) == "said no"


@given(status=st.none() | st.integers(0, 999), guarded=st.booleans())
def test_every_status_maps_into_the_tree_keeping_the_status(
    status: int | None, guarded: bool
) -> None:
    got = errors.error_for(status, "x", guarded=guarded)
    assert isinstance(got, errors.ApiError) and got.status == status


def test_every_error_is_an_api_error_and_carries_its_status_by_default() -> None:
    for error, status in [
        (errors.NotFound, 404),
        (errors.AlreadyExists, 409),
        (errors.Conflict, 409),
        (errors.Gone, 410),
    ]:
        assert issubclass(error, errors.ApiError)
        assert error("x").status == status
    assert errors.ApiError("x").status is None
    assert errors.ApiError("x", status=503).status == 503
