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
4. write the map with the publisher's status.

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
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from gridroute.control.config import ControlConfigError, Loaded, ServiceConfig, load
from gridroute.control.inputs import Observations
from gridroute.control.probes import policy_digest
from gridroute.control.publish_directory import DirectoryPublisher, PublishError
from gridroute.control.publish_kubernetes import KubernetesPublisher, from_kubeconfig
from gridroute.control.publish_overlay import OverlayPublisher
from gridroute.control.store import Store, StoreError
from gridroute.core.generation import next_generation
from gridroute.core.probegate import ProbeResult, ProbeState
from gridroute.core.trafficmap import Drain, compute
from gridroute.core.trafficmap_conditions import table_conditions
from gridroute.core.trafficmap_publication import (
    FAILED_LOG_LINE,
    PublishOutcome,
    publication_fallback,
    published,
)
from gridroute.wire.drains import DrainError
from gridroute.wire.httproute import PlanRefused, RouteOptions, claimed_target, render
from gridroute.wire.trafficmap import (
    GatewayRef,
    Metadata,
    Probe,
    Publisher,
    Spec,
    Status,
    TrafficMap,
    conditions,
    map_entry,
    rfc3339,
    spec_of,
)

log = logging.getLogger(__name__)

FINALIZER = "ome.io/trafficmap-publisher"

RoutePublisher = DirectoryPublisher | KubernetesPublisher


@dataclass(frozen=True, slots=True)
class ServiceResult:
    """What one pass did for one service (the CLI prints these)."""

    namespace: str
    name: str
    outcome: PublishOutcome
    weights: dict[str, int] = field(default_factory=dict)
    route: Path | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class PassResult:
    services: tuple[ServiceResult, ...]
    errors: tuple[str, ...] = ()


def route_options(loaded: Loaded, svc: ServiceConfig) -> RouteOptions:
    pub = loaded.config.publish
    return RouteOptions(
        global_gateway=pub.global_gateway,
        backend_port=pub.backend_port,
        hostname=svc.global_host,
        host_template=pub.global_host_template,
        route_namespace=pub.route_namespace,
        rewrite_hostname=pub.rewrite_hostname,
        backend_tls=pub.backend_tls.enabled,
        ca_config_map=pub.backend_tls.ca_config_map,
    )


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
    ) -> None:
        self.config_path = config_path
        self.clock = clock
        self.loaded = loaded or load(config_path)
        self._kubernetes = kubernetes
        self.observations = Observations(clock)
        self._restored: set[tuple[str, str]] = set()

    @property
    def store(self) -> Store:
        return Store(self.loaded.path(self.loaded.config.store))

    def _directory(self) -> DirectoryPublisher | None:
        d = self.loaded.config.publish.directory
        return None if d is None else DirectoryPublisher(self.loaded.path(d))

    def _overlay(self) -> OverlayPublisher | None:
        o = self.loaded.config.publish.overlay
        return None if o is None else OverlayPublisher(self.loaded.path(o))

    def _route_publishers(self) -> list[RoutePublisher]:
        """Directory and/or Kubernetes; a Kubernetes client is made on first use."""
        pubs: list[RoutePublisher] = []
        directory = self._directory()
        if directory is not None:
            pubs.append(directory)
        kube = self.loaded.config.publish.kubernetes
        if kube.enabled:
            if self._kubernetes is None:
                self._kubernetes = from_kubeconfig(kube.field_manager)
            pubs.append(self._kubernetes)
        return pubs

    def publisher_name(self) -> str:
        names = [p.name for p in (self._directory(), self._overlay()) if p is not None]
        if self.loaded.config.publish.kubernetes.enabled:
            names.insert(len(names) - (self._overlay() is not None), "kubernetes")
        return ",".join(names) or "none"

    def reload(self) -> list[str]:
        """Re-read control.yaml; an unreadable file keeps the last good one."""
        try:
            self.loaded = load(self.config_path)
        except ControlConfigError as exc:
            log.error("control.yaml refused, keeping the last good config: %s", exc)
            return [str(exc)]
        return []

    # --- one pass ---------------------------------------------------------------------

    async def run_once(self, session: aiohttp.ClientSession | None = None) -> PassResult:
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
            results.append(self._hold(store, refused.namespace, refused.name, refused.message))
        for svc in loaded.services:
            if not svc.routing.enabled:
                continue
            try:
                drains = store.read_drains(svc.namespace, svc.name)
            except DrainError as exc:
                log.error("services[%s]: %s", svc.name, exc)
                errors.append(f"services[{svc.name}]: {exc}")
                held.add((svc.namespace, svc.name))
                results.append(self._hold(store, svc.namespace, svc.name, str(exc)))
                continue
            prior = self._prior(store, svc)
            tm = self._build(svc, drains, prior, now)
            computed.append((svc, tm, prior))

        overlay_error = self._publish_overlay([tm for _, tm, _ in computed], store)
        for svc, tm, prior in computed:
            result, final = self._publish(svc, tm, prior, overlay_error, now)
            store.write_map(final)
            results.append(result)
        keep = held | {(s.namespace, s.name) for s, _, _ in computed}
        results.extend(self._finalize(store, keep))
        return PassResult(tuple(results), tuple(errors))

    # --- steps ------------------------------------------------------------------------

    def _prior(self, store: Store, svc: ServiceConfig) -> TrafficMap | None:
        try:
            return store.read_map(svc.namespace, svc.name)
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
        table_conds = table_conditions(table, drains, spec.all_failed_policy, inp.capacity_polling)
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

    def _publish_overlay(self, maps: list[TrafficMap], store: Store) -> str | None:
        overlay = self._overlay()
        if overlay is None:
            return None
        held = [m for m in store.maps() if (m.metadata.namespace, m.metadata.name) not in
                {(t.metadata.namespace, t.metadata.name) for t in maps}]  # fmt: skip
        try:
            overlay.write(maps + [m for m in held if m.spec.entries])
        except PublishError as exc:
            log.error("%s: %s", FAILED_LOG_LINE, exc)
            return str(exc)
        return None

    def _publish(
        self,
        svc: ServiceConfig,
        tm: TrafficMap,
        prior: TrafficMap | None,
        overlay_error: str | None,
        now: float,
    ) -> tuple[ServiceResult, TrafficMap]:
        opts = route_options(self.loaded, svc)
        status = tm.status
        outcome, message, route_path = PublishOutcome.PUBLISHED, "", None
        gateway_ref, claimed = status.gateway_ref, status.publisher
        observed = status.observed_traffic_map_generation
        weights = {e.cluster: e.weight for e in tm.spec.entries}
        try:
            pubs = self._route_publishers()
        except PublishError as exc:
            pubs, outcome, message = [], PublishOutcome.APPLY_FAILED, str(exc)
        if outcome is not PublishOutcome.PUBLISHED:
            pass
        elif not pubs and self._overlay() is None:
            outcome, message = PublishOutcome.WITHDRAWN, "no publisher is configured"
        elif pubs:
            try:
                rendered = render(tm, opts)
            except PlanRefused as refused:
                outcome, message = refused.outcome, str(refused)
                if outcome is PublishOutcome.WITHDRAWN and gateway_ref is not None:
                    try:
                        for pub in pubs:
                            pub.remove(gateway_ref.namespace or svc.namespace, gateway_ref.name)
                        gateway_ref, claimed = None, None
                    except PublishError as exc:
                        outcome, message = PublishOutcome.UNPUBLISH_FAILED, str(exc)
                elif outcome is PublishOutcome.WITHDRAWN:
                    gateway_ref, claimed = None, None
            else:
                meta = rendered.route["metadata"]
                try:
                    for pub in pubs:
                        pub.apply(rendered)
                except PublishError as exc:
                    outcome, message = PublishOutcome.APPLY_FAILED, str(exc)
                else:
                    directory = self._directory()
                    if directory is not None:
                        route_path = directory.path(meta["namespace"], meta["name"])
                    gateway_ref = GatewayRef(name=meta["name"], namespace=meta["namespace"])
                    claimed = Publisher(
                        publisher_name=self.publisher_name(),
                        claimed_targets=[claimed_target(meta["namespace"], meta["name"])],
                    )
        if outcome is PublishOutcome.PUBLISHED and overlay_error is not None:
            outcome, message = PublishOutcome.APPLY_FAILED, overlay_error
        if outcome is PublishOutcome.PUBLISHED:
            observed = tm.metadata.generation
        elif outcome not in (PublishOutcome.WITHDRAWN,):
            log.error("%s: services[%s]: %s", FAILED_LOG_LINE, svc.name, message)
        pub_conds = [published(outcome, self.publisher_name()), publication_fallback(outcome)]
        final = tm.model_copy(
            update={
                "metadata": tm.metadata.model_copy(
                    update={"finalizers": [FINALIZER] if gateway_ref is not None else None}
                ),
                "status": status.model_copy(
                    update={
                        "published": outcome is PublishOutcome.PUBLISHED,
                        "observed_traffic_map_generation": observed,
                        "gateway_ref": gateway_ref,
                        "publisher": claimed,
                        "conditions": conditions(
                            pub_conds, status.conditions, now, tm.metadata.generation
                        ),
                    }
                ),
            }
        )
        result = ServiceResult(svc.namespace, svc.name, outcome, weights, route_path, message)
        return result, final

    def _hold(self, store: Store, namespace: str, name: str, message: str) -> ServiceResult:
        """An invalid service: keep its table, say InvalidOwner, leave its route alone."""
        now = self.clock()
        try:
            prior = store.read_map(namespace, name)
        except StoreError:
            prior = None
        outcome = PublishOutcome.INVALID_OWNER
        if prior is None:
            prior = TrafficMap(
                metadata=Metadata(name=name, namespace=namespace, creation_timestamp=rfc3339(now)),
                spec=Spec(service=name),
            )
        pub_conds = [published(outcome, self.publisher_name()), publication_fallback(outcome)]
        status = prior.status.model_copy(
            update={
                "published": False,
                "conditions": conditions(
                    pub_conds, prior.status.conditions, now, prior.metadata.generation
                ),
            }
        )
        store.write_map(prior.model_copy(update={"status": status}))
        weights = {e.cluster: e.weight for e in prior.spec.entries}
        return ServiceResult(namespace, name, outcome, weights, None, message)

    def _finalize(self, store: Store, keep: set[tuple[str, str]]) -> list[ServiceResult]:
        """Remove the route, then the map, of every service no longer routed (held ones,
        whose config or drains are invalid, are kept)."""
        out = []
        for tm in store.maps():
            key = (tm.metadata.namespace, tm.metadata.name)
            if key in keep:
                continue
            now = self.clock()
            finalizing = [
                published(PublishOutcome.FINALIZING, self.publisher_name()),
                publication_fallback(PublishOutcome.FINALIZING),
            ]
            status = tm.status.model_copy(
                update={
                    "published": False,
                    "conditions": conditions(
                        finalizing, tm.status.conditions, now, tm.metadata.generation
                    ),
                }
            )
            store.write_map(tm.model_copy(update={"status": status}))
            ref = tm.status.gateway_ref
            try:
                if ref is not None:
                    for pub in self._route_publishers():
                        pub.remove(ref.namespace or key[0], ref.name)
            except PublishError as exc:
                log.error("%s: %s", FAILED_LOG_LINE, exc)
                failed = [
                    published(PublishOutcome.UNPUBLISH_FAILED, self.publisher_name()),
                    publication_fallback(PublishOutcome.UNPUBLISH_FAILED),
                ]
                status = status.model_copy(
                    update={
                        "conditions": conditions(
                            failed, status.conditions, now, tm.metadata.generation
                        )
                    }
                )
                store.write_map(tm.model_copy(update={"status": status}))
                out.append(ServiceResult(*key, PublishOutcome.UNPUBLISH_FAILED, message=str(exc)))
                continue
            store.delete_map(*key)
            out.append(ServiceResult(*key, PublishOutcome.UNPUBLISHED))
        return out
