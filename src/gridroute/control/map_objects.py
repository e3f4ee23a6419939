"""TrafficMaps as Kubernetes object files: what `kubectl get tm -o yaml` prints, what a
GitOps repository holds, what another controller (OME's routing controller) writes.

A path is a file or a directory (every `*.yaml`, `*.yml` and `*.json` under it, sorted).
A file holds one or more YAML documents; a document is a TrafficMap
(`apiVersion: ome.io/v1beta1`, `kind: TrafficMap`) or a `List` of items. In a directory,
documents of other kinds (the HTTPRoutes next to the maps, say) are left alone; a file
named on its own must hold at least one map.

Each map is validated with the wire model (unknown fields refused, each entry's cluster
once, as the CRD's list-map key asks); an error names the file, the document, the map
and the field:

    maps/chat.yaml: trafficmap[demo/chat].spec.entries[cluster-a].weight: Input should
    be greater than or equal to 0 (got -1)

`write_status` replaces one map's `.status` in its file, as the status subresource does:
the spec, metadata and every other document stay as they were (comments do not survive
the rewrite). The file is replaced atomically, and only when the status changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gridroute.config import ConfigError, Problem
from gridroute.control.atomicfile import write_atomic
from gridroute.wire.trafficmap import API_VERSION, KIND, Status, TrafficMap

SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class MapObject:
    """One TrafficMap read from a file, and where it sits there."""

    path: Path
    document: int
    item: int | None
    """Index inside a `List` document; None for a document that is the map itself."""
    map: TrafficMap

    @property
    def key(self) -> tuple[str, str]:
        return self.map.metadata.namespace, self.map.metadata.name


@dataclass(frozen=True, slots=True)
class Refused:
    """A map object that does not validate: the publisher keeps its last good state."""

    namespace: str
    name: str
    source: str
    """The file it was read from."""
    problems: tuple[Problem, ...]

    @property
    def message(self) -> str:
        return str(ConfigError(self.source, self.problems))


@dataclass(frozen=True, slots=True)
class Read:
    maps: tuple[MapObject, ...]
    refused: tuple[Refused, ...]


def _is_map(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def _identity(doc: dict[str, Any]) -> tuple[str, str]:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "?")


def _field(loc: tuple[int | str, ...], doc: Any) -> str:
    """A pydantic location with entry indexes replaced by the entry's cluster."""
    parts: list[str] = []
    node = doc
    for part in loc:
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            item = node[part]
            cluster = item.get("cluster") if isinstance(item, dict) else None
            parts[-1] = f"{parts[-1]}[{cluster or part}]"
            node = item
            continue
        parts.append(str(part))
        node = node.get(part) if isinstance(node, dict) else None
    return ".".join(parts) or "(top level)"


def _problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, reason) for everything wrong with one map document."""
    if doc.get("apiVersion") != API_VERSION:
        return [("apiVersion", f"must be {API_VERSION} (got {doc.get('apiVersion')!r})")]
    try:
        tm = TrafficMap.model_validate(doc)
    except ValidationError as exc:
        out = []
        for err in exc.errors():
            got = f" (got {str(repr(err['input']))[:80]})" if err["type"] != "missing" else ""
            out.append((_field(tuple(err["loc"]), doc), f"{err['msg']}{got}"))
        return out
    clusters = [e.cluster for e in tm.spec.entries]
    twice = sorted({c for c in clusters if clusters.count(c) > 1})
    if twice:
        return [("spec.entries", f"each cluster once (listed twice: {', '.join(twice)})")]
    return []


def _documents(path: Path) -> list[Any]:
    try:
        return list(yaml.safe_load_all(path.read_text()))
    except OSError as exc:
        raise ConfigError.one(str(path), "(file)", f"cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError.one(str(path), "(file)", f"not YAML: {exc}") from None


def files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
    return [path]


def read(paths: list[Path]) -> Read:
    """Every TrafficMap under `paths`; invalid ones refused one by one. A file that is
    not YAML, or a file named on its own that holds no map, is a `ConfigError`."""
    maps: list[MapObject] = []
    refused: list[Refused] = []
    seen: dict[tuple[str, str], str] = {}
    for root in paths:
        for path in files(root):
            found = 0
            for d, doc in enumerate(_documents(path)):
                items: list[tuple[int | None, Any]] = [(None, doc)]
                if isinstance(doc, dict) and doc.get("kind") == "List":
                    items = list(enumerate(doc.get("items") or []))
                for i, obj in items:
                    if not _is_map(obj):
                        continue
                    found += 1
                    ns, name = _identity(obj)
                    label = f"trafficmap[{ns}/{name}]"
                    problems = _problems(obj)
                    if not problems and (ns, name) in seen:
                        problems = [("metadata.name", f"the same map is in {seen[(ns, name)]}")]
                    if problems:
                        found_problems = tuple(Problem(f"{label}.{f}", r) for f, r in problems)
                        refused.append(Refused(ns, name, str(path), found_problems))
                        continue
                    seen[(ns, name)] = f"{path} documents[{d}]"
                    maps.append(MapObject(path, d, i, TrafficMap.model_validate(obj)))
            if not found and not root.is_dir():
                raise ConfigError.one(
                    str(path), "(top level)", f"no {KIND} object ({API_VERSION}) in the file"
                )
    return Read(tuple(maps), tuple(refused))


def check(paths: list[Path]) -> Read:
    """`read`, with every refused map an error too (what `gridroute config check` runs)."""
    result = read(paths)
    if result.refused:
        first = result.refused[0].source
        problems = [
            p if r.source == first else Problem(f"{r.source}: {p.field}", p.reason)
            for r in result.refused
            for p in r.problems
        ]
        raise ConfigError(first, problems)
    if not result.maps:
        raise ConfigError.one(str(paths[0]), "(top level)", f"no {KIND} object found")
    return result


def write_status(obj: MapObject, status: Status) -> bool:
    """Replace the map's `.status` in its file (nothing else); True when it changed."""
    docs = _documents(obj.path)
    doc = docs[obj.document]
    target = doc if obj.item is None else doc["items"][obj.item]
    wire = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not _is_map(target) or _identity(target) != obj.key:
        raise ValueError(f"{obj.path}: documents[{obj.document}] is no longer {obj.key}")
    if target.get("status") == wire:
        return False
    target["status"] = wire
    write_atomic(obj.path, yaml.safe_dump_all(docs, sort_keys=False))
    return True
