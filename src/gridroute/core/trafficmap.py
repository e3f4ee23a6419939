"""TrafficMap weights: one inference service's homes in, a weighted table out (seed,
"How OME sets the weights"; reference 4.2 and 4.3).

The four steps, in the seed's order:

1. replicas that can serve = min(allocated, ready) x capacity factor (factor 1 unless set;
   never below 0), `allocated` lowered by a report with 0 <= reported < allocated;
2. an entry that a routing health probe gates gets 0, with the one exception Routable
   describes: when every home's probe has conclusively failed (a home without a probe
   block, such as one with an invalid endpoint, is not a failure), `PreserveTraffic`
   keeps the capacity weights of ready homes and `Drain` writes an all-zero table;
3. the weights are reduced to their smallest whole-number ratio (4 and 2 become 2 and 1),
   at most 1,000,000 (the Gateway API backendRef limit);
4. an entry that a drain holds gets 0, and the other weights stay as they are.

Draining after the reduction is what makes "draining one entry never changes another's
weight" hold (the seed: "The other weights stay as they are"). The conditions that
describe the table (Routable, OverrideActive, CapacityFallback) live in
`trafficmap_conditions`; why one entry is 0 is decided by `zeroweight`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum
from fractions import Fraction

from gridroute.core.probegate import ProbeState

MAX_WEIGHT = 1_000_000
"""Gateway API's largest backendRef weight; a map's weights never exceed it."""


class Mode(Enum):
    """The service's placement mode, mirrored into the map."""

    SINGLE = "Single"
    ALL = "All"
    SPLIT = "Split"


class AllFailedPolicy(Enum):
    """What a map does when every probed home has conclusively failed."""

    PRESERVE_TRAFFIC = "PreserveTraffic"
    DRAIN = "Drain"


class CapacitySource(Enum):
    CONTROL_PLANE = "ControlPlane"
    ENDPOINT = "Endpoint"
    """A capacity report lowered the allocation."""


@dataclass(frozen=True, slots=True)
class Drain:
    """One drain record: `id` holds `cluster` at weight 0 (several ids may hold one)."""

    id: str
    cluster: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Home:
    """A cluster that admitted the service. Without an `endpoint` it is not addressable
    and gets no entry. `allocated`/`ready` are already the lower of an engine's and a
    decoder's counts (`lowest_counts`); `reported` is a usable capacity report."""

    cluster: str
    endpoint: str | None
    allocated: int
    ready: int
    factor: Fraction = Fraction(1)
    probe: ProbeState | None = None
    reported: int | None = None
    fallback_reason: str | None = None


@dataclass(frozen=True, slots=True)
class MapInput:
    service: str
    mode: Mode
    homes: tuple[Home, ...]
    drains: tuple[Drain, ...] = ()
    all_failed_policy: AllFailedPolicy = AllFailedPolicy.PRESERVE_TRAFFIC
    capacity_polling: bool = False
    capacity_disabled_by_service: bool = False
    """Polling is off because the service's own policy turns it off (`routing.capacity.
    disabled`), not because the global one is."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One home in the table, with the provenance of its weight."""

    cluster: str
    endpoint: str
    weight: int
    healthy: bool
    allocated: int
    ready: int
    factor: Fraction
    source: CapacitySource
    reported: int | None
    fallback_reason: str | None
    probe: ProbeState | None
    drain_refs: tuple[str, ...]
    servable: Fraction
    """Step 1's value, max(min(allocated, ready), 0) x factor (kept so a zero can be
    explained)."""
    preserved: bool
    """Its probe gate is closed but the all-failed exception kept its weight."""


@dataclass(frozen=True, slots=True)
class Table:
    """The computed table; `all_probes_failed` is the fleet-wide exception's trigger."""

    entries: tuple[Entry, ...]
    placed: bool
    all_probes_failed: bool
    pre_drain_weights: tuple[int, ...]
    """Each entry's weight after step 3, before drains (Routable tells TrafficDrain apart)."""


def lowest_counts(*components: tuple[int, int]) -> tuple[int, int]:
    """(allocated, ready) of an engine+decoder service: each the lower of the components'."""
    return min(c[0] for c in components), min(c[1] for c in components)


def reduce_ratio(values: list[Fraction]) -> list[int]:
    """The smallest whole-number ratio of non-negative `values`, capped at `MAX_WEIGHT`.

    A ratio too wide for the cap is scaled down and rounded; a positive value never
    rounds to 0 (a home that can serve keeps some traffic), and the result is reduced
    again so its greatest common divisor is 1.
    """
    if not any(values):
        return [0 for _ in values]
    scale = math.lcm(*(v.denominator for v in values))
    ints = [int(v * scale) for v in values]
    top = max(ints)
    if top > MAX_WEIGHT:
        ints = [0 if w == 0 else max(1, round(w * MAX_WEIGHT / top)) for w in ints]
    divisor = math.gcd(*ints)
    return [w // divisor for w in ints]


def effective_allocated(home: Home) -> tuple[int, CapacitySource]:
    """The allocation the weight uses, and where it came from.

    A report counts only when 0 <= reported < allocated: it lowers the plan (source
    Endpoint), never raises it, and a negative report is malformed, not an instruction
    to serve nothing, so it is ignored and the plan stands (OME's EffectiveAllocated
    fails open the same way).
    """
    reported = home.reported
    if reported is not None and 0 <= reported < home.allocated:
        return reported, CapacitySource.ENDPOINT
    return home.allocated, CapacitySource.CONTROL_PLANE


def _gated(home: Home) -> bool:
    return home.probe is not None and home.probe.gated


def compute(inp: MapInput) -> Table:
    """The table for `inp`: entries sorted by cluster, weights by the four steps."""
    homes = sorted((h for h in inp.homes if h.endpoint), key=lambda h: h.cluster)
    all_failed = bool(homes) and all(_gated(h) for h in homes)
    preserve = all_failed and inp.all_failed_policy is AllFailedPolicy.PRESERVE_TRAFFIC

    servable: list[Fraction] = []
    step2: list[Fraction] = []
    allocations: list[tuple[int, CapacitySource]] = []
    for home in homes:
        allocated, source = effective_allocated(home)
        allocations.append((allocated, source))
        can_serve = max(min(allocated, home.ready), 0) * home.factor
        servable.append(can_serve)
        zeroed = (all_failed or _gated(home)) and not preserve
        step2.append(Fraction(0) if zeroed else can_serve)
    reduced = reduce_ratio(step2)

    entries = [
        Entry(
            cluster=home.cluster,
            endpoint=home.endpoint or "",
            weight=weight,
            healthy=home.ready > 0 and not _gated(home),
            allocated=allocated,
            ready=home.ready,
            factor=home.factor,
            source=source,
            reported=home.reported,
            fallback_reason=home.fallback_reason,
            probe=home.probe,
            drain_refs=(),
            servable=can_serve,
            preserved=preserve and _gated(home),
        )
        for home, (allocated, source), can_serve, weight in zip(
            homes, allocations, servable, reduced, strict=True
        )
    ]
    table = Table(
        entries=tuple(entries),
        placed=bool(inp.homes),
        all_probes_failed=all_failed,
        pre_drain_weights=tuple(reduced),
    )
    return with_drains(table, inp.drains)


def with_drains(table: Table, drains: tuple[Drain, ...]) -> Table:
    """`table` re-drained with `drains` (step 4 alone: the other weights do not move)."""
    held: dict[str, list[str]] = {}
    for drain in drains:
        held.setdefault(drain.cluster, []).append(drain.id)
    entries = []
    for entry, weight in zip(table.entries, table.pre_drain_weights, strict=True):
        refs = tuple(sorted(set(held.get(entry.cluster, []))))
        entries.append(replace(entry, weight=0 if refs else weight, drain_refs=refs))
    return replace(table, entries=tuple(entries))
