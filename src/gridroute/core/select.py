"""The per-request pick: which candidate serves this request, or why none does.

Order of rules (site-selection.txt, "Site choice"):

1. A model latched as shed answers 429 (policy `saturation`); under `gridroute` a shed
   model still routes a request to a site where this gateway has room (admission).
2. Pressure tiers among healthy candidates (ready, live, measured, not demoted):
   queue-free with room, queued with room, not marked full, every healthy one.
   Affinity narrows only within the chosen tier.
3. In a tier with room and fresh rho everywhere: >= 3 sites, two distinct draws by
   capacity and the lower rho wins (`pressure_p2c`); 2 sites, capacity / (1 + rho) with
   each share clamped to 10-90 % (`pressure_weighted`); 1 site (`single`). Missing rho:
   capacity draw (`capacity`). gridroute: past this gateway's fair share, a site that
   still has room by the estimate is borrowed (`borrow`). Overflow tiers keep the sites
   tied on the least queue and draw by capacity (`queue_tie` for "not full", `saturated`
   for "all healthy").
4. Nothing healthy: live unmeasured candidates, then silent ones take it (`fallback`);
   then demoted ones (`last_resort`); then the front ready candidate (`last_resort`).

Policies: `first` takes the front healthy candidate (the ranked-first path of the seed
when nothing ranks); `saturation` is the seed PR's rule on reported rho; `gridroute`
reads rho counted from this gateway's own in-flight (local accounting), admits by its
fair share of each site's free room, and can hold requests in an admission queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from random import Random

from gridroute.core.gridstate import Snapshot
from gridroute.core.liveness import Live
from gridroute.core.prefix import PrefixOutcome, PrefixRequest
from gridroute.core.settings import AvailabilitySettings
from gridroute.core.spread import Spread
from gridroute.core.view import ModelPlan, SiteView

TWO_SITE_SHARE = (0.1, 0.9)
RETRY_AFTER_S = (3, 4, 5, 6, 7)


class Policy(StrEnum):
    FIRST = "first"
    SATURATION = "saturation"
    GRIDROUTE = "gridroute"


class Outcome(StrEnum):
    ROUTE = "route"
    SHED = "shed"
    """429 rate_limit_exceeded / capacity_exhausted, with Retry-After."""
    HOLD = "hold"
    """gridroute admission queue: wait for room, then decide again."""
    NO_SITE = "no_site"
    """503 no_healthy_site: the model is known but no candidate is ready."""
    UNKNOWN_MODEL = "unknown_model"
    """404 model_not_found."""


class Path(StrEnum):
    """Which arm chose (label values of grid_route_selections_total{path})."""

    PRESSURE_P2C = "pressure_p2c"
    PRESSURE_WEIGHTED = "pressure_weighted"
    SINGLE = "single"
    CAPACITY = "capacity"
    QUEUE_TIE = "queue_tie"
    SATURATED = "saturated"
    AFFINITY = "affinity"
    PREFIX = "prefix"
    """Prefix affinity: the site holding the longest cached prefix, in the selected tier."""
    BORROW = "borrow"
    """gridroute: this gateway's fair share is used up, the site has room by the estimate."""
    FIRST = "first"
    OVERLAY = "overlay"
    """The routing overlay's best viable group and its picker chose
    (`core/overlay_request.py`; which group and step: grid_route_overlay_picks_total)."""
    FALLBACK = "fallback"
    LAST_RESORT = "last_resort"
    SHED = "shed"
    HOLD = "hold"
    NONE = "none"


class Reason(StrEnum):
    """Why a candidate was not used (label values of grid_route_decisions_total{reason})."""

    UNREADY = "unready"
    SILENT = "silent"
    UNMEASURED = "unmeasured"
    DEMOTED = "demoted"
    FULL = "full"
    SHED = "shed"


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    path: Path
    view: SiteView | None = None
    refused: tuple[tuple[str, str], ...] = ()
    """(site, reason) for candidates not used and why; bounded label values."""
    retry_after_s: int | None = None
    rho: float | None = None
    """The rho the pick compared (counted under gridroute, reported otherwise)."""

    @property
    def key(self) -> str | None:
        return None if self.view is None else self.view.key


def _draw(views: Sequence[SiteView], weights: Sequence[float], rng: Random, skip: int = -1) -> int:
    """Index of a capacity-weighted draw over `views`, never `skip`."""
    total = 0.0
    for i, w in enumerate(weights):
        if i != skip:
            total += w
    if total <= 0.0:
        choices = [i for i in range(len(views)) if i != skip]
        return choices[int(rng.random() * len(choices))]
    x = rng.random() * total
    last = -1
    for i, w in enumerate(weights):
        if i == skip:
            continue
        last = i
        x -= w
        if x < 0.0:
            return i
    return last


def two_site_share(weight_a: float, rho_a: float, weight_b: float, rho_b: float) -> float:
    """The seed's split of two sites: the first's part, capacity / (1 + rho) each,
    clamped to `TWO_SITE_SHARE` (also what `sim/compare.py` holds gridroute's shares
    to)."""
    a = weight_a / (1.0 + rho_a)
    b = weight_b / (1.0 + rho_b)
    share = 0.5 if a + b <= 0.0 else a / (a + b)
    lo, hi = TWO_SITE_SHARE
    return min(max(share, lo), hi)


def _pick_pressure(
    views: Sequence[SiteView],
    weights: Sequence[float],
    rhos: Sequence[float],
    rng: Random,
    spread: Spread | None = None,
    model: str = "",
) -> tuple[int, Path]:
    n = len(views)
    if n == 1:
        return 0, Path.SINGLE
    if n == 2:
        share = two_site_share(weights[0], rhos[0], weights[1], rhos[1])
        if spread is not None:  # gridroute: the same shares, kept over the stream
            first = spread.first((model, views[0].key, views[1].key), share)
            return (0 if first else 1), Path.PRESSURE_WEIGHTED
        return (0 if rng.random() < share else 1), Path.PRESSURE_WEIGHTED
    i = _draw(views, weights, rng)
    j = _draw(views, weights, rng, skip=i)
    return (j if rhos[j] < rhos[i] else i), Path.PRESSURE_P2C


NARROWED_DRAWS = 8
"""Tries at the seed's pair draw before `_narrowed_pair` gives the pick back."""

BORROW_MARGIN = 0.25
"""How much fuller (in rho) than the seed's pick the one site left within this gateway's
budget must be before the pick borrows instead. Near-equal rhos are the fair share at
work (8 gateways at 80 % of capacity: borrowing on any margin overshot 9 times where
the budgets alone overshot none); a site 20/24 full from outside beside ones half empty
is not (issue 23's first world)."""


def _narrowed_pair(
    healthy: Sequence[SiteView],
    weights: Sequence[float],
    rhos: Sequence[float | None],
    seed: list[int],
    tier: list[int],
    rng: Random,
) -> tuple[int, int]:
    """The seed's power of two choices over its whole tier (`seed`, three sites or more
    with room), kept to the sites where this gateway still has budget (`tier`).

    Fair-share budgets narrow the seed's tier; two sites left are not the seed's
    two-site world, and its 10-90 % clamp there sent a site nearly full from outside a
    tenth of a worker's picks whenever its budget at one free site ran out (issue 23,
    live: 7-8 of 384 requests). Drawn as the seed draws, a pair's lower rho wins, and a
    winner outside the budget is drawn again; the pick is thereby the seed's, given the
    budget. Returns (the pick inside `tier` or -1 when no draw landed there, the last
    winner drawn or -1 when a rho is unknown)."""
    views = [healthy[i] for i in seed]
    w = [weights[i] for i in seed]
    r = [rhos[i] for i in seed]
    if any(x is None for x in r):
        return -1, -1
    inside = set(tier)
    k = -1
    for _ in range(NARROWED_DRAWS):
        i = _draw(views, w, rng)
        j = _draw(views, w, rng, skip=i)
        ri, rj = r[i], r[j]
        assert ri is not None and rj is not None
        k = seed[j if rj < ri else i]
        if k in inside:
            return k, k
    return -1, k


def _queue_tie(views: Sequence[SiteView], weights: Sequence[float], rng: Random) -> int:
    """Keep the sites tied on the least queue depth, then draw by capacity."""
    best = min((v.queued if v.queued is not None else float("inf")) for v in views)
    idx = [
        i
        for i, v in enumerate(views)
        if (v.queued if v.queued is not None else float("inf")) == best
    ]
    if len(idx) == 1:
        return idx[0]
    return idx[_draw([views[i] for i in idx], [weights[i] for i in idx], rng)]


def retry_after_s(rng: Random, s: AvailabilitySettings | None = None) -> int:
    """A Retry-After for a refusal, spread over `RETRY_AFTER_S` (or, given settings, over
    `retry_after_min_s`..`retry_after_max_s`) so retries do not align."""
    if s is None:
        return RETRY_AFTER_S[int(rng.random() * len(RETRY_AFTER_S))]
    lo, hi = s.retry_after_min_s, s.retry_after_max_s
    return lo + int(rng.random() * (hi - lo + 1))


def _fallthrough(
    plan: ModelPlan, rng: Random, refused: tuple[tuple[str, str], ...], front_only: bool
) -> Decision:
    """Nothing healthy: unmeasured, then silent (fallback), demoted, front (last resort).

    `front_only` (policy `first`) takes the front of a group instead of a capacity draw.
    """
    for group, path in (
        (plan.unmeasured, Path.FALLBACK),
        (plan.silent, Path.FALLBACK),
    ):
        if group:
            if front_only:
                return Decision(Outcome.ROUTE, path, group[0], refused)
            w = [plan.weights[v.key] for v in group]
            return Decision(Outcome.ROUTE, path, group[_draw(group, w, rng)], refused)
    if plan.demoted:
        # Demoted sites whose signals are live are a last resort by capacity; when signals
        # and health are down everywhere the seed tries the front candidate.
        heard = [v for v in plan.demoted if v.measured and v.live is Live.LIVE]
        if heard and not front_only:
            w = [plan.weights[v.key] for v in heard]
            return Decision(Outcome.ROUTE, Path.LAST_RESORT, heard[_draw(heard, w, rng)], refused)
        front = min(heard or plan.demoted, key=lambda v: v.index)
        return Decision(Outcome.ROUTE, Path.LAST_RESORT, front, refused)
    if plan.front is not None:
        return Decision(Outcome.ROUTE, Path.LAST_RESORT, plan.front, refused)
    return Decision(Outcome.NO_SITE, Path.NONE, None, refused, retry_after_s(rng))


def decide(
    snapshot: Snapshot,
    model: str,
    rng: Random,
    policy: Policy = Policy.GRIDROUTE,
    own: Mapping[str, int] | None = None,
    affinity: str | None = None,
    can_hold: bool = True,
    exclude: frozenset[str] = frozenset(),
    prefix: PrefixRequest | None = None,
    borrow_by_pairs: bool = True,
    peaks: Mapping[str, int] | None = None,
) -> Decision:
    """Choose a candidate for one request to `model`.

    `own` is this gateway's in-flight per key now (gridroute reads it); `affinity` a
    preferred key (session/prefix), honoured only inside the chosen tier; `can_hold`
    false once a held request has waited `max_queue_ms`; `exclude` keys already tried
    by this request (a retry goes to another site); `prefix` the request's prefix
    matches (`core/prefix.py`), preferred like `affinity` only inside a tier with room
    and under this gateway's budget, its outcome set on it. `borrow_by_pairs` false keeps
    a request whose one site left within this gateway's budget is far fuller than the
    seed's pick at that site, where true it borrows the pick (the caller's choice:
    `core/flow.py` sets it false in fair order, whose gate would hold the borrow).
    `peaks` is this gateway's most in flight per key since its last snapshot was built
    (`OwnLoad.peaks`, reset by `OwnLoad.mark`): with an admission queue a gateway may
    refill what it held at a site since the sample (`SiteView.kept`), past its budget.
    """
    plan = snapshot.plan(model)
    if plan is None:
        return Decision(Outcome.UNKNOWN_MODEL, Path.NONE)
    s = snapshot.settings
    shed = model in snapshot.shedding
    if shed and policy is not Policy.GRIDROUTE:
        return Decision(
            Outcome.SHED, Path.SHED, None, (("", Reason.SHED.value),), retry_after_s(rng, s)
        )
    healthy = plan.healthy
    weights = plan.healthy_weights
    if exclude:
        keep = [i for i, v in enumerate(healthy) if v.key not in exclude]
        healthy = tuple(healthy[i] for i in keep)
        weights = tuple(weights[i] for i in keep)
    refused = plan.refused
    if not healthy:
        if exclude:
            plan = _without(plan, exclude)
        return _fallthrough(plan, rng, refused, policy is Policy.FIRST)
    if policy is Policy.FIRST:
        return Decision(Outcome.ROUTE, Path.FIRST, healthy[0], refused, None, healthy[0].rho)
    if prefix is not None and not prefix.settings.load_bound and affinity is None:
        k = _prefer(prefix, healthy, range(len(healthy)), rng, weights, ())
        if k is not None:
            return Decision(Outcome.ROUTE, Path.PREFIX, healthy[k], refused, None, healthy[k].rho)

    counted = policy is Policy.GRIDROUTE
    n = len(healthy)
    rhos: list[float | None] = [None] * n
    free: list[int] = []  # room, queue-free
    queued: list[int] = []  # room, queued
    if counted:
        counts = own or {}
        most = peaks or {}
        fair = s.fair_share
        accounting = s.local_accounting
        borrow: list[int] = []  # the site has room by the estimate, beyond this gateway's share
        borrow_queued: list[int] = []  # the same, with work waiting there
        up_free: list[int] = []  # room only within the fraction granted (`budget_up`)
        up_queued: list[int] = []
        # Room by the estimate only as a refill of what it held since the sample
        # (`SiteView.refills`), after the fractions: another gateway's budget counts it.
        refill_free: list[int] = []
        refill_queued: list[int] = []
        # Within what the budgets grant (whole or the fraction) but no room by the
        # estimate: this gateway's part of an over-full site. The seed's tiers put such
        # a site below every site with room.
        part_free: list[int] = []
        part_queued: list[int] = []
        room_free: list[int] = []  # the seed's tiers: sites with room by the estimate
        room_queued: list[int] = []
        for i, v in enumerate(healthy):
            if not v.loaded:
                continue  # no in-flight reading: no room and no rho (unknown, never zero)
            mine = counts.get(v.key, 0) if accounting else v.own_at_sample
            # Rank by this gateway's own load plus only its share of other gateways' (a
            # poll old: ranking on all of it makes gateways herd together; more of it at
            # a site mostly held from outside) and all of the external load. (Inlined
            # SiteView.pick_rho and has_room: this loop is the request path.)
            ceiling = v.room_ceiling
            rhos[i] = (mine + v.ranked_others) / ceiling
            site_room = v.base + mine + 1 <= ceiling
            if site_room:
                (room_queued if v.is_queued else room_free).append(i)
            within = mine + 1 <= v.budget if fair else site_room
            granted = within or (fair and mine + 1 <= v.budget_up)
            if granted and not site_room:
                (part_queued if v.is_queued else part_free).append(i)
            elif within:
                (queued if v.is_queued else free).append(i)
            elif granted:
                (up_queued if v.is_queued else up_free).append(i)
            elif fair and site_room and v.refills(mine, most.get(v.key, 0)):
                # With an admission queue, what this gateway held here since the sample
                # is its own: past a budget that counts only what it held at the sample,
                # a slot its request just freed would idle while the next request waits
                # out the queue and then borrows it anyway. The sample showed that slot
                # free, so other gateways' budgets may count it too: it comes after the
                # whole budgets and their fractions in its tier.
                (refill_queued if v.is_queued else refill_free).append(i)
            elif site_room and not s.shedding:
                # With shedding on, never past the budget: every gateway borrows on the
                # same poll-old estimate, so borrowing herds them onto the site (measured
                # at 8 gateways past capacity: unbounded 7-26 % overshoot; one more share
                # 1.1-5.8 %, most of it borrowed). Budgets rounded per snapshot
                # (`GridState`) fill the room that borrowing was there to fill.
                # Queue-free sites first here too: borrowing is still the pressure tiers.
                (borrow_queued if v.is_queued else borrow).append(i)
        if not free:
            # A budget's fraction is taken only where the whole budgets leave this tier
            # no room: granted with its probability, it may be granted to every gateway
            # sharing the site at once (`GridState._whole`). A refill comes after it.
            if up_free:
                free, queued = up_free, []
            elif refill_free:
                free, queued = refill_free, []
            elif not queued:
                queued = up_queued or refill_queued
        if not free and not queued:
            # No site with room by the estimate within what the budgets grant: this
            # gateway's part of an over-full site, still before a borrow ("Where
            # gridroute departs from the seed rule"), not-full sites first as in the
            # seed's overflow tiers.
            free = [i for i in part_free if not healthy[i].full] or part_free
            queued = [i for i in part_queued if not healthy[i].full] or part_queued
        if free or queued:
            tier = free or queued
            if prefix is not None and prefix.settings.load_bound and affinity is None:
                k = _prefer(prefix, healthy, tier, rng, weights, rhos)
                if k is not None:
                    return Decision(Outcome.ROUTE, Path.PREFIX, healthy[k], refused, None, rhos[k])
            spread = snapshot.spread
            seed = room_free if free else room_queued
            if len(tier) < len(seed) and len(seed) >= 3 and affinity is None:
                k, winner = _narrowed_pair(healthy, weights, rhos, seed, tier, rng)
                if k >= 0:
                    v = healthy[k]
                    return Decision(Outcome.ROUTE, Path.PRESSURE_P2C, v, refused, None, rhos[k])
                only = tier[0]
                kin = refill_free if free else refill_queued
                if (
                    len(tier) == 1
                    # a refill of its tier comes after the whole budget, and before a borrow
                    and (tier is kin or not kin)
                    and winner >= 0
                    and borrow_by_pairs
                    and not s.shedding
                    and (rhos[only] or 0.0) - (rhos[winner] or 0.0) >= BORROW_MARGIN
                    # the pairs were drawn among queued sites (no budget is left at a
                    # queue-free one): a queue-free site with room is the seed's tier
                    and not (room_free and healthy[winner].is_queued)
                ):
                    # The one site left within budget is one the seed's pairs never
                    # picked, and by a wide margin: borrow where they do, as when no
                    # budget is left (never with shedding on, see below).
                    v = healthy[winner]
                    return Decision(Outcome.ROUTE, Path.BORROW, v, refused, None, rhos[winner])
            return _in_room(healthy, weights, rhos, tier, rng, affinity, refused, spread, model)
        if prefix is not None and prefix.settings.load_bound:
            # Past every budget: affinity does not choose (the outcome says so).
            _prefer(prefix, healthy, (), rng, weights, rhos)
        # Holding or shedding claims that no site has room; a site without a load reading
        # might have some, so with one in the way the overflow tiers decide like the seed.
        known = all(v.loaded for v in healthy)
        if known and s.max_queue_ms > 0 and can_hold:
            return Decision(Outcome.HOLD, Path.HOLD, None, refused)
        borrow = borrow or borrow_queued
        if borrow and not (s.max_queue_ms > 0 and s.queue_overflow == "shed"):
            d = _in_room(healthy, weights, rhos, borrow, rng, affinity, refused)
            return Decision(d.outcome, Path.BORROW, d.view, d.refused, None, d.rho)
        if known and (s.shedding or shed or (s.max_queue_ms > 0 and s.queue_overflow == "shed")):
            return Decision(
                Outcome.SHED, Path.SHED, None, (("", Reason.SHED.value),), retry_after_s(rng, s)
            )
    else:
        for i, v in enumerate(healthy):
            r2 = v.rho
            rhos[i] = r2
            if r2 is not None and r2 < 1.0:
                (queued if v.is_queued else free).append(i)
        # Tiers with room: queue-free first, then queued.
        if free or queued:
            if prefix is not None and prefix.settings.load_bound and affinity is None:
                k = _prefer(prefix, healthy, free or queued, rng, weights, rhos)
                if k is not None:
                    return Decision(Outcome.ROUTE, Path.PREFIX, healthy[k], refused, None, rhos[k])
            return _in_room(healthy, weights, rhos, free or queued, rng, affinity, refused)

    tier = [i for i in range(n) if not healthy[i].full]
    path = Path.QUEUE_TIE
    if not tier:
        tier = list(range(n))
        path = Path.SATURATED
    views = [healthy[i] for i in tier]
    k = -1
    if affinity is not None:
        for j, v in enumerate(views):
            if v.key == affinity:
                k, path = j, Path.AFFINITY
                break
    if k < 0:
        tier_weights = [weights[i] for i in tier]
        # The seed keeps the sites tied on the least queue depth here, rho or not: sites
        # that publish a queue but no load (no rho) still send the lighter queue every
        # request (the reference's `the_least_loaded_site_sorts_first`), and among the
        # tied ones "missing rho uses capacity-weighted selection", as `_queue_tie` draws.
        k = _queue_tie(views, tier_weights, rng)
        if all(rhos[i] is None for i in tier):
            path = Path.CAPACITY
    chosen = views[k]
    return Decision(
        Outcome.ROUTE, path, chosen, refused + _not_chosen(healthy, chosen), None, rhos[tier[k]]
    )


def _prefer(
    prefix: PrefixRequest,
    healthy: Sequence[SiteView],
    tier: Sequence[int],
    rng: Random,
    weights: Sequence[float],
    rhos: Sequence[float | None],
) -> int | None:
    """Index into `healthy` of the site prefix affinity sends this request to, or None
    (the pressure pick decides); the outcome is set on `prefix`.

    Only sites of `tier` (the one the pressure rules selected, under the budget) are
    chosen; the longest match among them must cover `threshold` of the prompt and save
    more prefill than its queue costs. A better match outside the tier (at its budget,
    or in a lower tier) is `overridden_by_load`, and so is a match at a site whose rho is
    above the tier's capacity-weighted mean by more than `balance_slack` (`rhos` empty:
    not checked): without that, the conversations sharing a system prompt all follow
    the site that served it last, and the pressure pick no longer sets the shares."""
    s = prefix.settings
    prefix.matched = 0
    matches = prefix.matches
    if not s.enabled or not matches:
        prefix.outcome = PrefixOutcome.MISS
        return None
    need = s.threshold * len(prefix.blocks)
    k, n = -1, 0
    for i in tier:
        m = matches.get(healthy[i].key, 0)
        if m > n:
            k, n = i, m
    if k < 0 or n < need or not prefix.worth(n, healthy[k].queued, _lightest(healthy, tier, k)):
        outside = max((matches.get(v.key, 0) for v in healthy), default=0)
        loaded = outside > n and outside >= need
        prefix.outcome = PrefixOutcome.OVERRIDDEN_BY_LOAD if loaded else PrefixOutcome.MISS
        return None
    if rhos and not _balanced(k, healthy, tier, weights, rhos, prefix):
        prefix.outcome = PrefixOutcome.OVERRIDDEN_BY_LOAD
        return None
    if s.exploration > 0.0 and rng.random() < s.exploration:
        prefix.outcome = PrefixOutcome.EXPLORED
        return None
    prefix.outcome, prefix.matched = PrefixOutcome.HIT, n
    return k


def _lightest(healthy: Sequence[SiteView], tier: Sequence[int], k: int) -> float | None:
    """The least queue among the sites of `tier` other than `k` (its own when it is
    alone there): what the request would queue behind instead of following its prompt."""
    others = [healthy[i].queued or 0.0 for i in tier if i != k]
    return min(others) if others else healthy[k].queued


BUSY_RHO = 0.5
"""The tier's mean rho from which prefix affinity also keeps each site's share of the
requests near its capacity share (`_balanced`)."""


def _balanced(
    k: int,
    healthy: Sequence[SiteView],
    tier: Sequence[int],
    weights: Sequence[float],
    rhos: Sequence[float | None],
    prefix: PrefixRequest,
) -> bool:
    """Whether prefix affinity may send this request to site `k` without moving the
    balance (unknown rho anywhere in the tier: not judged, the capacity draw decides as
    usual), with `slack` the settings' `balance_slack`:

    * `k`'s rho is at most the tier's capacity-weighted mean plus `slack`, and
    * once that mean is `BUSY_RHO` or more, `k`'s part of the requests the tier's sites
      answered lately (`PrefixMap.served_share`) is at most its capacity share of the
      tier plus `slack` (the tier's, so a site out of it, full, does not make the
      others' shares look too large). Rho alone is not enough: a site whose cache holds
      more of its conversations (the small site of the seed scenario, with the same
      cache for half the slots) answers faster at the same rho, so at the same rho it
      took 5.5 points more of the requests than with affinity off
      (bench/bench_prefix.py, 256 clients). Below `BUSY_RHO` no site is near full and
      a conversation keeps its site."""
    mine = rhos[k]
    if mine is None:
        return True
    total = weighted = 0.0
    for i in tier:
        r = rhos[i]
        if r is None:
            return True
        total += weights[i]
        weighted += weights[i] * r
    if total <= 0.0:
        return True
    slack = prefix.settings.balance_slack
    mean = weighted / total
    if mine > mean + slack:
        return False
    if mean < BUSY_RHO:
        return True
    share = prefix.table.served_share(healthy[k].key, [healthy[i].key for i in tier])
    return share is None or share <= weights[k] / total + slack


def _not_chosen(healthy: Sequence[SiteView], chosen: SiteView) -> tuple[tuple[str, str], ...]:
    """Why each healthy candidate other than the routed one was passed over: full, or
    unmeasured when it had no load reading. The routed site is never counted refused."""
    return tuple(
        (v.site, (Reason.FULL if v.loaded else Reason.UNMEASURED).value)
        for v in healthy
        if v is not chosen
    )


def _in_room(
    healthy: Sequence[SiteView],
    weights: Sequence[float],
    rhos: Sequence[float | None],
    tier: list[int],
    rng: Random,
    affinity: str | None,
    refused: tuple[tuple[str, str], ...],
    spread: Spread | None = None,
    model: str = "",
) -> Decision:
    if affinity is not None:
        for i in tier:
            if healthy[i].key == affinity:
                return Decision(Outcome.ROUTE, Path.AFFINITY, healthy[i], refused, None, rhos[i])
    views = [healthy[i] for i in tier]
    w = [weights[i] for i in tier]
    tier_rhos = [rhos[i] for i in tier]
    if all(r is not None for r in tier_rhos):
        known = [r for r in tier_rhos if r is not None]
        k, path = _pick_pressure(views, w, known, rng, spread, model)
    else:
        k, path = _draw(views, w, rng), Path.CAPACITY
    return Decision(Outcome.ROUTE, path, views[k], refused, None, tier_rhos[k])


def _without(plan: ModelPlan, exclude: frozenset[str]) -> ModelPlan:
    """The plan minus already-tried keys (retries go elsewhere when anything else exists)."""

    def keep(group: tuple[SiteView, ...]) -> tuple[SiteView, ...]:
        return tuple(v for v in group if v.key not in exclude)

    front = plan.front if plan.front is not None and plan.front.key not in exclude else None
    return replace(
        plan,
        unmeasured=keep(plan.unmeasured),
        silent=keep(plan.silent),
        demoted=keep(plan.demoted),
        front=front,
    )
