"""The embedded state store: TrafficMaps, drain records and service generations as files
in one directory, so `gridroute trafficmap get` and `traffic drain` need no server.

    <store>/trafficmaps/<namespace>/<name>.yaml   one TrafficMap each (read-only to users)
    <store>/drains/<namespace>/<service>.json     the ome.io/traffic-drain record
    <store>/sources/<namespace>/<service>.json    uid and generation of the service's spec

Every write is atomic (`atomicfile`). Maps are rewritten by each reconcile pass, so a hand
edit lasts until the next one. With `mapStore: kubernetes` the maps are objects in a
cluster instead (`store_kubernetes.KubernetesMaps`, handed in as `maps`); drains and
sources stay here.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import ValidationError

from gridroute.control.atomicfile import remove, write_atomic
from gridroute.core.generation import next_generation
from gridroute.core.trafficmap import Drain
from gridroute.wire.drains import encode_drains, parse_drains
from gridroute.wire.trafficmap import TrafficMap


class StoreError(ValueError):
    """A stored file that cannot be read."""


class StoreUnavailable(StoreError):
    """The store could not be reached (a cluster's API): the next pass may succeed, and
    it is never a reason to rebuild a map as if none were stored."""


@dataclass(frozen=True, slots=True)
class Source:
    """The service a map is generated from: its uid and spec generation."""

    uid: str
    generation: int
    digest: str


class MapBackend(Protocol):
    """Where maps live when not in this directory (a cluster)."""

    def read_map(self, namespace: str, name: str) -> TrafficMap | None: ...
    def stored_generation(self, namespace: str, name: str) -> int | None: ...
    def write_map(self, tm: TrafficMap) -> None: ...
    def delete_map(self, namespace: str, name: str) -> None: ...
    def maps(self) -> list[TrafficMap]: ...


class Store:
    def __init__(self, root: Path, maps: MapBackend | None = None) -> None:
        self.root = root
        self.backend = maps

    # --- maps -------------------------------------------------------------------------

    def map_path(self, namespace: str, name: str) -> Path:
        return self.root / "trafficmaps" / namespace / f"{name}.yaml"

    def read_map(self, namespace: str, name: str) -> TrafficMap | None:
        if self.backend is not None:
            return self.backend.read_map(namespace, name)
        path = self.map_path(namespace, name)
        try:
            data = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, yaml.YAMLError) as exc:
            raise StoreError(f"{path}: {exc}") from None
        try:
            return TrafficMap.model_validate(data)
        except ValidationError as exc:
            raise StoreError(f"{path}: not a TrafficMap: {exc.errors()[0]['msg']}") from None

    def stored_generation(self, namespace: str, name: str) -> int | None:
        """The generation of whatever is stored, even a map a hand edit broke."""
        if self.backend is not None:
            return self.backend.stored_generation(namespace, name)
        try:
            data = yaml.safe_load(self.map_path(namespace, name).read_text())
            return int(data["metadata"]["generation"])
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
            return None

    def write_map(self, tm: TrafficMap) -> None:
        if self.backend is not None:
            self.backend.write_map(tm)
            return
        text = yaml.safe_dump(tm.wire(), sort_keys=False)
        write_atomic(self.map_path(tm.metadata.namespace, tm.metadata.name), text)

    def delete_map(self, namespace: str, name: str) -> None:
        if self.backend is not None:
            self.backend.delete_map(namespace, name)
        else:
            remove(self.map_path(namespace, name))
        remove(self.root / "sources" / namespace / f"{name}.json")

    def maps(self) -> list[TrafficMap]:
        """Every readable map, sorted by namespace and name (unreadable ones skipped)."""
        if self.backend is not None:
            return self.backend.maps()
        out = []
        for path in sorted((self.root / "trafficmaps").glob("*/*.yaml")):
            try:
                tm = self.read_map(path.parent.name, path.stem)
            except StoreError:
                continue
            if tm is not None:
                out.append(tm)
        return out

    # --- drains -----------------------------------------------------------------------

    def drain_path(self, namespace: str, service: str) -> Path:
        return self.root / "drains" / namespace / f"{service}.json"

    def read_drains(self, namespace: str, service: str) -> tuple[Drain, ...]:
        """The service's drains; a malformed record raises `DrainError`."""
        try:
            text = self.drain_path(namespace, service).read_text()
        except FileNotFoundError:
            return ()
        return parse_drains(text)

    def write_drains(self, namespace: str, service: str, drains: tuple[Drain, ...]) -> None:
        path = self.drain_path(namespace, service)
        if drains:
            write_atomic(path, encode_drains(drains))
        else:
            remove(path)

    # --- sources ----------------------------------------------------------------------

    def source(self, namespace: str, name: str, spec: dict[str, Any]) -> Source:
        """The service's uid and generation, bumping the generation when `spec` changed."""
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        path = self.root / "sources" / namespace / f"{name}.json"
        prior: dict[str, Any] | None = None
        try:
            prior = json.loads(path.read_text())
        except (OSError, ValueError):
            prior = None
        if prior is not None and prior.get("digest") == digest:
            return Source(prior["uid"], int(prior["generation"]), digest)
        generation = next_generation(
            None if prior is None else int(prior.get("generation", 0)), True
        )
        uid = prior["uid"] if prior is not None and "uid" in prior else str(uuid.uuid4())
        record = {"uid": uid, "generation": generation, "digest": digest}
        write_atomic(path, json.dumps(record, indent=2) + "\n")
        return Source(uid, generation, digest)
