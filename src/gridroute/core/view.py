"""Frozen per-refresh views of every candidate, and per-model plans built from them.

A view is everything the request path needs about one candidate, computed once per
poll, so that a decision touches only floats and the gateway's own counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gridroute.core.candidate import Candidate, Health
from gridroute.core.liveness import Live

OUTSIDE_RANKED_WHOLE_FROM = 0.5
"""Past this fraction of a site's ceiling held from outside, gridroute ranks what other
gateways hold there nearer to whole: the weight on it rises linearly from the gateway's
share at this fraction to 1 at a ceiling held wholly from outside (`SiteView.ranked_others`).

Why. Ranking other gateways' poll-old load at this gateway's share keeps gateways from
herding onto one site (ranked whole wherever the budgets do not follow demand: 313-1,002
overshoot at 256 clients in the 4-, 8- and 16-gateway scenarios, against 0), but it
reads a site a few points emptier than it is wherever other gateways hold much of its
room. At a site mostly held from outside that little room is all there is, and those
few points were enough for it to win the pairs drawn without the emptiest site: a site
93 % held from outside took 33 % of the requests where the seed rule gives it 14 %
(issue 23, world 253; 28 % ranked so). Only sites most of whose ceiling outside load
holds are ranked nearer whole, so where the gateways' own load fills the sites (the
scenarios above) nothing changes; a ramp, not a step, so that a site whose estimated
outside load wavers about the fraction does not flip in rank."""


def others_weight(share: float, held: float) -> float:
    """The weight a gateway whose share is `share` ranks other gateways' load at, at a
    site `held` (a fraction of its ceiling) from outside: its share, rising linearly to
    1 from `OUTSIDE_RANKED_WHOLE_FROM` held to all of it (`SiteView.ranked_others`; the
    simulator's comparison reads the same ramp)."""
    lo = OUTSIDE_RANKED_WHOLE_FROM
    if lo >= 1.0:
        return share
    ramp = min(max((held - lo) / (1.0 - lo), 0.0), 1.0)
    return share + (1.0 - share) * ramp


@dataclass(frozen=True, slots=True)
class SiteView:
    candidate: Candidate
    index: int
    """Position in config order (local first): the "front" is the lowest index."""
    measured: bool
    """The candidate publishes load (rows were received for it)."""
    ready: bool
    live: Live | None
    """None for unmeasured candidates (never judged)."""
    health: Health
    capacity: float | None
    """Declared capacity (maxRunning x ready), when known."""
    soft: float | None
    hard: float | None
    ceiling: float
    rho: float | None
    """Reported rho: smoothed, from the site's own samples."""
    queued: float | None
    """Worst per-endpoint queue in the window; None when no queue series is published."""
    room_ceiling: float
    """The ceiling lowered to where KV usage would reach `kv_full` (see
    `ceiling.kv_bounded`): what counted rho, pick rho and fair-share room read against."""
    full: bool
    """At its ceiling with work waiting for at least full_after_ms ("marked full")."""
    relieved: bool
    sampled_at: float | None
    base: float
    """Others' in-flight at the newest sample: polled total minus this gateway's own then."""
    own_at_sample: int
    budget: float
    """This gateway's fair share of the site: what it held at the sample (scaled down to
    its share of the ceiling when the site was over-full) plus its share of the free room."""
    share: float = 1.0
    """This gateway's share of all in-flight it polled (at least `fair_share_floor`)."""
    target: float | None = None
    """Where some gateway's demand for what the site serves is unmet: this gateway's
    demand share of the site's room, which its budget follows (`core/demand.py`)."""
    kept: int = -1
    """With an admission queue: the most this gateway held here since the sample (from
    `OwnLoad.most_since`), which it may refill past its budget (`select.decide`); -1
    where it may not (no queue, shedding on, no load reading, no own counts given to the
    refresh, or the site over-full at the sample)."""
    keep_cap: float = math.inf
    """Where the budget follows demand (`target`), the refill only up to the target
    rounded up: past capacity slots must still move to the gateways that want them."""
    is_queued: bool = False
    """Any work waiting in the window (a queue below `queue_full` still counts here: the
    site may have room by its ceiling, but queue-free sites go first)."""
    loaded: bool = False
    """Some sample in the window carries an in-flight reading. Without one the site has no
    room and no rho (missing is unknown, never zero)."""
    budget_up: float = -1.0
    """`budget` with its fraction granted for this snapshot (`GridState._whole`): what a
    request may use where no site of its tier has room within the whole budgets (the
    gateway is held back by the floors). Never below `budget` (the default: the same)."""
    external: float = 0.0
    """The part of `base` that no gateway reported sending (batch jobs, direct clients):
    this site's part of the grid's estimated external load, at most `base`."""
    ranked_others: float = field(init=False, compare=False)
    """The others' in-flight as gridroute ranks it: `share` of what other gateways sent
    (a poll old, and ranking on all of it herds gateways together; nearer all of it at a
    site mostly held from outside, `OUTSIDE_RANKED_WHOLE_FROM`) plus all of the external
    load (which does not herd, and hidden behind the share it made a site full from
    outside look empty). Derived from these, once per snapshot."""
    key: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.candidate.key)
        external = min(max(self.external, 0.0), self.base)
        # Held of the ceiling, not of the KV-bounded room: the gateways' own KV-heavy
        # requests lowering the room are not outside load.
        weight = (
            others_weight(self.share, external / self.ceiling) if self.ceiling > 0.0 else self.share
        )
        ranked = weight * (self.base - external) + external
        object.__setattr__(self, "ranked_others", ranked)
        if self.budget_up < self.budget:
            object.__setattr__(self, "budget_up", self.budget)

    def counted_rho(self, mine: int) -> float:
        """The site's estimated pressure: others' in-flight at the sample plus this
        gateway's own now, over the (KV-bounded) ceiling."""
        return (self.base + mine) / self.room_ceiling

    def has_room(self, mine: int) -> bool:
        """Whether one more request of this gateway's fits under the (KV-bounded)
        ceiling by the estimate: others at the sample plus its own now."""
        return self.base + mine + 1 <= self.room_ceiling

    def refills(self, mine: int, peak: int) -> bool:
        """With an admission queue, whether this gateway may take one more request here
        past its budget as a refill of what it held since the sample (`kept`, and `peak`
        since the snapshot: `OwnLoad.peaks`), up to `keep_cap`; only where the site has
        room by the estimate (`has_room`, which the caller checks)."""
        return self.kept >= 0 and mine + 1 <= min(max(self.kept, peak), self.keep_cap)

    def pick_rho(self, mine: int) -> float:
        """What gridroute's picks compare: this gateway's own in-flight plus only its share
        of what other gateways sent (a poll old; more of it at a site mostly held from
        outside, `OUTSIDE_RANKED_WHOLE_FROM`) and all external load, over the
        (KV-bounded) ceiling."""
        return (mine + self.ranked_others) / self.room_ceiling

    @property
    def site(self) -> str:
        return self.candidate.site

    @property
    def provider(self) -> str:
        return self.candidate.provider

    @property
    def demoted(self) -> bool:
        return self.health is Health.DOWN


@dataclass(frozen=True, slots=True)
class ModelPlan:
    """The candidates of one model, sorted into the classes the pick walks through."""

    model: str
    views: tuple[SiteView, ...]
    """Every candidate serving the model, config order."""
    healthy: tuple[SiteView, ...]
    """Ready, live, measured, not demoted: the pressure tiers choose among these."""
    healthy_weights: tuple[float, ...]
    unmeasured: tuple[SiteView, ...]
    """Ready, not demoted, publishing no load: a fallback only."""
    silent: tuple[SiteView, ...]
    """Ready, not demoted, measured but silent or returning: a fallback when all are."""
    demoted: tuple[SiteView, ...]
    """Ready but failing health checks: a last resort while admitted."""
    front: SiteView | None
    """The front ready candidate: the last resort when signals and health are all down."""
    weights: dict[str, float] = field(default_factory=dict)
    """Draw weight per key: capacity, unknown as the mean known, lifted by the explore floor."""
    refused: tuple[tuple[str, str], ...] = ()
    """(site, reason) for candidates excluded before any pick: unready, silent, unmeasured,
    demoted. Precomputed so the request path does not rebuild it."""
