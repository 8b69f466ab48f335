"""Validators for the real schemas: the upstream CRDs in testbed/crds and the Kubernetes API.

CRD patterns are Go RE2 (e.g. ``^\\PC*$``), which Python's ``re`` does not know: the ``regex``
module does. Kubernetes prunes unknown fields silently, so the CRD validator is made strict
(``additionalProperties: false`` wherever a schema lists its properties and does not preserve
unknown fields): a field podium writes that the real schema would drop is a test failure.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import regex
import yaml
from jsonschema import Draft7Validator, ValidationError, validators

#: The upstream CRDs (testbed.paths.CRD_DIR; the unit tests read the files, not the test bed).
CRDS = Path(__file__).resolve().parents[1] / "testbed" / "crds"
K8S_VERSION = "1.37.0"


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not regex.search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_RE2Validator = validators.extend(Draft7Validator, {"pattern": _pattern})


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and out.get("type") == "object"
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        if out.get("nullable"):
            types = out.get("type")
            if isinstance(types, str):
                out["type"] = [types, "null"]
        if out.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def crd_validator(filename: str, version: str) -> Any:
    crd = yaml.safe_load((CRDS / filename).read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema = _strict(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
            # metadata is validated by the apiserver itself, not by the CRD schema
            schema["properties"]["metadata"] = {"type": "object"}
            return _RE2Validator(schema)
    raise LookupError(f"{filename} has no version {version}")


def crd_errors(filename: str, version: str, obj: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in crd_validator(filename, version).iter_errors(obj)
    ]


def cilium_policy_errors(obj: dict[str, Any]) -> list[str]:
    return crd_errors("cilium.io_ciliumnetworkpolicies.yaml", "v2", obj)


def kubernetes_errors(obj: dict[str, Any]) -> list[str]:
    """Validate a core object against the Kubernetes OpenAPI schema (strict: no unknown fields)."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        return [str(err.message)]
    return []
