"""What a failed call to the Kubernetes API raises: one tree, and one mapping from a status.

Exception tree::

    ApiError            any failed call: an unexpected status, no connection, a timeout, an
    │                   answer that is not JSON (``status`` is the HTTP code when there was one)
    ├── NotFound        404: the object is not there, or its resource type is not (a missing CRD)
    ├── AlreadyExists   409 on create: someone else created the object first
    ├── Conflict        409 on a guarded write (replace, patch, delete with preconditions): the
    │                   resourceVersion or uid moved on since the read; read again
    └── Gone            410: a list or watch from a resourceVersion the apiserver has compacted
                        away; list again

Every call of the client (``client``) and of its in-memory twins (``twins``) raises these and
nothing else, and every one of them maps a status through ``error_for``. The apiserver sends
409 for two reasons (``AlreadyExists`` and ``Conflict`` in apimachinery's ``StatusReason``); which
one a 409 means depends on the request, so the caller says whether its write was guarded.
"""

from __future__ import annotations

from typing import ClassVar


class ApiError(Exception):
    #: The status an error of this class carries when none is given.
    default_status: ClassVar[int | None] = None

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status if status is not None else self.default_status


class NotFound(ApiError):
    default_status = 404


class AlreadyExists(ApiError):
    default_status = 409


class Conflict(ApiError):
    default_status = 409


class Gone(ApiError):
    default_status = 410


def error_for(status: int | None, message: str, *, guarded: bool = False) -> ApiError:
    """The exception for a failed call's HTTP status (or a watch ``ERROR`` event's ``code``);
    ``guarded``: the request carried a resourceVersion or preconditions, so 409 is ``Conflict``."""
    if status == 404:
        return NotFound(message, status=404)
    if status == 409:
        return Conflict(message, status=409) if guarded else AlreadyExists(message, status=409)
    if status == 410:
        return Gone(message, status=410)
    return ApiError(message, status=status)
