"""deploy/kubernetes/trafficmaps-crd.yaml: a valid apiextensions v1 CRD (Kubernetes' own
schema), structural, a superset of OME's CRD, declaring every field gridroute writes
(nothing pruned), and printer columns that show what `gridroute trafficmap get` shows."""

from __future__ import annotations

import asyncio
import re
import typing
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml
from pydantic import BaseModel

from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.core.trafficmap import Drain
from gridroute.wire.trafficmap import Capacity, MapEntry, Probe, TrafficMap
from tests.control.controlfiles import Clock, seed, write
from tests.wire.crd_schema import FIXTURES, errors, unknown_fields

CRD_PATH = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "trafficmaps-crd.yaml"
CRD = yaml.safe_load(CRD_PATH.read_text())
(VERSION,) = CRD["spec"]["versions"]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
OME = yaml.safe_load((FIXTURES / "ome" / "trafficmaps-crd.yaml").read_text())
OME_SCHEMA = OME["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_it_is_a_valid_custom_resource_definition() -> None:
    kubernetes_validate.validate(CRD, "1.30.0", strict=True)
    names = CRD["spec"]["names"]
    assert CRD["metadata"]["name"] == f"{names['plural']}.{CRD['spec']['group']}"
    assert (CRD["spec"]["group"], VERSION["name"], names["kind"]) == (
        "ome.io", "v1beta1", "TrafficMap"
    )  # fmt: skip
    assert set(names["shortNames"]) == {"tm", "tmap"} and CRD["spec"]["scope"] == "Namespaced"
    assert VERSION["served"] and VERSION["storage"] and "status" in VERSION["subresources"]


def _nodes(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        out += _nodes(sub, f"{path}.{name}")
    if "items" in schema:
        out += _nodes(schema["items"], f"{path}[]")
    return out


def test_the_schema_is_structural_every_node_has_a_type() -> None:
    untyped = [
        p for p, node in _nodes(SCHEMA)
        if "type" not in node and not node.get("x-kubernetes-int-or-string")
    ]  # fmt: skip
    assert untyped == []


def test_it_declares_everything_omes_crd_declares_with_the_same_types() -> None:
    ours = dict(_nodes(SCHEMA))
    for path, node in _nodes(OME_SCHEMA):
        assert path in ours, path
        assert ours[path].get("type") == node.get("type"), path


def _model_paths(model: type[BaseModel], path: str = "") -> set[str]:
    """Every wire field path of a pydantic model (aliases; lists as [])."""
    out: set[str] = set()
    hints = typing.get_type_hints(model)
    for name, info in model.model_fields.items():
        wire = info.alias or name
        here = f"{path}.{wire}"
        out.add(here)
        stack = [hints[name]]
        while stack:
            t = stack.pop()
            args = typing.get_args(t)
            if typing.get_origin(t) is list:
                here_list = f"{here}[]"
                for a in args:
                    if isinstance(a, type) and issubclass(a, BaseModel):
                        out |= _model_paths(a, here_list)
                continue
            if isinstance(t, type) and issubclass(t, BaseModel) and name != "metadata":
                out |= _model_paths(t, here)
            stack.extend(a for a in args if a is not type(None))
    return out


def test_every_field_of_the_map_gridroute_writes_is_declared() -> None:
    declared = {p for p, _ in _nodes(SCHEMA)}
    missing = sorted(p for p in _model_paths(TrafficMap) if p not in declared)
    assert missing == []


def _maps(tmp_path: Path) -> TrafficMap:
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    asyncio.run(rec.run_once())
    Store(tmp_path / "state").write_drains(
        "llama-demo", "llama-chat", (Drain("maintenance-a", "cluster-a", "planned"),)
    )
    asyncio.run(rec.run_once())
    tm = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
    assert tm is not None
    return tm


def test_maps_the_control_loop_writes_validate_with_nothing_pruned(tmp_path: Path) -> None:
    tm = _maps(tmp_path)
    full = MapEntry(
        cluster="cluster-c",
        endpoint="http://c.example.com",
        weight=0,
        healthy=False,
        capacity=Capacity(allocated=2, factor="1500m", source="Endpoint", reported=0,
                          fallback_reason="report stale (observed 40s ago)"),
        probe=Probe(policy_digest="sha256:" + "0" * 64, result="Failing", gated=True,
                    consecutive_failures=3, last_probe_time="2026-12-02T00:00:00Z",
                    message="503 from /v1/models"),
        drain_refs=["maintenance-c"],
    )  # fmt: skip
    tm = tm.model_copy(update={"spec": tm.spec.model_copy(update={"entries": [
        *tm.spec.entries, full]})})  # fmt: skip
    obj = tm.wire()
    assert obj["status"]["publisher"] and obj["spec"]["entries"][0]["drainRefs"]
    assert errors(obj, SCHEMA) == []
    assert unknown_fields(obj, SCHEMA) == set()


def _jsonpath(obj: Any, path: str) -> Any:
    """The printer columns' JSONPath subset: `.a.b` and `.a[?(@.type=="X")].b`."""
    for step in re.findall(r'\.([A-Za-z]+)(?:\[\?\(@\.type=="([A-Za-z]+)"\)\])?', path):
        name, match = step
        obj = obj.get(name) if isinstance(obj, dict) else None
        if match:
            obj = next((c for c in obj or [] if c.get("type") == match), None)
    return obj


def test_printer_columns_show_what_trafficmap_get_shows(tmp_path: Path) -> None:
    from gridroute.control.mapview import row

    tm = _maps(tmp_path)
    shown = dict(zip(["NAME", "MODE", "PUBLISHED", "ROUTABLE", "OVERRIDE", "REASON"],
                     row(tm, 0.0), strict=False))  # fmt: skip
    columns = {c["name"].upper(): _jsonpath(tm.wire(), c["jsonPath"])
               for c in VERSION["additionalPrinterColumns"]}  # fmt: skip
    assert columns.pop("AGE") == tm.metadata.creation_timestamp
    assert columns == {k: v for k, v in shown.items() if k != "NAME"}
    assert columns["OVERRIDE"] == "True"  # the drain: a column that can differ
