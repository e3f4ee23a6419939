"""Whose load is it: the in-flight every gateway reports, and a gateway's fair share of it.

A gateway's fair share of a site's free room exists so that several gateways reading the
same poll-old sample do not all fill the same room (herding). It must be computed among
gateways: load that no gateway sent (batch jobs, direct clients, other routers) takes
room, but it does not herd, and counting it in the share's denominator starves a lone
gateway (issue 11: "this gateway carries 0 of the polled load" read as a 0.05 share).

So every gateway reports its own per-candidate in-flight to its local operator on the
poll it already makes (no new call, nothing on the request path), and the operators
relay each site's sum beside its rows. What was polled but no gateway reported is
external; the share is taken among the rest:

    share = own at the samples / (polled - external)        (>= fair_share_floor)

`external` is the smoothed difference polled - reported (`ExternalEstimate`): reports
from other sites lag a poll or two, and an unsmoothed difference read that lag as
external load and let every gateway claim too much at once (measured: 14-155
overshoot at 4 gateways, 256 clients, against 0). A gateway that has been the only
one reporting for a whole freshness window has nothing lagging behind: everything it
did not send is external, at once, and its share is 1 (the seed's rule on counted
load). Without reports (an operator that relays none) external is 0: the share is
this gateway's part of all polled load.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gridroute.core.demand import DemandReport, SiteDemand


@dataclass(frozen=True, slots=True)
class GatewayLoad:
    """The gateways' reported in-flight, as one gateway read it in one poll."""

    in_flight: Mapping[str, float] = field(default_factory=dict)
    """Candidate key -> sum over every reporting gateway (this one included)."""
    gateways: int = 0
    """Gateways whose reports are in `in_flight` (at least 1 when this one reported)."""
    own: Mapping[str, int] = field(default_factory=dict)
    """What this gateway reported in the same round: its part of `in_flight`."""
    demand: Mapping[str, float] = field(default_factory=dict)
    """Candidate key -> every reporting gateway's demand beyond what it holds there
    (`core/demand.py`; a gateway that reports none demands what it holds)."""
    unmet: Mapping[str, float] = field(default_factory=dict)
    """Candidate key -> every reporting gateway's unmet demand for what it serves."""
    mine: DemandReport | None = None
    """This gateway's demand report of the same round (None: it reported none)."""
    want: Mapping[str, float] = field(default_factory=dict)
    """Candidate key -> every reporting gateway's `want` there (`DemandReport.want`;
    empty where the transport or the operator carries none)."""

    def site_demand(self, key: str, held: float) -> SiteDemand | None:
        """Demand at `key` where some gateway's is unmet; None where none is (or no
        demand was reported): the budget keeps the share's rule there. `held` is what
        this gateway holds there now (its report may be a poll old)."""
        if self.mine is None or self.unmet.get(key, 0.0) < 1.0:
            return None
        total = self.in_flight.get(key, 0.0) + self.demand.get(key, 0.0)
        mine = self.own.get(key, 0) + self.mine.beyond.get(key, 0)
        want = float(self.mine.want.get(key, 0))
        wanted = self.want.get(key, 0.0)
        if wanted < want:
            # Its own want is not in the sums (a transport or an operator that carries
            # none): nobody's is known, so free room is not split by it.
            want = wanted = 0.0
        return SiteDemand(max(total, float(mine), held), max(float(mine), held), wanted, want)

    def total(self, keys: Iterable[str]) -> float:
        """All gateways' reported in-flight to `keys` (this gateway's report included)."""
        return sum(self.in_flight.get(k, 0.0) for k in keys)


class ExternalEstimate:
    """Polled in-flight that no gateway reported, smoothed over `tau_s`, and believed
    at once where the difference has held still for a whole window.

    Reports from other sites are a poll or two old, so right after load rises the raw
    difference (polled - reported) is briefly positive even with no external load; one
    refresh then moves the smoothed estimate by only `dt / tau_s` of it. But a report is
    never older than the freshness window: a difference that stayed between `lo` and `hi`
    for a whole window is not lag, so the estimate is kept within [lo, hi]. A batch job
    that starts beside idle gateways is then learned within one window, not a few
    `tau_s` (issue 23: four workers read a site 20/24 full from outside as 7 of 44 two
    seconds in, and sent it new requests while two sites had most of their room free).
    """

    __slots__ = ("at", "history", "tau_s", "value", "window_s")

    def __init__(self, tau_s: float, window_s: float = 0.0) -> None:
        self.tau_s = tau_s
        self.window_s = window_s
        """How long a report may lag behind the poll it is subtracted from; 0 keeps the
        estimate purely smoothed."""
        self.value: float | None = None
        self.at: float | None = None
        self.history: deque[tuple[float, float]] = deque()
        """(time, raw difference) over the last window, and the one just before it."""

    def update(self, raw: float, now: float) -> float:
        """Fold in one refresh's difference; the estimate (never below 0)."""
        if self.value is None or self.at is None:
            self.value = raw  # the first difference: nothing has moved since
        else:
            dt = max(now - self.at, 0.0)
            self.value += (raw - self.value) * (1.0 - math.exp(-dt / self.tau_s))
        self.at = now
        bounds = self._held(raw, now)
        if bounds is not None:
            lo, hi = bounds
            self.value = min(max(self.value, lo), hi)
        return max(self.value, 0.0)

    def reset(self, raw: float, now: float) -> float:
        """Take `raw` as exact (nothing lags behind it); the estimate (never below 0)."""
        self.value, self.at = raw, now
        self._held(raw, now)
        return max(raw, 0.0)

    def _held(self, raw: float, now: float) -> tuple[float, float] | None:
        """The range the difference stayed in over the last whole window, or None while
        the differences seen do not yet cover one."""
        if self.window_s <= 0.0:
            return None
        h = self.history
        h.append((now, raw))
        edge = now - self.window_s
        while len(h) >= 2 and h[1][0] <= edge:
            h.popleft()
        if h[0][0] > edge:
            return None
        values = [v for _, v in h]
        return min(values), max(values)


Sums = (
    tuple[int, Mapping[str, float]]
    | tuple[int, Mapping[str, float], Mapping[str, float], Mapping[str, float]]
    | tuple[int, Mapping[str, float], Mapping[str, float], Mapping[str, float], Mapping[str, float]]
)
"""One site's gateway reports summed: (gateways, key -> in-flight[, key -> demand beyond,
key -> unmet[, key -> want]]); the later ones are absent where the transport (or an
older operator) carries none."""


def add_into(total: dict[str, float], counts: Mapping[str, float]) -> None:
    """`total[key] += counts[key]`, for every key: the sums every transport makes."""
    for key, value in counts.items():
        total[key] = total.get(key, 0.0) + value


@dataclass(slots=True)
class ReportSums:
    """Gateways' reports summed per candidate, as every transport sums them (operator,
    NATS board, Prometheus reader, simulator): in flight, demand beyond it, unmet."""

    in_flight: dict[str, float] = field(default_factory=dict)
    demand: dict[str, float] = field(default_factory=dict)
    unmet: dict[str, float] = field(default_factory=dict)
    gateways: int = 0
    want: dict[str, float] = field(default_factory=dict)

    def add(self, counts: Mapping[str, float], demand: DemandReport) -> None:
        """One gateway's report (its demand as `core.demand.received` counts it)."""
        self.gateways += 1
        add_into(self.in_flight, counts)
        add_into(self.demand, demand.beyond)
        add_into(self.unmet, demand.unmet)
        add_into(self.want, demand.want)


def combine(
    sites: Mapping[str, Sums], own: Mapping[str, int], mine: DemandReport | None = None
) -> GatewayLoad:
    """One `GatewayLoad` from per-site sums, as relayed by the operators, and this
    gateway's own report (`own` in flight, `mine` its demand)."""
    total: dict[str, float] = {}
    demand: dict[str, float] = {}
    unmet: dict[str, float] = {}
    want: dict[str, float] = {}
    count = 0
    for sums in sites.values():
        count += sums[0]
        add_into(total, sums[1])
        if len(sums) >= 4:
            add_into(demand, sums[2])
            add_into(unmet, sums[3])
        if len(sums) == 5:
            add_into(want, sums[4])
    return GatewayLoad(total, count, dict(own), demand, unmet, mine, want)
