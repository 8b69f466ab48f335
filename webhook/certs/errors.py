"""What goes wrong with certificates, keys, state directories and the cluster: one tree."""

from __future__ import annotations


class CertError(Exception):
    """A certificate, key or state directory that podium cannot use."""


class InvalidSANError(CertError, ValueError):
    """A subject alternative name that is neither an IP address nor a valid DNS name."""


class CertStateError(CertError):
    """A state directory that is missing files or whose files contradict each other."""


class ClusterReadError(CertError):
    """The cluster could not be read (unreachable, forbidden, not found); one line."""
