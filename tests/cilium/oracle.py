"""Drive the verdict oracle: Cilium's own policy engine, built by `testbed.build` (see
docs/cilium.md).

``build_oracle("oracle")`` builds (or finds cached) the binary for the current Cilium line,
``build_oracle("oracle115")`` the one for Cilium v1.15; ``Oracle(binary).run(policies, pods,
flows)`` feeds it one JSON document and returns its verdicts::

    oracle = Oracle(build_oracle("oracle"))
    result = oracle.run([cnp], [Pod("a", "team-a", {"app": "x"}), ...], [Flow("a", "b", "TCP", 80)])
    result.verdict(Flow("a", "b", "TCP", 80)).allowed
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

Proto = Literal["TCP", "UDP", "SCTP"]


class OracleError(RuntimeError):
    """The oracle refused its input (a policy it cannot parse, an unknown field, ...)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Pod:
    """A pod as Cilium sees it: its labels, its namespace and the namespace's labels."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    namespace_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    service_account: str = "default"

    def as_input(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "labels": dict(self.labels),
            "namespaceLabels": dict(self.namespace_labels),
            "serviceAccount": self.service_account,
        }


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Flow:
    src: str
    dst: str
    proto: Proto
    port: int

    def as_input(self) -> dict[str, Any]:
        return {"from": self.src, "to": self.dst, "proto": self.proto, "port": self.port}

    def __str__(self) -> str:
        return f"{self.src}→{self.dst} {self.proto}/{self.port}"


@dataclasses.dataclass(frozen=True, slots=True)
class Direction:
    #: ``allowed`` or ``denied``
    verdict: str
    #: ``default-allow`` (direction not enforced), ``allow-rule``, ``default-deny``, ``deny-rule``
    by: str
    #: The policies behind the deciding entry, as ``Kind/namespace/name``.
    rules: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    flow: Flow
    #: ``allowed`` or ``denied``
    verdict: str
    #: ``allowed``, ``default-deny`` or ``deny-rule`` (an explicit deny matched in some direction)
    by: str
    egress: Direction
    ingress: Direction

    @property
    def allowed(self) -> bool:
        return self.verdict == "allowed"

    @property
    def outcome(self) -> str:
        """``allow``, ``deny`` (default deny) or ``DENY`` (an explicit deny rule)."""
        return {"allowed": "allow", "default-deny": "deny", "deny-rule": "DENY"}[self.by]


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    #: The github.com/cilium/cilium version the oracle was built with.
    cilium: str
    #: Pod name → (numeric identity, identity-relevant labels).
    identities: Mapping[str, tuple[int, tuple[str, ...]]]
    #: Fields dropped in prune mode, as ``Kind ns/name: unknown field "path"``.
    pruned: tuple[str, ...]
    verdicts: tuple[Verdict, ...]

    def verdict(self, flow: Flow) -> Verdict:
        return next(v for v in self.verdicts if v.flow == flow)

    def by_flow(self) -> dict[Flow, Verdict]:
        return {v.flow: v for v in self.verdicts}

    def identity_labels(self, pod: str) -> tuple[str, ...]:
        return self.identities[pod][1]


def _direction(doc: Mapping[str, Any]) -> Direction:
    return Direction(doc["verdict"], doc["by"], tuple(doc["rules"]))


class Oracle:
    def __init__(self, binary: Path) -> None:
        self.binary = binary

    def run(
        self,
        policies: Iterable[Mapping[str, Any]],
        pods: Iterable[Pod],
        flows: Iterable[Flow],
        *,
        label_prefixes: Sequence[str] | None = None,
        unknown_fields: Literal["error", "prune"] = "error",
    ) -> Result:
        """Verdicts of ``flows`` under ``policies``. ``label_prefixes`` is cilium-config's
        ``labels`` (split on whitespace); None keeps Cilium's default label filter.
        ``unknown_fields="prune"`` drops fields the Cilium version does not know and reports them,
        as a structural CRD schema would; the default refuses them."""
        flows = list(flows)
        doc: dict[str, Any] = {
            "policies": list(policies),
            "identities": [p.as_input() for p in pods],
            "flows": [f.as_input() for f in flows],
            "unknownFields": unknown_fields,
        }
        if label_prefixes is not None:
            doc["labelPrefixes"] = list(label_prefixes)
        proc = subprocess.run(
            [str(self.binary)],
            input=json.dumps(doc),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if proc.returncode != 0:
            raise OracleError(proc.stderr.strip() or f"oracle exited {proc.returncode}")
        out = json.loads(proc.stdout)
        verdicts = tuple(
            Verdict(
                flow=flow,
                verdict=v["verdict"],
                by=v["by"],
                egress=_direction(v["egress"]),
                ingress=_direction(v["ingress"]),
            )
            for flow, v in zip(flows, out["verdicts"], strict=True)
        )
        return Result(
            cilium=out["cilium"],
            identities={i["name"]: (i["id"], tuple(i["labels"])) for i in out["identities"]},
            pruned=tuple(out["pruned"]),
            verdicts=verdicts,
        )
