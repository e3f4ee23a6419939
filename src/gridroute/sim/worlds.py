"""Building the simulated world a scenario describes: sites with their service times,
request sizes and external load, and operators with their failing scrapes, half samples,
lossy links and skewed clocks.

Every random source is seeded from the run's base seed and its own name, so adding a
world to a scenario never shifts the draws of another (and the seed scenario, with no
world set, draws exactly what it always did).
"""

from __future__ import annotations

from random import Random

from gridroute.sim.model import ServiceTimes, SimOperator, SimSite, Sizes
from gridroute.sim.scenario import Scenario
from gridroute.sim.sessions import KvCache


def build_sites(sc: Scenario, base: str) -> list[SimSite]:
    """One `SimSite` per site spec. Sites on the scenario's service share one source."""
    shared = ServiceTimes(sc.service, Random(f"{base}:service"))
    sizes = None if sc.request_sizes is None else Sizes(sc.request_sizes, Random(f"{base}:sizes"))
    sites = []
    for spec in sc.sites:
        times = (
            shared
            if spec.service is None
            else ServiceTimes(spec.service, Random(f"{base}:service:{spec.name}"))
        )
        site = SimSite(spec.name, spec.slots, spec.service_scale, times, sizes)
        if spec.external is not None:
            site.external = spec.external.level(0.0)
        site.refuses = spec.when_full == "refuse"
        if sc.sessions is not None:
            site.cache = KvCache(sc.sessions.kv_cache_tokens)
        sites.append(site)
    return sites


def build_operators(sc: Scenario, base: str) -> list[SimOperator]:
    """One `SimOperator` per site, in the worlds its site spec names."""
    window_s = sc.availability.freshness_window_ms / 1000.0
    return [
        SimOperator(
            spec.name,
            rng=Random(f"{base}:world:{spec.name}"),
            half_samples=spec.half_samples,
            link_loss=spec.link_loss,
            skew_s=spec.clock_skew_s,
            stale_s=sc.stale_metrics_s,
            report_window_s=window_s,
        )
        for spec in sc.sites
    ]


def external_changes(sc: Scenario) -> set[float]:
    """Every time some site's external load changes level."""
    out: set[float] = set()
    for spec in sc.sites:
        if spec.external is not None:
            out.update(at for at, _ in spec.external.changes(sc.duration_s))
    return out


def available_slots(sc: Scenario, t: float) -> int:
    """Slots not held by external load at `t`, summed over sites (the ideal's capacity)."""
    total = 0
    for spec in sc.sites:
        level = 0 if spec.external is None else spec.external.level(t)
        total += max(spec.slots - level, 0)
    return total
