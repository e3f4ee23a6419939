"""GridState: what one gateway has learned about every candidate, refreshed per poll.

`refresh` is the only place state changes: it folds the newest samples into each
candidate's window, ceiling, rho, liveness and fullness, latches per-model shedding,
and returns an immutable `Snapshot` that requests read until the next poll.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from random import Random

from gridroute.core import ceiling as ceil
from gridroute.core.accounting import OwnLoad
from gridroute.core.candidate import Candidate, Health
from gridroute.core.demand import LIFT_HOLD_S, Following, settle
from gridroute.core.gateway_load import ExternalEstimate, GatewayLoad
from gridroute.core.liveness import Live, Liveness, first_seen, step
from gridroute.core.sample import Sample
from gridroute.core.settings import AvailabilitySettings
from gridroute.core.spread import Spread
from gridroute.core.view import ModelPlan, SiteView
from gridroute.core.window import Reading, SampleWindow


@dataclass(slots=True)
class _Tracked:
    """Mutable per-candidate learning state (private to GridState)."""

    window: SampleWindow
    learned: ceil.CeilingState
    liveness: Liveness | None = None
    full_since: float | None = None
    loaded_at: float | None = None
    """Newest sample that carried load. Liveness is judged on it, so readiness-only
    samples (a failed scrape) keep a site neither idle nor live past the window."""
    room_since: float | None = None
    """First of the consecutive samples (up to the newest) that showed a whole free slot."""
    room_last: float | None = None
    """The newest of those samples."""
    room_outlasted: int = 0
    """How many samples after the first of them still showed the free slot."""
    lifted_until: float | None = None
    """Until then demand claimed for this site is not followed (`demand.LIFT_HOLD_S`)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a decision reads, as of `at`. Swapped by reference; never mutated."""

    at: float
    settings: AvailabilitySettings
    views: tuple[SiteView, ...]
    shedding: frozenset[str]
    plans: dict[str, ModelPlan] = field(default_factory=dict)
    spread: Spread | None = None
    """The owning gateway's two-site split carry (`core/spread.py`): gridroute's
    weighted two-site picks keep their shares over the stream, across snapshots."""

    def plan(self, model: str) -> ModelPlan | None:
        """The plan for `model` (built on first use for catch-all candidates); None if unknown."""
        plan = self.plans.get(model)
        if plan is None:
            serving = tuple(v for v in self.views if v.candidate.serves(model))
            if not serving:
                return None
            plan = build_plan(model, serving, self.settings)
            self.plans[model] = plan
        return plan

    def view(self, key: str) -> SiteView | None:
        for v in self.views:
            if v.key == key:
                return v
        return None

    def targets(self) -> dict[str, float]:
        """Candidate key -> this gateway's demand target there, where it follows demand
        (what its next report's `want` is measured against, `core/demand.py`)."""
        return {v.key: v.target for v in self.views if v.target is not None}


def _mean_known(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None and v > 0]
    return sum(known) / len(known) if known else None


def _phase_source(rng: Random | None) -> Random | None:
    """A copy of `rng` for the split's starting phase: drawing it from `rng` itself would
    shift every rounding draw after it."""
    if rng is None:
        return None
    copy = Random()
    copy.setstate(rng.getstate())
    copy.random()  # not the draw `rng` makes next
    return copy


def _apportion(external: float, unreported: Mapping[str, float]) -> dict[str, float]:
    """The grid's external estimate split over the candidates in proportion to what each
    one's poll showed that no gateway reported (each part at most that difference).

    The estimate is smoothed grid-wide (reports lag a poll or two); where it sits is read
    from the newest difference, so a site full from outside ranks as full."""
    positive = {k: v for k, v in unreported.items() if v > 0.0}
    total = sum(positive.values())
    if external <= 0.0 or total <= 0.0:
        return {}
    scale = min(external / total, 1.0)
    return {k: v * scale for k, v in positive.items()}


def build_plan(
    model: str, views: tuple[SiteView, ...], settings: AvailabilitySettings
) -> ModelPlan:
    """Classify a model's candidates once per snapshot."""
    ready = [v for v in views if v.ready]
    healthy = tuple(v for v in ready if v.measured and v.live is Live.LIVE and not v.demoted)
    unmeasured = tuple(v for v in ready if not v.measured and not v.demoted)
    silent = tuple(v for v in ready if v.measured and v.live is not Live.LIVE and not v.demoted)
    demoted = tuple(v for v in ready if v.demoted)
    mean = _mean_known([v.capacity for v in views])
    weights = {v.key: (v.capacity if v.capacity else (mean or 1.0)) for v in views}
    measured_caps = [weights[v.key] for v in views if v.measured]
    if measured_caps and settings.explore_floor > 0:
        lift = settings.explore_floor * max(measured_caps)
        for v in views:
            if v.measured and weights[v.key] < lift:
                weights[v.key] = lift
    refused: list[tuple[str, str]] = []
    for v in views:
        if not v.ready:
            refused.append((v.site, "unready"))
        elif v.demoted:
            refused.append((v.site, "demoted"))
        elif not v.measured:
            refused.append((v.site, "unmeasured"))
        elif v.live is not Live.LIVE:
            refused.append((v.site, "silent"))
    return ModelPlan(
        model=model,
        views=views,
        healthy=healthy,
        healthy_weights=tuple(weights[v.key] for v in healthy),
        unmeasured=unmeasured,
        silent=silent,
        demoted=demoted,
        front=ready[0] if ready else None,
        weights=weights,
        refused=tuple(refused),
    )


class GridState:
    """One gateway's learned view of the grid. Not thread-safe; one owner refreshes it."""

    def __init__(
        self,
        candidates: Sequence[Candidate],
        settings: AvailabilitySettings | None = None,
        models: Iterable[str] = (),
        rng: Random | None = None,
    ) -> None:
        self.candidates = tuple(candidates)
        self.settings = settings or AvailabilitySettings()
        self.models = tuple(models)
        self.rng = rng
        """Rounds each fair-share budget to a whole request per snapshot (see `_rounded`);
        None keeps budgets fractional (exact, for tests of the formula)."""
        self._tracked: dict[str, _Tracked] = {}
        self._shed: set[str] = set()
        self._last: Snapshot | None = None
        self._gateways: GatewayLoad | None = None
        self._external = ExternalEstimate(
            self.settings.external_load_tau_ms / 1000.0,
            self.settings.freshness_window_ms / 1000.0,
        )
        self._spread = Spread(_phase_source(rng))
        self._alone_since: float | None = None
        self.external = 0.0
        """Polled in-flight that no gateway reported (smoothed), as of the last refresh."""
        self._gateways_at = 0.0
        """When `_gateways` was last given: demand older than a freshness window is not
        followed (a read that relays no sums keeps the in-flight, not the demand)."""
        self._external_at: dict[str, float] = {}
        """`external` split over the candidates, as of the last refresh with reports."""

    @property
    def snapshot(self) -> Snapshot | None:
        return self._last

    def targets(self) -> dict[str, float]:
        """The last snapshot's demand targets (`Snapshot.targets`; none before it)."""
        return {} if self._last is None else self._last.targets()

    @property
    def gateways_reporting(self) -> int:
        """Gateways (workers) whose reports reached this one in the last poll, itself
        included; 0 when the operator relays none."""
        return 0 if self._gateways is None else self._gateways.gateways

    def reconfigure(
        self,
        candidates: Sequence[Candidate],
        settings: AvailabilitySettings,
        models: Iterable[str] = (),
    ) -> None:
        """Adopt a new config; learning of candidates that stay is kept."""
        self.candidates = tuple(candidates)
        self.settings = settings
        self.models = tuple(models)
        keys = {c.key for c in self.candidates}
        self._tracked = {k: t for k, t in self._tracked.items() if k in keys}
        self._external.tau_s = settings.external_load_tau_ms / 1000.0
        self._external.window_s = settings.freshness_window_ms / 1000.0
        if not settings.shedding:
            self._shed.clear()

    def refresh(
        self,
        samples: Iterable[Sample],
        rounds: Mapping[str, float | None],
        now: float,
        health: Mapping[str, Health] | None = None,
        own: OwnLoad | None = None,
        gateways: GatewayLoad | None = None,
    ) -> Snapshot:
        """Fold in `samples` and build the snapshot requests will read.

        `rounds[site]` is the judgement time for that site: for a peer, the end of its
        operator's last poll round that tried it; for the local site, the time of this
        read of the operator. A site missing from `rounds` is not judged. `gateways` is
        what every gateway reported in flight (kept until the next one is given); the
        fair share is computed among gateways when it is known.
        """
        if gateways is not None:
            self._gateways = gateways
            self._gateways_at = now
        elif self._gateways is None:
            self.external = 0.0
        s = self.settings
        health = health or {}
        keys = {c.key for c in self.candidates}
        by_key: dict[str, list[Sample]] = {}
        for sample in samples:
            if sample.key in keys:
                by_key.setdefault(sample.key, []).append(sample)
        lookback = s.lookback_ms / 1000.0
        window_s = s.freshness_window_ms / 1000.0
        views: list[SiteView] = []
        pending: list[tuple[Candidate, _Tracked, Reading | None, int]] = []
        for cand in self.candidates:
            tr = self._tracked.get(cand.key)
            if tr is None:
                tr = _Tracked(SampleWindow(cand.key), ceil.CeilingState.empty(now))
                self._tracked[cand.key] = tr
            new = 0
            for smp in sorted(by_key.get(cand.key, ()), key=lambda x: x.at):
                if tr.window.add(smp):
                    newest = tr.window.newest
                    assert newest is not None
                    if newest.in_flight is None:
                        continue  # readiness only: no load to learn or to smooth
                    new += 1
                    tr.loaded_at = newest.at
                    tr.learned = ceil.teach(tr.learned, newest, s)
            tr.window.prune(lookback)
            reading = tr.window.reading(s.queue_full)
            pending.append((cand, tr, reading, new))
        own_total = 0.0
        polled_total = 0.0
        polled: dict[str, float] = {}
        own_at: dict[str, float] = {}
        for cand, _tr, reading, _new in pending:
            if reading is not None and reading.latest_in_flight is not None:
                polled_total += reading.latest_in_flight
                polled[cand.key] = reading.latest_in_flight
                if own is not None and reading.loaded_at is not None:
                    own_at[cand.key] = own.at(cand.key, reading.loaded_at)
                    own_total += own_at[cand.key]
        unreported: dict[str, float] = {}
        if gateways is not None:
            if gateways.gateways > 1:
                self._alone_since = None
            elif self._alone_since is None:
                self._alone_since = now
            if self._alone_since is not None and now - self._alone_since >= window_s:
                # The only gateway for a whole window (no other's report can still be on
                # its way): whatever it did not send is external, exactly and at once.
                self.external = self._external.reset(polled_total - own_total, now)
                unreported = {k: v - own_at.get(k, 0.0) for k, v in polled.items()}
            else:
                # Only where the poll carried load: a gateway's requests at a site whose
                # scrape fails are in no polled total, and subtracted from the others'
                # they read that site's share of outside load as this gateway's own.
                reported = gateways.total(polled)
                self.external = self._external.update(polled_total - reported, now)
                unreported = {k: v - gateways.in_flight.get(k, 0.0) for k, v in polled.items()}
        if gateways is not None:
            self._external_at = _apportion(self.external, unreported)
        # A refresh without reports (health or config changes, a poll whose reply lacked
        # the sums) keeps the last split: dropped, a site full from outside ranked empty.
        external_at = self._external_at if self._gateways is not None else {}
        # This gateway's part of the polled load that some gateway sent (module
        # gateway_load): load from outside the gateways neither herds nor shrinks a share.
        ours = polled_total - self.external
        if ours > 0:
            share = max(min(own_total / ours, 1.0), s.fair_share_floor)
        elif self._gateways is not None and self._gateways.gateways > 1:
            # Only external load, or an idle grid: nothing measures a share yet, so split
            # the room among the gateways that report (an idle grid read as share 1 by
            # every gateway at once was most of the overshoot past capacity).
            share = 1.0 / self._gateways.gateways
        else:
            share = 1.0
        following: list[tuple[int, Following]] = []
        for index, (cand, tr, reading, new) in enumerate(pending):
            view = self._view(
                cand,
                index,
                tr,
                reading,
                new,
                rounds,
                now,
                health,
                own,
                share,
                window_s,
                following,
            )
            outside = external_at.get(cand.key, 0.0)
            if outside > 0.0 and view.loaded:
                view = replace(view, external=outside)
            views.append(view)
        targets = {index: f.target for index, f in following}
        for index, budget, idle, lift in settle(following):
            if lift:
                pending[index][1].lifted_until = now + LIFT_HOLD_S
            whole = self._whole(budget, idle)
            views[index] = replace(
                views[index],
                budget=whole,
                budget_up=whole,
                target=targets[index],
                keep_cap=math.ceil(targets[index] - 1e-9),  # 2.0000000001 is 2
            )
        if own is not None:
            own.mark()
        snap_views = tuple(views)
        self._latch(snap_views, now)
        snapshot = Snapshot(now, s, snap_views, frozenset(self._shed), spread=self._spread)
        for model in self.models:
            snapshot.plan(model)
        self._last = snapshot
        return snapshot

    def _view(
        self,
        cand: Candidate,
        index: int,
        tr: _Tracked,
        reading: Reading | None,
        new: int,
        rounds: Mapping[str, float | None],
        now: float,
        health: Mapping[str, Health],
        own: OwnLoad | None,
        share: float,
        window_s: float,
        following: list[tuple[int, Following]],
    ) -> SiteView:
        s = self.settings
        hv = health.get(cand.key, Health.UNKNOWN)
        if reading is None:
            return SiteView(  # unmeasured: publishes no load
                candidate=cand,
                index=index,
                measured=False,
                ready=True,
                live=None,
                health=hv,
                capacity=None,
                soft=None,
                hard=None,
                ceiling=s.ceiling_floor,
                rho=None,
                queued=None,
                room_ceiling=s.ceiling_floor,
                full=False,
                relieved=True,
                sampled_at=None,
                base=0.0,
                own_at_sample=0,
                budget=0.0,
            )
        judge = rounds.get(cand.site)
        # Judged on the newest sample with load: a site whose scrapes fail goes silent one
        # window after its last load, as the seed says, not after the operator's stale period.
        heard = tr.loaded_at if tr.loaded_at is not None else reading.sampled_at
        if tr.liveness is None:
            tr.liveness = first_seen(heard, judge, window_s)
        else:
            tr.liveness = step(tr.liveness, heard, judge, window_s)
        learned = tr.learned
        learning = reading.generation is not None and learned.generation == reading.generation
        soft = learned.soft if learning else None
        hard = learned.hard if learning else None
        ceiling = ceil.effective_ceiling(soft, hard, reading.capacity, s.ceiling_floor)
        if new or learned.rho is None:
            tr.learned = ceil.smooth(learned, reading, new, ceiling, s)
        rho = tr.learned.rho
        # Fullness: a sample within room_after_ms of the newest shows work waiting with
        # in-flight at or over the ceiling; "full" once that has held for full_after_ms.
        recent = tr.window.reading(
            s.queue_full, since=reading.sampled_at - s.room_after_ms / 1000.0
        )
        congested = (
            recent is not None
            and recent.congested_in_flight is not None
            and recent.congested_in_flight >= ceiling
        )
        if not congested:
            tr.full_since = None
        elif tr.full_since is None:
            tr.full_since = now
        full = tr.full_since is not None and now - tr.full_since >= s.full_after_ms / 1000.0
        relieved = not congested
        latest = reading.latest_in_flight
        loaded_at = reading.loaded_at
        own_s = own.at(cand.key, loaded_at) if own is not None and loaded_at is not None else 0
        budget_up = -1.0  # the same as `budget` unless granted below
        kept = -1
        if latest is None:
            # Missing is unknown, never zero: no room, no rho, nothing to borrow.
            room_ceiling = ceiling
            base = 0.0
            free = 0.0
            budget = 0.0
            rho = None
        else:
            room_ceiling = ceil.kv_bounded(ceiling, latest, reading.latest_kv_usage, s.kv_full)
            base = max(latest - own_s, 0.0)
            # A request this gateway counts but the site did not at the sample (its answer
            # in transit, or its send) is not free room: counting it as both held and
            # free let a gateway that keeps waiters admit one past the ceiling.
            free = max(room_ceiling - max(latest, own_s), 0.0)
            # Over-full at the sample: keep only this gateway's proportional part of the
            # ceiling, so its queued requests finishing do not read as room to refill.
            over = latest > room_ceiling
            held = room_ceiling * own_s / latest if over else float(own_s)
            budget = held + free * share
            queue = s.max_queue_ms > 0 and not s.shedding
            if queue and own is not None and loaded_at is not None and not over:
                # What it held here since the sample: its own to refill (`SiteView.kept`).
                kept = own.most_since(cand.key, loaded_at)
            idle = self._idle(tr, free, over, loaded_at)
            known = self._gateways
            demand = None
            if known is not None and s.follow_demand and now - self._gateways_at <= window_s:
                demand = known.site_demand(cand.key, own_s)
            if known is not None and demand is not None:
                # Past capacity the budget follows demand (core/demand.py): settled in
                # `refresh`, once every site's target is known; kept fractional here.
                reported = max(known.in_flight.get(cand.key, 0.0), float(own_s))
                room = min(reported + free, room_ceiling)
                part = demand.share
                lifted = tr.lifted_until is not None and now < tr.lifted_until
                follow = Following(
                    budget,
                    held,
                    free,
                    room,
                    part,
                    idle,
                    lifted,
                    demand.wanted,
                    demand.want,
                )
                following.append((index, follow))
            else:
                # The whole budget, and the fraction granted for this snapshot (`_whole`),
                # which a request takes only where no site of its tier has room within
                # the whole budgets (`select.decide`).
                sent_anyway = not s.shedding and s.max_queue_ms <= 0
                lenient = over and sent_anyway
                budget_up = self._rounded(budget) if lenient else self._whole(budget, idle)
                budget = self._whole(budget, 0)
        return SiteView(
            candidate=cand,
            index=index,
            measured=True,
            ready=not reading.unready,
            live=tr.liveness.state,
            health=hv,
            capacity=reading.capacity,
            soft=soft,
            hard=hard,
            ceiling=ceiling,
            rho=rho,
            queued=reading.queued,
            room_ceiling=room_ceiling,
            full=full,
            relieved=relieved,
            sampled_at=reading.sampled_at if loaded_at is None else loaded_at,
            base=base,
            own_at_sample=own_s,
            budget=budget,
            budget_up=budget_up,
            share=share,
            kept=kept,
            is_queued=reading.queued is not None and reading.queued > 0.0,
            loaded=latest is not None,
        )

    def _idle(self, tr: _Tracked, free: float, over: bool, loaded_at: float | None) -> int:
        """How many samples a whole free slot there has outlasted (0: fresh or none; see
        `_whole`)."""
        if over or free < 1.0 or loaded_at is None:
            tr.room_since = tr.room_last = None
            tr.room_outlasted = 0
        elif tr.room_since is None or loaded_at < tr.room_since:
            tr.room_since = tr.room_last = loaded_at
            tr.room_outlasted = 0
        elif tr.room_last is not None and loaded_at > tr.room_last:
            tr.room_last = loaded_at
            tr.room_outlasted += 1
        return tr.room_outlasted

    def _whole(self, budget: float, idle: int) -> float:
        """The budget in whole requests: rounded (`_rounded`) when the site's free room is
        idle (`_idle`), floored when it is fresh or the site is over-full.

        Rounding up grants a fraction of room that every gateway sharing the site may be
        granted at the same time. That fills room no gateway uses (a fraction per
        gateway and site, idle for good if floored), but room that only the newest
        sample shows is being refilled already, by the gateways whose requests just
        finished; rounded up there as well, it was overshot whenever more gateways drew
        an extra request than the room held, and in fair order every gateway has waiters
        that take its extra request at once (measured: 929 overshoots at 8 gateways with
        512 clients, a request queued at a site for most of a run at 4). So a fraction is
        granted only once a whole free slot has outlasted a sample (it is idle), and an
        over-full site's proportional part is floored, so the queue there drains.

        Outside the demand-following path a fraction granted is `SiteView.budget_up`,
        beside the whole `budget`, and a request takes it only where no site of its
        tier has room within the whole budgets (`select.decide`). A fraction rounded up
        is room that every gateway sharing the site may be granted at once, so it is
        worth its collisions only to a gateway the floors hold back: one with whole room
        left only adds the chance that two gateways take the site's last slot together.
        Measured: a 1-slot site beside 108 free slots, shared by 7 gateways with 18
        clients, was overshot 6 times a run (own-load world 43 of
        `bench/bench_differential.py`: 818 requests against the seed rule's 828; 828 and
        0 overshoot now, at every seed tried). Past capacity the floors hold every
        gateway back and the fractions are taken, as before.

        The floor at an over-full site drains its queue only where the gateway keeps
        the request it refuses (an admission queue, or shedding). Without either, the
        refused request is sent anyway, borrowed from other gateways' shares on
        poll-old room or sent to the overflow tiers; the floors of every gateway sharing
        the site then only idled up to a slot each there for a poll. So there `_view`
        grants the proportional part with `_rounded`, and a request takes it before it
        borrows: it is the gateway's own part of the ceiling, and granted so by every
        gateway the parts hold the site at its ceiling in expectation (measured,
        outside-load world 18 of `bench/bench_differential.py`, 8 gateways, 114 clients
        for 105 free slots: 4,502 requests and 462 overshoots before; 4,785 and 388 over
        8 seeds after; borrowing first, 4,584 and 594; the ideal is 4,725)."""
        if self.rng is None:
            return budget
        return self._rounded(budget) if idle > 0 else float(math.floor(budget))

    def _rounded(self, budget: float) -> float:
        """A budget of whole requests: its fraction granted with that probability.

        Room is `mine + 1 <= budget`, so a fractional budget is floored by every gateway
        alike: with 8 gateways each sharing a few free slots, most of the fractions (up
        to a request per gateway and site) stayed idle (measured: 5 % of the slots past
        capacity). Rounded up with the probability of its fraction, once per snapshot,
        the gateways' budgets add up to the free room in expectation, with no call
        between them."""
        if self.rng is None:
            return budget
        whole = math.floor(budget)
        return whole + (1.0 if self.rng.random() < budget - whole else 0.0)

    def _latch(self, views: tuple[SiteView, ...], now: float) -> None:
        """Per-model shedding: the seed's time latches plus the PR's rho hysteresis."""
        s = self.settings
        if not s.shedding:
            self._shed.clear()
            return
        models = set(self.models) | set(self._shed)
        for model in models:
            healthy = [
                v
                for v in views
                if v.candidate.serves(model)
                and v.ready
                and v.measured
                and v.live is Live.LIVE
                and not v.demoted
            ]
            judgeable = bool(healthy) and all(
                v.queued is not None and v.rho is not None for v in healthy
            )
            if not judgeable:
                self._shed.discard(model)
                continue
            rhos = [v.rho for v in healthy if v.rho is not None]
            if model in self._shed:
                leave = any(v.relieved for v in healthy) or min(rhos) < s.route_below_rho
                if leave:
                    self._shed.discard(model)
            elif all(v.full for v in healthy) and min(rhos) > s.shed_above_rho:
                self._shed.add(model)
