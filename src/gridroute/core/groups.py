"""Selection groups: which candidates of one model compete with each other for traffic.

The control plane sorts a model's candidates and cuts the sorted list into groups of
equally eligible ones; the gateway takes new traffic from the best viable group only
and picks inside it (`core.pickers`). Grouping is the reference's
(`assign_selection_groups`, reference-behaviour.md 2.1):

    geographyFirst (default)  sort: admission, locality tier, fresh first, score desc,
                              then site, provider, cluster (pure tiebreakers)
                              group key: (admission, locality tier, fresh)
    scoreFirst                sort: admission, fresh first, score desc, locality tier,
                              then site, provider, cluster
                              group key: (admission, fresh)

A new group starts wherever the group key changes while walking the sorted list: one
pass, equality on discrete fields, no pairwise epsilon, so the result is the same for
every permutation of the input. Scores order candidates inside a group but never split
one (the reference's rule; the spike's comment would split on exact score equality).
`excluded` candidates get no group: they are kept aside, so a model that has only
excluded candidates is answered 503 (known, nothing admitted), never 404.

`check_groups` holds the rules a consumer applies to published groups (the reference's
`group_index::build`), with its messages, for the wire schema to run on every overlay.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Admission(StrEnum):
    """May this provider take new sessions, existing ones, or none?"""

    NEW_AND_EXISTING = "new_and_existing"
    EXISTING_ONLY = "existing_only"
    """Draining: serves sessions already bound to it, takes no new ones."""
    EXCLUDED = "excluded"
    """Never selected (kept so the model answers 503 rather than 404)."""


class Locality(StrEnum):
    """Where the provider is relative to the consumer (the reference's LocalityTier)."""

    SAME_SITE = "sameSite"
    SAME_ZONE = "sameZone"
    SAME_REGION = "sameRegion"
    CROSS_REGION = "crossRegion"
    UNKNOWN = "unknown"


class RoutingPolicy(StrEnum):
    """Which eligibility boundary is preferred when grouping."""

    GEOGRAPHY_FIRST = "geographyFirst"
    SCORE_FIRST = "scoreFirst"


ADMISSION_RANK = {Admission.NEW_AND_EXISTING: 0, Admission.EXISTING_ONLY: 1, Admission.EXCLUDED: 2}
LOCALITY_TIER = {
    Locality.SAME_SITE: 0,
    Locality.SAME_ZONE: 1,
    Locality.SAME_REGION: 2,
    Locality.CROSS_REGION: 3,
    Locality.UNKNOWN: 4,
}


@dataclass(frozen=True, slots=True)
class Member:
    """One candidate as the control plane knows it when grouping."""

    site: str
    provider: str
    cluster: str = ""
    admission: Admission = Admission.NEW_AND_EXISTING
    locality: Locality = Locality.UNKNOWN
    fresh: bool = True
    score: float | None = None
    """Higher is preferred; None (unscored) sorts after every score."""
    weight: int | None = None
    """traffic_weight, copied through untouched (grouping never reads it)."""

    @property
    def key(self) -> str:
        return f"{self.site}/{self.provider}"


@dataclass(frozen=True, slots=True)
class Grouped:
    """A model's candidates in published order with their group, and those kept aside."""

    members: tuple[tuple[Member, int], ...]
    excluded: tuple[Member, ...]


def _score_key(score: float | None) -> float:
    # Descending score; unscored (and NaN, which the schema refuses anyway) last.
    if score is None or math.isnan(score):
        return math.inf
    return -score


def sort_key(m: Member, policy: RoutingPolicy) -> tuple[object, ...]:
    """The total order of one policy (every field, tiebreakers last)."""
    admission = ADMISSION_RANK[m.admission]
    tier = LOCALITY_TIER[m.locality]
    stale = 0 if m.fresh else 1
    score = _score_key(m.score)
    tail = (m.site, m.provider, m.cluster, -1 if m.weight is None else m.weight)
    if policy is RoutingPolicy.SCORE_FIRST:
        return (admission, stale, score, tier, *tail)
    return (admission, tier, stale, score, *tail)


def group_key(m: Member, policy: RoutingPolicy) -> tuple[int, ...]:
    """The fields whose change starts a new group (score is never one of them)."""
    admission = ADMISSION_RANK[m.admission]
    stale = 0 if m.fresh else 1
    if policy is RoutingPolicy.SCORE_FIRST:
        return (admission, stale)
    return (admission, LOCALITY_TIER[m.locality], stale)


def assign_groups(
    members: Iterable[Member], policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST
) -> Grouped:
    """Sort, keep one entry per provider, set excluded aside, number the groups from 0.

    Two entries for one (site, provider, cluster) keep the least eligible of them (the
    one that sorts last: excluded beats draining beats admitted), so conflicting
    reports never make a provider look better than its worst one says.
    """
    one: dict[tuple[str, str, str], Member] = {}
    for m in members:
        ident = (m.site, m.provider, m.cluster)
        had = one.get(ident)
        if had is None or sort_key(m, policy) > sort_key(had, policy):
            one[ident] = m
    kept = [m for m in one.values() if m.admission is not Admission.EXCLUDED]
    excluded = [m for m in one.values() if m.admission is Admission.EXCLUDED]
    kept.sort(key=lambda m: sort_key(m, policy))
    excluded.sort(key=lambda m: sort_key(m, policy))
    out: list[tuple[Member, int]] = []
    group = -1
    last: tuple[int, ...] | None = None
    for m in kept:
        k = group_key(m, policy)
        if k != last:
            group += 1
            last = k
        out.append((m, group))
    return Grouped(tuple(out), tuple(excluded))


@dataclass(frozen=True, slots=True)
class GroupProblem:
    """A rule a published model breaks: which candidate (index) and why."""

    index: int
    group: int | None
    message: str


def check_groups(entries: Sequence[tuple[int | None, Admission]]) -> list[GroupProblem]:
    """The consumer's rules on one model's published (selection_group, admission) list.

    Grouped and ungrouped may not mix; numbering starts at 0 and goes up by at most one
    from candidate to candidate (contiguous and monotonic); one admission state per
    group. The messages are the reference's (reference-behaviour.md 2.2).
    """
    if not entries:
        return []
    grouped = [g is not None for g, _ in entries]
    if any(grouped) and not all(grouped):
        first = grouped.index(not grouped[0])
        return [GroupProblem(first, None, "capability mixes grouped and ungrouped candidates")]
    if not grouped[0]:
        return []
    problems: list[GroupProblem] = []
    admission_of: dict[int, Admission] = {}
    prev: int | None = None
    for i, (g, admission) in enumerate(entries):
        assert g is not None
        if prev is None:
            if g != 0:
                problems.append(GroupProblem(i, g, "selection_group must start at 0"))
                return problems
        elif g not in (prev, prev + 1):
            problems.append(
                GroupProblem(
                    i, g, f"selection_group must be contiguous and monotonic (after {prev})"
                )
            )
            return problems
        prev = g
        had = admission_of.setdefault(g, admission)
        if had is not admission:
            problems.append(
                GroupProblem(
                    i, g, f"selection_group {g} mixes admission states ({had}, {admission})"
                )
            )
    return problems
