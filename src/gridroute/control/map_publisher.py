"""The publisher on its own: TrafficMaps that someone else writes (OME's routing
controller, a GitOps repository, `kubectl get tm -o yaml > maps/`) read from object
files, published through control.yaml's publishers, their status written back.

    gridroute trafficmap publish maps/ --config publish.yaml [--once]

One pass:

1. read every map under the paths (`map_objects.read`); a map that does not validate is
   refused on its own: its last good copy in the store says Published False with reason
   InvalidOwner, and its route is left as published;
2. publish each valid map (HTTPRoute to the directory or Kubernetes, overlay weights)
   exactly as the reconcile loop publishes its own: the map's `metadata.generation` is
   the writer's, and `status.observedTrafficMapGeneration` moves to it on success;
3. write the publisher's status (Published, PublicationFallback, `published`,
   `gatewayRef`, `publisher`, `observedTrafficMapGeneration`) into the map's file,
   leaving its spec and every other condition to their writer; keep a copy in the store,
   so `gridroute trafficmap get` and `describe` show it;
4. a map that left the files is finalized: its route is removed, then its copy.

The spec is never changed here: the weights are the writer's. control.yaml's `services`
must be empty (the reconcile loop publishes those; one store, one owner). A map's
global hostname is its `ome.io/global-host` annotation, else `globalHostTemplate`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from gridroute.config import ConfigError
from gridroute.control.config import Loaded, ServiceConfig, load
from gridroute.control.map_objects import read, write_status
from gridroute.control.publication import Publication, ServiceResult
from gridroute.control.publish_kubernetes import KubernetesPublisher
from gridroute.control.store import MapBackend, Store, StoreError, StoreUnavailable
from gridroute.control.store_kubernetes import StoreOpener
from gridroute.wire.trafficmap import TrafficMap

log = logging.getLogger(__name__)

GLOBAL_HOST_ANNOTATION = "ome.io/global-host"


def _service(tm: TrafficMap) -> ServiceConfig:
    """What the route options need of the map's service."""
    annotations = tm.metadata.annotations or {}
    return ServiceConfig(
        name=tm.metadata.name,
        namespace=tm.metadata.namespace,
        global_host=annotations.get(GLOBAL_HOST_ANNOTATION),
    )


def publish_only(loaded: Loaded, source: str) -> Loaded:
    """`loaded`, refused when it lists services (they belong to the reconcile loop)."""
    if loaded.config.services:
        raise ConfigError.one(
            source,
            "services",
            "a publish-only config lists no services: `trafficmap reconcile` publishes "
            "those maps, and one store has one owner",
        )
    return loaded


class MapPublisher:
    """Passes over map object files; tests drive `run_once`, the CLI loops it."""

    def __init__(
        self,
        config_path: Path,
        paths: list[Path],
        *,
        clock: Callable[[], float] = time.time,
        kubernetes: KubernetesPublisher | None = None,
        maps: MapBackend | None = None,
    ) -> None:
        self.config_path = config_path
        self._open = StoreOpener(maps)
        self.paths = paths
        self.clock = clock
        self.loaded = publish_only(load(config_path), str(config_path))
        self.publication = Publication(self.loaded, clock, kubernetes)

    @property
    def store(self) -> Store:
        return self._open(self.loaded)

    def run_once(self) -> tuple[list[ServiceResult], list[str]]:
        """One pass; returns what happened per map and the errors (one message each)."""
        try:
            return self._pass()
        except StoreError as exc:
            log.error("publish pass failed, the store: %s", exc)
            return [], [f"store: {exc}"]

    def _pass(self) -> tuple[list[ServiceResult], list[str]]:
        try:
            self.loaded = publish_only(load(self.config_path), str(self.config_path))
            self.publication.loaded = self.loaded
        except ConfigError as exc:
            log.error("config refused, keeping the last good one: %s", exc)
            return [], [str(exc)]
        try:
            found = read(self.paths)
        except ConfigError as exc:
            log.error("maps unreadable, nothing changed: %s", exc)
            return [], [str(exc)]
        store, now = self.store, self.clock()
        results: list[ServiceResult] = []
        errors = [r.message for r in found.refused]
        held = {(r.namespace, r.name) for r in found.refused}
        for r in found.refused:
            log.error("%s", r.message)
            results.append(self.publication.hold(store, r.namespace, r.name, r.message))
        maps = [obj.map for obj in found.maps if obj.key not in held]
        overlay_error = self.publication.overlay_write(maps, store, held)
        for obj in found.maps:
            if obj.key in held:
                continue
            try:
                prior = store.read_map(*obj.key)
            except StoreUnavailable:
                raise
            except StoreError:
                prior = None
            result, final = self.publication.publish(
                _service(obj.map), obj.map, prior, overlay_error, now
            )
            store.write_map(final)
            try:
                write_status(obj, final.status)
            except (OSError, ValueError) as exc:
                errors.append(f"{obj.path}: status not written: {exc}")
                log.error("%s: status not written: %s", obj.path, exc)
            results.append(result)
        keep = held | {obj.key for obj in found.maps}
        results.extend(self.publication.finalize(store, keep))
        return results, errors
