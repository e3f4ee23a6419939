"""The seed's tier rule, read on each decision gridroute makes in a simulated run.

Issue 23's first rule: gridroute never sends a request to a site in a higher pressure
tier (queue-free with room, queued with room, not full, the rest) while a lower tier has
room it may admit into. A snapshot test (`tests/core/test_seed_agreement.py`) sees only
the instant after a sample, where this gateway holds what it held at the sample. In a run
its requests finish between samples, and there its budget at an over-full site (its
proportional part of the ceiling) lets it in while the estimate shows no room: that is
where the rule was broken (a site with room within the budget in the same tier list as
an over-full one, found by this audit; `select.decide` now takes the site with room).

`tier_skip` reads one decision against the rule on the snapshot it was made on, with the
gateway's counts at that moment. "Room" is the estimate `decide` uses (others at the
sample plus this gateway's own now, under the site's ceiling); "admissible" is room
within what the budgets grant this gateway there (the whole budget, the fraction granted
for the snapshot, or what it held there since the sample with an admission queue). With
no admissible room anywhere a gateway borrows (shedding off), so then any site with room
is the tier to keep to, as in the snapshot test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gridroute.core.select import Path
from gridroute.core.view import SiteView

NOT_TIERED = frozenset(
    {
        Path.QUEUE_TIE,
        Path.SATURATED,
        Path.CAPACITY,
        Path.FALLBACK,
        Path.LAST_RESORT,
        Path.FIRST,
        Path.OVERLAY,
        Path.PREFIX,
    }
)
"""Paths the rule does not read: the overflow tiers (no site has room), nothing healthy,
`first`, an overlay's picker, and prefix affinity (without a load bound it prefers the
cached prefix over the tiers on purpose, docs/prefix-affinity.md; with one it picks
inside the tier `decide` chose, which the decision does not tell apart)."""

OWN_PART = "own_part"
"""This gateway's part of a site with no room by the estimate (an over-full site), taken
while the only room elsewhere is past its budgets: before a borrow, on purpose
(docs/selection.md, "Where gridroute departs from the seed rule"); a site that is not
marked full first, as the seed's overflow tiers take them."""
SKIP = "skip"
"""A lower tier had room this gateway may admit into: the rule broken."""


def granted(v: SiteView, mine: int, peaks: Mapping[str, int], fair_share: bool = True) -> bool:
    """Whether the budgets grant this gateway one more request at `v`: its budget, the
    fraction granted, or (with an admission queue, and only where the estimate shows
    room, as `decide` reads it) what it held there since the sample (`SiteView.refills`).
    With `fair_share` off there are no budgets: `decide` admits wherever the estimate
    shows room, so that is what is granted."""
    if not fair_share:
        return v.has_room(mine)
    if mine + 1 <= max(v.budget, v.budget_up):
        return True
    return v.has_room(mine) and v.refills(mine, peaks.get(v.key, 0))


def tier(v: SiteView, mine: int) -> int:
    """The seed's tier of `v` on the estimate: 0 queue-free with room, 1 queued with room,
    2 not full, 3 full."""
    if v.has_room(mine):
        return 1 if v.is_queued else 0
    return 3 if v.full else 2


def tier_skip(
    healthy: Sequence[SiteView],
    counts: Mapping[str, int],
    peaks: Mapping[str, int],
    chosen: str,
    shedding: bool,
    fair_share: bool = True,
) -> str | None:
    """None where the pick of `chosen` among `healthy` keeps the seed's tier order, else
    `OWN_PART` or `SKIP` (module docstring), under the gateway's `shedding` and
    `fair_share` settings. Sites without a load reading have no tier."""
    tiers: dict[str, int] = {}
    admissible: list[int] = []
    parts: list[int] = []  # tiers of the sites without room that the budgets grant
    for v in healthy:
        if not v.loaded:
            continue
        mine = counts.get(v.key, 0)
        t = tiers[v.key] = tier(v, mine)
        if granted(v, mine, peaks, fair_share):
            (admissible if t <= 1 else parts).append(t)
    if chosen not in tiers:
        return None
    lowest = min(admissible, default=None)
    if lowest is None and not shedding:
        lowest = min((t for t in tiers.values() if t <= 1), default=None)
    if lowest is None or tiers[chosen] <= lowest:
        return None
    if not admissible and tiers[chosen] == min(parts, default=-1):
        return OWN_PART  # granted, and in the lowest tier of the parts granted
    return SKIP
