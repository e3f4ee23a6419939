"""What the control plane has observed of every home, gathered in the background: ready
replicas and capacity reports from operators, probe gates from HTTP probes; and each
service's `MapInput` assembled from them and control.yaml.

Gathering does I/O (`gather`); assembling (`map_input`) only reads what was gathered, so
a reconcile pass is a pure function of config, observations and drains.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp

from gridroute.control.config import (
    CapacityPolling,
    Loaded,
    OperatorRef,
    ProbeSpec,
    ServiceConfig,
)
from gridroute.control.probes import policy_digest, probe, probeable
from gridroute.control.readings import (
    READY_HOLD_S,
    ReadyReading,
    operator_ssl,
    read_capacity,
    read_ready,
)
from gridroute.core.capacityreport import Attempt, ReportPolicy, due, kept, read
from gridroute.core.probegate import ProbeState, ProbeThresholds, step
from gridroute.core.trafficmap import Drain, Home, MapInput, lowest_counts

log = logging.getLogger(__name__)

HomeKey = tuple[str, str, str]
"""(namespace, service, cluster)."""
ProviderKey = tuple[str, str]
"""(operator url, provider)."""
PollKey = tuple[str, str, CapacityPolling]
"""(operator url, provider, effective capacity policy): one poll window and cadence. Two
services on one provider share a window only when their policies are equal."""


def _refs(loaded: Loaded) -> set[ProviderKey]:
    keys = set()
    for svc in loaded.services:
        for home in svc.homes:
            if home.operator is None:
                continue
            keys.add((home.operator.url, home.operator.provider))
            if home.decoder is not None and home.decoder.provider is not None:
                keys.add((home.operator.url, home.decoder.provider))
    return keys


def _capacity_keys(loaded: Loaded) -> dict[PollKey, None]:
    """Every window to poll (in config order): each routed service's homes with an
    operator, under the service's effective policy; none for a service it is off for."""
    keys: dict[PollKey, None] = {}
    for svc in loaded.services:
        policy = svc.capacity(loaded.config.capacity_polling)
        if policy is None or not svc.routing.enabled:
            continue
        for home in svc.homes:
            if home.operator is not None:
                keys[(home.operator.url, home.operator.provider, policy)] = None
    return keys


class Observations:
    """Live readings and probe gates, keyed by provider and by home."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.ready: dict[ProviderKey, ReadyReading] = {}
        self.capacity: dict[PollKey, tuple[Attempt, ...]] = {}
        self.probes: dict[HomeKey, ProbeState] = {}
        self.probe_digests: dict[HomeKey, str] = {}
        self._probed_at: dict[HomeKey, float] = {}
        self._capacity_at: dict[PollKey, float] = {}

    def restore_probe(self, key: HomeKey, digest: str, state: ProbeState) -> None:
        """Hysteresis from a stored map, kept only while the policy is the same one."""
        if key not in self.probes:
            self.probes[key], self.probe_digests[key] = state, digest

    # --- gathering (I/O) --------------------------------------------------------------

    async def gather(self, session: aiohttp.ClientSession, loaded: Loaded) -> None:
        """One round of everything that is due: ready counts, capacity polls, probes."""
        await asyncio.gather(
            self._gather_ready(session, loaded),
            self._gather_capacity(session, loaded),
            self._gather_probes(session, loaded),
        )

    async def _gather_ready(self, session: aiohttp.ClientSession, loaded: Loaded) -> None:
        keys = sorted(_refs(loaded))
        timeout = loaded.config.probe.timeout_seconds
        tls = operator_ssl(loaded.config.operator_tls, loaded.base)
        results = await asyncio.gather(
            *(read_ready(session, OperatorRef(url=u, provider=p), timeout, tls) for u, p in keys),
            return_exceptions=True,
        )
        now = self.clock()
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, BaseException):
                log.debug("ready count from %s/%s: %s", key[0], key[1], result)
                continue
            self.ready[key] = ReadyReading(result, now)

    async def _gather_capacity(self, session: aiohttp.ClientSession, loaded: Loaded) -> None:
        """Poll each window that is due under its own policy; a window no service uses
        any more (a policy changed, a service left) is forgotten."""
        now = self.clock()
        keys = _capacity_keys(loaded)
        for gone in [k for k in self.capacity.keys() | self._capacity_at.keys() if k not in keys]:
            self.capacity.pop(gone, None)
            self._capacity_at.pop(gone, None)
        polls = [k for k in keys if due(self._capacity_at.get(k), now, k[2].period_seconds)]
        if not polls:
            return
        for key in polls:
            self._capacity_at[key] = now
        tls = operator_ssl(loaded.config.operator_tls, loaded.base)
        attempts = await asyncio.gather(
            *(read_capacity(session, OperatorRef(url=u, provider=p), c, tls) for u, p, c in polls)
        )
        for key, attempt in zip(polls, attempts, strict=True):
            self.capacity[key] = kept(self.capacity.get(key, ()), attempt, key[2].samples)

    async def _gather_probes(self, session: aiohttp.ClientSession, loaded: Loaded) -> None:
        jobs = []
        now = self.clock()
        for svc in loaded.services:
            spec = svc.probe(loaded.config.probe)
            if spec.disabled:
                continue
            digest = policy_digest(spec)
            for home in svc.homes:
                key = (svc.namespace, svc.name, home.cluster)
                if not probeable(home.endpoint):
                    continue
                if self.probe_digests.get(key) != digest:
                    self.probes.pop(key, None)
                    self._probed_at.pop(key, None)
                    self.probe_digests[key] = digest
                last = self._probed_at.get(key)
                if last is not None and now - last < spec.period_seconds:
                    continue
                self._probed_at[key] = now
                jobs.append((key, spec, home.endpoint or ""))
        verdicts = await asyncio.gather(*(probe(session, ep, spec) for _, spec, ep in jobs))
        at = self.clock()
        for (key, spec, _), verdict in zip(jobs, verdicts, strict=True):
            thresholds = ProbeThresholds(spec.failure_threshold, spec.success_threshold)
            self.probes[key] = step(
                self.probes.get(key), verdict.result, at, verdict.message, thresholds
            )

    # --- assembling (no I/O) ----------------------------------------------------------

    def _ready(self, url: str | None, provider: str | None, static: int | None) -> int:
        if url is None or provider is None:
            return static or 0
        reading = self.ready.get((url, provider))
        if reading is None or self.clock() - reading.at > READY_HOLD_S:
            return 0
        return reading.ready

    def map_input(
        self, loaded: Loaded, svc: ServiceConfig, drains: tuple[Drain, ...]
    ) -> tuple[MapInput, ProbeSpec]:
        """The core's input for `svc`, from config, what was observed and its drains."""
        spec = svc.probe(loaded.config.probe)
        polling = svc.capacity(loaded.config.capacity_polling)
        now = self.clock()
        homes = []
        for h in svc.homes:
            url = h.operator.url if h.operator else None
            ready = self._ready(url, h.operator.provider if h.operator else None, h.ready)
            allocated = h.allocated
            if h.decoder is not None:
                d = h.decoder
                d_ready = (
                    d.ready
                    if d.ready is not None
                    else self._ready(url, d.provider, None)
                    if d.provider is not None
                    else ready
                )
                allocated, ready = lowest_counts((allocated, ready), (d.allocated, d_ready))
            key = (svc.namespace, svc.name, h.cluster)
            gate = None
            if not spec.disabled and probeable(h.endpoint):
                gate = self.probes.get(key, ProbeState())
            reported, fallback = None, None
            if polling is not None:
                if h.operator is None:
                    fallback = "no operator to poll for capacity"
                else:
                    window = self.capacity.get((h.operator.url, h.operator.provider, polling), ())
                    rules = ReportPolicy(max_age_s=polling.max_age_seconds, quorum=polling.quorum)
                    reading = read(window, now, rules)
                    reported, fallback = reading.reported, reading.fallback_reason
            homes.append(
                Home(
                    cluster=h.cluster,
                    endpoint=h.endpoint,
                    allocated=allocated,
                    ready=ready,
                    factor=svc.factor(h.cluster),
                    probe=gate,
                    reported=reported,
                    fallback_reason=fallback,
                )
            )
        inp = MapInput(
            service=svc.name,
            mode=svc.mode,
            homes=tuple(homes),
            drains=drains,
            all_failed_policy=spec.all_failed_policy,
            capacity_polling=polling is not None,
            capacity_disabled_by_service=svc.capacity_disabled,
        )
        return inp, spec
