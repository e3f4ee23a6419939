"""TrafficMaps as an operator reads them: `trafficmap get` rows and `describe` text.

The columns are the seed's (`NAME MODE PUBLISHED ROUTABLE OVERRIDE REASON AGE`), taken
from the map's conditions, plus the entry count and the weights; `-o wide` adds the
route and whether the publisher has written the latest generation.
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

from gridroute.core.generation import Staleness
from gridroute.core.probegate import ProbeResult, ProbeState
from gridroute.core.quantity import parse_quantity
from gridroute.core.trafficmap import CapacitySource, Entry, Table
from gridroute.core.zeroweight import cause_of
from gridroute.wire.trafficmap import MapEntry, TrafficMap

COLUMNS = ["NAME", "MODE", "PUBLISHED", "ROUTABLE", "OVERRIDE", "REASON", "ENTRIES", "WEIGHTS",
           "AGE"]  # fmt: skip
WIDE = ["ROUTE", "GENERATION", "PUBLISHER"]


def age(created: str | None, now: float) -> str:
    """kubectl's short age: 45s, 12m, 3h, 5d."""
    if not created:
        return "<unknown>"
    try:
        at = dt.datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<unknown>"
    secs = max(int(now - at), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def _status(tm: TrafficMap, kind: str) -> str:
    cond = tm.status.condition(kind)
    return "Unknown" if cond is None else cond.status


def weights(tm: TrafficMap) -> str:
    return ",".join(f"{e.cluster}={e.weight}" for e in tm.spec.entries) or "<none>"


def currency(tm: TrafficMap) -> str:
    staleness = Staleness(tm.metadata.generation, tm.status.observed_traffic_map_generation)
    return f"{tm.metadata.generation}/{staleness.observed or '-'} {staleness.currency.value}"


def row(tm: TrafficMap, now: float, wide: bool = False) -> list[str]:
    routable = tm.status.condition("Routable")
    cells = [
        tm.metadata.name,
        tm.spec.mode or "",
        _status(tm, "Published"),
        _status(tm, "Routable"),
        _status(tm, "OverrideActive"),
        routable.reason if routable is not None else "",
        str(len(tm.spec.entries)),
        weights(tm),
        age(tm.metadata.creation_timestamp, now),
    ]
    if wide:
        ref = tm.status.gateway_ref
        route = f"{ref.namespace}/{ref.name}" if ref is not None else "<none>"
        publisher = tm.status.publisher.publisher_name if tm.status.publisher else "<none>"
        cells += [route, currency(tm), publisher]
    return cells


def table_text(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def core_entry(e: MapEntry) -> Entry:
    """A stored entry back as the core's, so `zeroweight` can explain it."""
    cap = e.capacity
    allocated = (cap.allocated or 0) if cap else 0
    ready = (cap.ready or 0) if cap else 0
    factor = parse_quantity(cap.factor) if cap and cap.factor else Fraction(1)
    probe = None
    if e.probe is not None:
        probe = ProbeState(
            ProbeResult(e.probe.result), bool(e.probe.gated), e.probe.consecutive_failures or 0
        )
    return Entry(
        cluster=e.cluster,
        endpoint=e.endpoint or "",
        weight=e.weight,
        healthy=e.healthy,
        allocated=allocated,
        ready=ready,
        factor=factor,
        source=CapacitySource(cap.source) if cap else CapacitySource.CONTROL_PLANE,
        reported=cap.reported if cap else None,
        fallback_reason=cap.fallback_reason if cap else None,
        probe=probe,
        drain_refs=tuple(e.drain_refs or ()),
        servable=min(allocated, ready) * factor,
        preserved=probe is not None and probe.gated and e.weight > 0,
    )


def describe(tm: TrafficMap, now: float) -> str:
    """kubectl-describe-like text: the map, each entry with why it is 0, conditions."""
    s = tm.status
    ref = s.gateway_ref
    lines = [
        f"Name:         {tm.metadata.name}",
        f"Namespace:    {tm.metadata.namespace}",
        f"Service:      {tm.spec.service}",
        f"Mode:         {tm.spec.mode or ''}",
        f"Generation:   {tm.metadata.generation} (published: "
        f"{s.observed_traffic_map_generation if s.observed_traffic_map_generation else '-'}; "
        f"{currency(tm).split(' ')[1]})",
        f"Route:        {f'{ref.kind} {ref.namespace}/{ref.name}' if ref else '<none>'}",
        f"Age:          {age(tm.metadata.creation_timestamp, now)}",
        "Entries:",
    ]
    entries = [core_entry(e) for e in tm.spec.entries]
    table = Table(tuple(entries), True, False, tuple(e.weight for e in entries))
    rows = [["CLUSTER", "WEIGHT", "HEALTHY", "ALLOCATED", "READY", "FACTOR", "SOURCE", "PROBE",
             "DRAINS", "WHY ZERO"]]  # fmt: skip
    for wire_entry, entry in zip(tm.spec.entries, entries, strict=True):
        cause = cause_of(entry, table)
        probe = "-"
        if wire_entry.probe is not None:
            probe = wire_entry.probe.result + (" gated" if wire_entry.probe.gated else "")
        rows.append(
            [
                entry.cluster,
                str(entry.weight),
                str(entry.healthy).lower(),
                str(entry.allocated),
                str(entry.ready),
                wire_entry.capacity.factor if wire_entry.capacity and wire_entry.capacity.factor
                else "1",
                entry.source.value,
                probe,
                ",".join(entry.drain_refs) or "-",
                cause.value if cause is not None else "-",
            ]
        )  # fmt: skip
    if entries:
        lines += ["  " + line for line in table_text(rows).splitlines()]
    else:
        lines.append("  <none>")
    lines.append("Conditions:")
    crow = [["TYPE", "STATUS", "REASON", "MESSAGE"]]
    crow += [[c.type, c.status, c.reason, c.message] for c in s.conditions]
    lines += ["  " + line for line in table_text(crow).splitlines()]
    return "\n".join(lines) + "\n"
