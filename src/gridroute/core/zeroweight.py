"""Why a cluster's weight is zero: the seed's table, as data (first matching row wins).

`RULES` is the one source of truth: `cause_of` walks it to explain an entry, and the
"Why a cluster's weight is zero" table in docs/trafficmap.md is `markdown_table()`'s
output (a test checks the two agree), so the docs cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from gridroute.core.trafficmap import CapacitySource, Entry, Table


class ZeroCause(Enum):
    NOT_READY = "NotReady"
    NOT_ALLOCATED = "NotAllocated"
    REPORTED_NO_CAPACITY = "ReportedNoCapacity"
    PROBE_GATED = "ProbeGated"
    DRAINED = "Drained"


@dataclass(frozen=True, slots=True)
class Rule:
    cause: ZeroCause
    shows: str
    """What the entry shows, in the words of its fields."""
    why: str
    fix: str
    matches: Callable[[Entry, Table], bool]


RULES: tuple[Rule, ...] = (
    Rule(
        ZeroCause.NOT_READY,
        "`capacity.ready` is absent (0)",
        "No replica of the service is ready in the cluster; `healthy` is false.",
        "Look at the cluster's replicas (the operator's /status, or its pods).",
        lambda e, t: e.ready <= 0,
    ),
    Rule(
        ZeroCause.NOT_ALLOCATED,
        "`capacity.allocated` is absent (0), `capacity.source` is ControlPlane",
        "The control plane admitted no replicas of the service there.",
        "Raise the home's `allocated` in control.yaml (placement).",
        lambda e, t: e.allocated == 0 and e.source is CapacitySource.CONTROL_PLANE,
    ),
    Rule(
        ZeroCause.REPORTED_NO_CAPACITY,
        "`capacity.allocated` is absent (0), `capacity.source` is Endpoint",
        "The cluster's own capacity report says it can serve nothing now.",
        "Read the report (`capacity.reported`); it lifts as soon as capacity returns.",
        lambda e, t: e.allocated == 0 and e.source is CapacitySource.ENDPOINT,
    ),
    Rule(
        ZeroCause.PROBE_GATED,
        "`probe.gated` is true",
        "The routing health probe failed `failureThreshold` times in a row.",
        "Read `probe.message`; the gate re-opens after `successThreshold` passes. When "
        "every home is gated, `allFailedPolicy: Drain` keeps them all at 0 and "
        "PreserveTraffic keeps their capacity weights.",
        lambda e, t: e.probe is not None and e.probe.gated and not e.preserved,
    ),
    Rule(
        ZeroCause.DRAINED,
        "`drainRefs` is not empty",
        "A drain holds the cluster at 0; the other weights stay as they are.",
        "`gridroute traffic undrain CLUSTER` once the maintenance is over.",
        lambda e, t: bool(e.drain_refs),
    ),
)


def cause_of(entry: Entry, table: Table) -> ZeroCause | None:
    """The first row matching a weight-0 entry; None for a positive weight."""
    if entry.weight > 0:
        return None
    for rule in RULES:
        if rule.matches(entry, table):
            return rule.cause
    return None


def markdown_table() -> str:
    """The docs table, rendered from `RULES`."""
    lines = ["| # | The entry shows | Why the weight is 0 | What to do |", "|---|---|---|---|"]
    for n, rule in enumerate(RULES, 1):
        lines.append(f"| {n} | {rule.shows} | {rule.why} | {rule.fix} |")
    return "\n".join(lines) + "\n"
