"""Validate objects against a CRD's openAPIV3Schema with `jsonschema`.

`strict=True` also refuses fields the schema does not declare (where Kubernetes would
prune them silently), so a field name the CRD does not know shows up as an error.
CEL rules (`x-kubernetes-validations`) are not evaluated.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@cache
def crd_schema(relpath: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((FIXTURES / relpath).read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(version)


def _closed(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def errors(obj: dict[str, Any], schema: dict[str, Any], *, strict: bool = False) -> list[str]:
    s = _closed(copy.deepcopy(schema)) if strict else schema
    validator = jsonschema.Draft202012Validator(s)
    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(obj)
    )


def unknown_fields(obj: dict[str, Any], schema: dict[str, Any]) -> set[str]:
    """Names the schema does not declare (what Kubernetes would prune), any depth."""
    s = _closed(copy.deepcopy(schema))
    names: set[str] = set()
    for e in jsonschema.Draft202012Validator(s).iter_errors(obj):
        if e.validator != "additionalProperties":
            raise AssertionError(f"not only unknown fields: {e.message}")
        declared = set(e.schema.get("properties", {}))
        names |= set(e.instance) - declared
    return names
