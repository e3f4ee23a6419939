"""A gateway's demand per model, and the budget at a site that follows it.

Why: past capacity the fair share follows holdings (`core/gateway_load.py`), and
holdings stay where they began: every gateway refills the slots its own requests free.
Four gateways carrying 40/20/20/20 % of the clients each keep a quarter of the slots,
so a client behind the busy one is served half as often (issue 25: Jain 0.91 over
clients at 512). Fairness must hold across the grid, so past capacity each gateway's
slots at a site follow its clients there.

What a gateway measures (`DemandMeter`, one per gateway, beside its fair order):

    in flight   its requests of the model being served (`OwnLoad.models`)
    waiting     its requests of the model holding for a slot (any hold: fair order,
                the admission queue), counted whether or not fair order is on
    away        its refused requests whose Retry-After has not run out: clients that
                are coming back (Little's law: refusals per second times the wait),
                counted for every refusal, fair order or not, overlay-routed or not

    demand(m) = in flight + waiting + away          unmet(m) = waiting + away

What it reports, per candidate it routes to (`report`): for the models that candidate
serves, its demand *beyond what it holds there* and its unmet demand. A site's demand
is then what every gateway holds there plus what each reports beyond it. A gateway that
reports no demand (an older one, or a transport that carries none) counts as demanding
exactly what it holds there, which is what the rule before this one gave it; an old
body decodes with no demand at all, and nothing changes until some gateway reports
unmet demand for a model the site serves.

The budget (`settle`), at the sites where some gateway's demand is unmet:

    room    = min(what gateways hold there + free, room ceiling)
    target  = room * my demand / every gateway's demand there        (>= 1 request)

Within the noise of a sample (summed over those sites) a gateway keeps the fair share's
budget. Past its summed target it stops refilling at the sites where it holds past its
target there; short of it, it takes free room up to its target once that room has
outlasted a sample (its owner did not refill it). Demand is compared per site among the
gateways that route to it for the models it serves, so unmet demand for one model never
shrinks budgets at a site serving only another (a single grid-wide number did, and that
room went idle). Room nobody took for `LIFT_AFTER` samples is refilled by anyone: a
stale or lying peer's demand cannot keep a site's room unused; a peer's report ages out
with its in-flight.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

DEMAND_MARGIN = 1.0
"""Requests a gateway may hold past its target at a site before it yields: the sums
are a poll old, and without a margin a slot would move back and forth on their noise."""
DEMAND_MARGIN_FRACTION = 0.05
"""... or this fraction of its target there, when that is more."""
TOTAL_MARGIN_FRACTION = 0.1
"""Holdings over every contended site may stray this fraction from their target
before slots move (`_slack`) ..."""
NOISE = 0.75
"""... or this many standard deviations of a sample's count (about its square root)."""
RAISE_AFTER = 1
"""Samples free room must outlast before a gateway short of its target takes it past
its fair share (`settle`) ..."""
LIFT_AFTER = 3
"""... and before one past its target may refill it all the same ..."""
LIFT_AFTER_WANTED = LIFT_AFTER + 2
"""... or this many where gateways report wanting the room (`DemandReport.want`): room
yielded while slots move stands free for a sample or two before the gateways that want
it may take it (the newest sample's room is its owners'), and read as a lie after three
it turned following off at three sites for the first 33 s of a run (measured: 4u,
200 ms service, 384 clients, 1,392 overshoots against 718)."""
LIFT_HOLD_S = 30.0
"""... and from then on, for this long: a gateway short of its target takes idle room
after one sample, so room left for three while demand is claimed for it means the
claim is not real (a stale or lying peer); capped again at every freed slot, a gateway
lost about a quarter of a site to such a peer (measured by review: occupancy 7.7 of
10 slots)."""
MAX_AWAY = 4096
"""Refusals remembered per model (the oldest forgotten first): bounds the memory a
storm of refusals can take; past it the count reads `MAX_AWAY`."""


@dataclass(frozen=True, slots=True)
class DemandReport:
    """What one gateway reports beside its in-flight, per candidate key."""

    beyond: Mapping[str, int] = field(default_factory=dict)
    """Its demand for the models the candidate serves, less what it holds there."""
    unmet: Mapping[str, int] = field(default_factory=dict)
    """Its unmet demand (waiting + away) for the models the candidate serves."""
    want: Mapping[str, int] = field(default_factory=dict)
    """How far it held short of its last target there, at most its unmet demand: what
    of the free room there it would fill (`settle` splits free room by it)."""


class DemandMeter:
    """One gateway's waiting and away requests per model (its in-flight is `OwnLoad`'s)."""

    __slots__ = ("_away", "_keyed", "_waiting")

    def __init__(self) -> None:
        self._waiting: dict[str, int] = {}
        self._away: dict[str, list[float]] = {}
        """Per model, a heap of the times refused requests without a key are due back."""
        self._keyed: dict[str, OrderedDict[str, float]] = {}
        """Per model, fairness key -> when its refused request is due back (in order of
        refusal): a key's request arriving again ends its absence at once."""

    def hold(self, model: str) -> None:
        """A request of `model` starts waiting for a slot."""
        self._waiting[model] = self._waiting.get(model, 0) + 1

    def release(self, model: str) -> None:
        """It stopped waiting (admitted, refused, or its client went away)."""
        left = self._waiting.get(model, 0) - 1
        if left > 0:
            self._waiting[model] = left
        else:
            self._waiting.pop(model, None)

    def refused(self, model: str, now: float, retry_after_s: float, key: str = "") -> None:
        """A request of `model` (of fairness key `key`) was refused; its client is away
        until its Retry-After, or (with a key) until its next request arrives."""
        due = now + max(retry_after_s, 0.0)
        if key:
            keyed = self._keyed.setdefault(model, OrderedDict())
            keyed[key] = due
            keyed.move_to_end(key)
            if len(keyed) > MAX_AWAY:
                keyed.popitem(last=False)
            return
        heap = self._away.setdefault(model, [])
        heapq.heappush(heap, due)
        if len(heap) > MAX_AWAY:
            heapq.heappop(heap)

    def arrived(self, model: str, key: str) -> None:
        """A request of `model` and `key` arrived: that key is no longer away (clients
        come back after between half and all of their Retry-After; counted away until it
        ran out, one that came back early was counted twice)."""
        keyed = self._keyed.get(model)
        if keyed is not None and key:
            keyed.pop(key, None)

    def waiting(self, model: str) -> int:
        return self._waiting.get(model, 0)

    def away(self, model: str, now: float) -> int:
        """Refused requests of `model` still within their Retry-After (and, with a key,
        not come back yet)."""
        n = 0
        heap = self._away.get(model)
        if heap is not None:
            while heap and heap[0] <= now:
                heapq.heappop(heap)
            if not heap:
                del self._away[model]
            n += len(heap)
        keyed = self._keyed.get(model)
        if keyed is not None:
            for key in [k for k, due in keyed.items() if due <= now]:
                del keyed[key]
            if not keyed:
                del self._keyed[model]
            n += len(keyed)
        return n

    def unmet(self, model: str, now: float) -> int:
        return self.waiting(model) + self.away(model, now)

    def models(self, now: float) -> set[str]:
        """Models with a waiting or away request now."""
        known = set(self._waiting) | set(self._away) | set(self._keyed)
        return {m for m in known if self.unmet(m, now)}


class Serves(Protocol):
    """What a candidate serves, as `report` needs it (the core's `Candidate` fits)."""

    @property
    def key(self) -> str: ...

    def serves(self, model: str) -> bool: ...


def report(
    candidates: Iterable[Serves],
    held: Mapping[str, int],
    in_flight: Mapping[str, int],
    meter: DemandMeter,
    now: float,
    targets: Mapping[str, float] | None = None,
) -> DemandReport:
    """This gateway's demand per candidate: `held` is its in-flight per candidate,
    `in_flight` per model (`OwnLoad.models`), `targets` its last demand targets
    (`Snapshot.targets`). Candidates with no demand are left out."""
    models = {m for m, n in in_flight.items() if n > 0} | meter.models(now)
    if not models:
        return DemandReport()
    unmet = {m: meter.unmet(m, now) for m in models}
    demand = {m: in_flight.get(m, 0) + unmet[m] for m in models}
    beyond: dict[str, int] = {}
    wanting: dict[str, int] = {}
    want: dict[str, int] = {}
    for cand in candidates:
        served = [m for m in models if cand.serves(m)]
        if not served:
            continue
        extra = sum(demand[m] for m in served) - held.get(cand.key, 0)
        if extra > 0:
            beyond[cand.key] = extra
        short = sum(unmet[m] for m in served)
        if short > 0:
            wanting[cand.key] = short
            target = None if targets is None else targets.get(cand.key)
            if target is not None:
                gap = min(math.ceil(target - held.get(cand.key, 0) - 1e-9), short)
                if gap > 0:
                    want[cand.key] = gap
    return DemandReport(beyond, wanting, want)


def received(counts: Mapping[str, int], demand: DemandReport | None) -> DemandReport:
    """What one gateway's report counts as, where it is summed (operator, NATS board,
    Prometheus reader, simulator).

    A report without demand (an older gateway, or one with `follow_demand: false`)
    demands all it has in flight at every site it holds requests at: the rule before
    gave each gateway what it holds, and its requests elsewhere are its demand for the
    same model too (read as only what it holds at each site, a gateway spread over k
    sites weighed 1/k of one that reports). A report's demand beyond what it holds at a
    candidate is at most all its in-flight plus its unmet demand there: no more can be
    true of it."""
    total = sum(counts.values())
    if demand is None:
        return DemandReport({k: total - v for k, v in counts.items() if total > v}, {})
    beyond = {k: min(v, total + demand.unmet.get(k, 0)) for k, v in demand.beyond.items()}
    want = {k: min(v, demand.unmet.get(k, 0)) for k, v in demand.want.items()}
    return DemandReport(
        {k: v for k, v in beyond.items() if v > 0},
        dict(demand.unmet),
        {k: v for k, v in want.items() if v > 0},
    )


@dataclass(frozen=True, slots=True)
class SiteDemand:
    """Every gateway's demand at one candidate, and this gateway's part of it."""

    @property
    def share(self) -> float:
        return min(self.mine / self.total, 1.0) if self.total > 0 else 1.0

    total: float
    """What every gateway holds there (reported) plus what each reports beyond it."""
    mine: float
    """This gateway's: what it reported holding there plus its own beyond."""
    wanted: float = 0.0
    """Every gateway's reported `want` there (this one's included)."""
    want: float = 0.0
    """This gateway's part of `wanted` (its report of the same round)."""


@dataclass(frozen=True, slots=True)
class Following:
    """One contended site's budget before it follows demand (`settle`)."""

    base: float
    """The fair share's budget: held + free * (its part of the gateways' load)."""
    held: float
    free: float
    room: float
    """What gateways may use there: min(what they hold + free, room ceiling)."""
    share: float
    """This gateway's part of the demand there (`SiteDemand.share`). Not smoothed:
    smoothed over 2-15 s, the targets lagged the holdings and slots swung between
    gateways (measured at 4u, 512 clients: Jain 0.996 unsmoothed, 0.991 at 2 s, 0.980
    at 5 s, 0.942 at 15 s)."""
    idle: int
    """Samples a whole free slot there has outlasted (0: the room is fresh, its owners
    refill it; 1: nobody took it; `LIFT_AFTER`: nobody wants it)."""
    lifted: bool = False
    """Room there went unwanted for `LIFT_AFTER` samples within the last `LIFT_HOLD_S`
    while demand was claimed for it: the claim is not followed there (`settle`)."""
    wanted: float = 0.0
    """Every gateway's reported `want` there (`SiteDemand.wanted`)."""
    want: float = 0.0
    """This gateway's part of it."""

    @property
    def target(self) -> float:
        """This gateway's demand share of the room (at least a request: a cold gateway
        keeps working)."""
        return max(self.room * self.share, min(1.0, self.room))


def _margin(target: float) -> float:
    return max(DEMAND_MARGIN, DEMAND_MARGIN_FRACTION * target)


def settle(sites: Sequence[tuple[int, Following]]) -> list[tuple[int, float, int, bool]]:
    """(index, budget, idle, lift) of every contended site, following demand (the target
    is `Following.target`; `lift`: the caller stops capping there for `LIFT_HOLD_S`).

    The budget is the fair share's (`base`) unless this gateway holds past, or short
    of, its target over all the contended sites together by more than the noise of a
    sample (`_slack`): a gateway whose clients are served as often as the others' keeps
    its slots, wherever they are. Over in total, it does not refill past its target at
    the sites where it holds past it, unless free room there has outlasted `LIFT_AFTER`
    samples lately (nobody wants it: a peer that over-reports its demand cannot keep
    room idle).
    Short in total, it takes free room up to its target once that room has outlasted a
    sample (its owner did not refill it: it is being yielded, or idle). Where gateways
    report what they `want` (their shortfall against their targets, at most their unmet
    demand), such room is split by it instead, whatever the totals, and a gateway
    at its target there does not grow: the room a capped gateway frees reaches the
    gateways short of theirs within a sample, not after their slack is spent.

    Why not sooner, or by more:
    * the free room of the newest sample is its owners' to refill (they just freed it);
      taken at once by gateways short of their targets, it was drawn twice (measured:
      2,938 overshoot at 16 gateways, 200 ms service, 512 clients, against 0);
    * a free share split by demand instead of by holdings drew past the room as well
      (2,806 there), though the shares add up alike: the demand sums are a poll older;
    * holdings judged per site moved slots between sites on noise, each move idling a
      slot for a sample, and a margin under a sample's noise did the same in total
      (goodput 0.989 against 1.000 at 4 equal gateways, 512 clients)."""
    if not sites:
        return []
    held = sum(f.held for _, f in sites)
    target = sum(f.target for _, f in sites)
    slack = _slack(target)
    over, short = held > target + slack, held < target - slack
    out: list[tuple[int, float, int, bool]] = []
    for index, f in sites:
        budget = f.base
        here = f.target
        lift = False
        if over and not f.lifted:
            if f.idle < (LIFT_AFTER_WANTED if f.wanted >= 1.0 else LIFT_AFTER):
                budget = min(budget, here + _margin(here))
            else:
                # The cap is what left this room idle: the demand claimed for it is not
                # real. Only then: room idle while every gateway is short of its target
                # is a grid filling up (a latch on that turned following off for the
                # first 30 s of a run, measured live).
                lift = True
        elif f.wanted >= 1.0 and not f.lifted and f.idle >= LIFT_AFTER_WANTED:
            # Room the gateways reported wanting stood untaken: some want is not real
            # (a peer that lies about it would otherwise idle every room it is split by).
            lift = True
        elif f.wanted >= 1.0 and not f.lifted and f.idle < LIFT_AFTER:
            # Some gateway holds short of its target here and has clients to fill it:
            # room that outlasted a sample is the wanting gateways', split by what each
            # wants, and a gateway at its target keeps what it holds without growing.
            # (Each taking its share of it as well drew the room twice: 1,510
            # overshoots at 4u, 200 ms service, 384 clients; a short gateway's taking
            # it all left the room idle while it was within its slack.)
            if f.want > 0.0 and f.held < here and f.idle >= RAISE_AFTER:
                claim = f.free * min(f.want / f.wanted, 1.0)
                budget = min(here, f.held + claim)
            elif f.held >= here:
                # (One short of its target but wanting none of the room keeps the fair
                # share's budget: capped too, the room idled into the fallback below
                # and overshot more, 941 / 591 against 718 / 418 in the 200 ms world.)
                budget = min(budget, f.held)
        elif short and f.idle >= RAISE_AFTER and f.held < here:
            budget = max(budget, min(here, f.held + f.free))
        out.append((index, budget, f.idle, lift))
    return out


def _slack(target: float) -> float:
    """How far holdings over every contended site may stray from their target before
    slots move: a tenth, or `NOISE` standard deviations of a sample's count (a count of
    n in flight moves by about the square root of n from one sample to the next), or a
    request (measured at 4u, 512 clients, six seeds: goodput at least 0.989 with 0.75
    standard deviations, 0.986 with 1.0 and 1.5; Jain at least 0.99 with each)."""
    if target <= 0.0:
        return DEMAND_MARGIN
    return max(DEMAND_MARGIN, TOTAL_MARGIN_FRACTION * target, NOISE * math.sqrt(target))
