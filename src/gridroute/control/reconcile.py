"""The TrafficMap reconcile loop: control.yaml, live observations and drains in; maps in
the store and routes published out, every pass.

One pass, per service:

1. assemble the core's input (`Observations.map_input`) and compute the table and the
   table's conditions (core/);
2. build the map; `metadata.generation` moves only when the spec changed, so a hand edit
   of a stored map is undone and counted;
3. render the HTTPRoute and publish it (directory; the overlay file gets every map's
   weights); on failure the last published route stays, Published goes False with the
   reason, and `observedTrafficMapGeneration` keeps the generation last written;
4. write the map with the publisher's status (`publication`).

A service whose entry in control.yaml (or whose drain record) is invalid is not
recomputed: its map keeps its last table, Published goes False with reason
InvalidOwner, and its route is left alone. A service gone from control.yaml, or with
`routing.enabled: false`, is finalized: its route is removed, then its map. A
control.yaml that cannot be read at all changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from gridroute.control.config import ControlConfigError, Loaded, ServiceConfig, load
from gridroute.control.inputs import Observations
from gridroute.control.probes import policy_digest
from gridroute.control.publication import Publication, ServiceResult
from gridroute.control.publish_kubernetes import KubernetesPublisher
from gridroute.control.store import MapBackend, Store, StoreError, StoreUnavailable
from gridroute.control.store_kubernetes import StoreOpener
from gridroute.core.generation import next_generation
from gridroute.core.probegate import ProbeResult, ProbeState
from gridroute.core.trafficmap import Drain, compute
from gridroute.core.trafficmap_conditions import table_conditions
from gridroute.wire.drains import DrainError
from gridroute.wire.trafficmap import (
    Metadata,
    Probe,
    Status,
    TrafficMap,
    conditions,
    map_entry,
    rfc3339,
    spec_of,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PassResult:
    services: tuple[ServiceResult, ...]
    errors: tuple[str, ...] = ()


def _probe_state(entry_probe: Probe | None) -> ProbeState | None:
    if entry_probe is None:
        return None
    return ProbeState(
        result=ProbeResult(entry_probe.result),
        gated=bool(entry_probe.gated),
        consecutive_failures=entry_probe.consecutive_failures or 0,
        message=entry_probe.message or "",
    )


class Reconciler:
    """Runs passes over one control.yaml; tests drive `run_once`, the CLI `run`."""

    def __init__(
        self,
        config_path: Path,
        *,
        clock: Callable[[], float] = time.time,
        loaded: Loaded | None = None,
        kubernetes: KubernetesPublisher | None = None,
        maps: MapBackend | None = None,
    ) -> None:
        self.config_path = config_path
        self._open = StoreOpener(maps)
        self.clock = clock
        self.loaded = loaded or load(config_path)
        self.publication = Publication(self.loaded, clock, kubernetes)
        self.observations = Observations(clock)
        self._restored: set[tuple[str, str]] = set()

    @property
    def store(self) -> Store:
        return self._open(self.loaded)

    def reload(self) -> list[str]:
        """Re-read control.yaml; an unreadable file keeps the last good one."""
        try:
            self.loaded = load(self.config_path)
            self.publication.loaded = self.loaded
        except ControlConfigError as exc:
            log.error("control.yaml refused, keeping the last good config: %s", exc)
            return [str(exc)]
        return []

    # --- one pass ---------------------------------------------------------------------

    async def run_once(self, session: aiohttp.ClientSession | None = None) -> PassResult:
        """One pass; a store that cannot be read or written fails the pass, named."""
        try:
            return await self._pass(session)
        except StoreError as exc:
            log.error("reconcile pass failed, the store: %s", exc)
            return PassResult((), (f"store: {exc}",))

    async def _pass(self, session: aiohttp.ClientSession | None) -> PassResult:
        errors = self.reload()
        self._restore_gates()
        if session is None:
            async with aiohttp.ClientSession() as own:
                await self.observations.gather(own, self.loaded)
        else:
            await self.observations.gather(session, self.loaded)
        if errors:
            return PassResult((), tuple(errors))
        return self.reconcile()

    async def run(self, stop: asyncio.Event, on_pass: Callable[[PassResult], None]) -> None:
        """Pass after pass until `stop` is set."""
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                try:
                    on_pass(await self.run_once(session))
                except Exception:  # one failed pass must not stop the loop
                    log.exception("reconcile pass failed")
                cfg = self.loaded.config
                tick = min(cfg.reconcile_interval_seconds, cfg.probe.period_seconds)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=tick)

    def reconcile(self) -> PassResult:
        """Recompute, publish and store every map from what has been gathered."""
        loaded, store, now = self.loaded, self.store, self.clock()
        computed: list[tuple[ServiceConfig, TrafficMap, TrafficMap | None]] = []
        results: list[ServiceResult] = []
        errors = [r.message for r in loaded.refused]
        held = {(r.namespace, r.name) for r in loaded.refused}
        for refused in loaded.refused:
            results.append(
                self.publication.hold(store, refused.namespace, refused.name, refused.message)
            )
        for svc in loaded.services:
            if not svc.routing.enabled:
                continue
            try:
                drains = store.read_drains(svc.namespace, svc.name)
            except DrainError as exc:
                log.error("services[%s]: %s", svc.name, exc)
                errors.append(f"services[{svc.name}]: {exc}")
                held.add((svc.namespace, svc.name))
                results.append(self.publication.hold(store, svc.namespace, svc.name, str(exc)))
                continue
            prior = self._prior(store, svc)
            tm = self._build(svc, drains, prior, now)
            computed.append((svc, tm, prior))

        overlay_error = self.publication.overlay_write([tm for _, tm, _ in computed], store, held)
        for svc, tm, prior in computed:
            result, final = self.publication.publish(svc, tm, prior, overlay_error, now)
            store.write_map(final)
            results.append(result)
        keep = held | {(s.namespace, s.name) for s, _, _ in computed}
        results.extend(self.publication.finalize(store, keep))
        return PassResult(tuple(results), tuple(errors))

    # --- steps ------------------------------------------------------------------------

    def _prior(self, store: Store, svc: ServiceConfig) -> TrafficMap | None:
        try:
            return store.read_map(svc.namespace, svc.name)
        except StoreUnavailable:
            raise
        except StoreError as exc:
            log.warning("stored map unreadable, rebuilding it: %s", exc)
            return None

    def _restore_gates(self) -> None:
        """On first sight of a service, take probe hysteresis from its stored map, where
        the map's policy digest is the current policy's (a restart keeps gates closed)."""
        store = self.store
        for svc in self.loaded.services:
            key = (svc.namespace, svc.name)
            if key in self._restored:
                continue
            self._restored.add(key)
            try:
                prior = store.read_map(*key)
            except StoreError:
                continue
            if prior is None:
                continue
            digest = policy_digest(svc.probe(self.loaded.config.probe))
            for entry in prior.spec.entries:
                state = _probe_state(entry.probe)
                if state is not None and entry.probe and entry.probe.policy_digest == digest:
                    home = (svc.namespace, svc.name, entry.cluster)
                    self.observations.restore_probe(home, digest, state)

    def _build(
        self, svc: ServiceConfig, drains: tuple[Drain, ...], prior: TrafficMap | None, now: float
    ) -> TrafficMap:
        store = self.store
        inp, spec = self.observations.map_input(self.loaded, svc, drains)
        table = compute(inp)
        digest = policy_digest(spec)
        entries = [map_entry(e, digest if e.probe is not None else None) for e in table.entries]
        source = store.source(svc.namespace, svc.name, svc.model_dump(mode="json"))
        new_spec = spec_of(svc.name, svc.mode, source.generation, entries)
        stored_gen = (
            prior.metadata.generation
            if prior is not None
            else store.stored_generation(svc.namespace, svc.name)
        )
        changed = prior is None or prior.spec != new_spec
        generation = next_generation(stored_gen, changed)
        table_conds = table_conditions(
            table,
            drains,
            spec.all_failed_policy,
            inp.capacity_polling,
            inp.capacity_disabled_by_service,
        )
        prior_status = prior.status if prior is not None else Status()
        status = prior_status.model_copy(
            update={
                "source_uid": source.uid,
                "conditions": conditions(
                    list(table_conds), prior_status.conditions, now, generation
                ),
            }
        )
        meta = Metadata(
            name=svc.name,
            namespace=svc.namespace,
            generation=generation,
            creation_timestamp=prior.metadata.creation_timestamp if prior else rfc3339(now),
            uid=prior.metadata.uid if prior and prior.metadata.uid else str(uuid.uuid4()),
            finalizers=prior.metadata.finalizers if prior else None,
        )
        return TrafficMap(metadata=meta, spec=new_spec, status=status)
