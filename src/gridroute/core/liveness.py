"""Site liveness as a state machine: live, silent, returning.

Everything that moves a site between states lives in `TRANSITIONS` (the h11 idea: the
rules are data). A site is judged at a *judgement time*: for a peer, the end of its
operator's last poll round that tried it; for the local site, the last read of its
operator. A stalled poller or relay therefore pauses judgement instead of silencing
every peer, and a peer whose operator reports no poll rounds is not judged at all.

Silence: at judgement, the newest sample is older than the freshness window.
Return: two new samples (two refreshes that brought a newer sample) with no full
window between them, about two peer polls, so one poll through a lossy link does
not bring a site back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Live(Enum):
    LIVE = "live"
    SILENT = "silent"
    RETURNING = "returning"


class Event(Enum):
    NEW_SAMPLE = "new_sample"
    """A refresh brought a sample newer than any seen, within a window of the last one."""
    NEW_SAMPLE_AFTER_GAP = "new_sample_after_gap"
    """A newer sample, but a full window passed since the previous new sample."""
    STALE = "stale"
    """At judgement, the newest sample is older than the freshness window."""


TRANSITIONS: dict[tuple[Live, Event], Live] = {
    (Live.LIVE, Event.NEW_SAMPLE): Live.LIVE,
    (Live.LIVE, Event.NEW_SAMPLE_AFTER_GAP): Live.LIVE,
    (Live.LIVE, Event.STALE): Live.SILENT,
    (Live.SILENT, Event.NEW_SAMPLE): Live.RETURNING,
    (Live.SILENT, Event.NEW_SAMPLE_AFTER_GAP): Live.RETURNING,
    (Live.SILENT, Event.STALE): Live.SILENT,
    (Live.RETURNING, Event.NEW_SAMPLE): Live.LIVE,
    (Live.RETURNING, Event.NEW_SAMPLE_AFTER_GAP): Live.RETURNING,
    (Live.RETURNING, Event.STALE): Live.SILENT,
}


@dataclass(frozen=True, slots=True)
class Liveness:
    state: Live
    newest_at: float
    """Newest sample time seen (the no-full-window rule measures gaps between these)."""


def first_seen(sampled_at: float, judge_at: float | None, window_s: float) -> Liveness:
    """A site seen for the first time is live if fresh (or unjudged), silent if stale."""
    stale = judge_at is not None and judge_at - sampled_at > window_s
    return Liveness(Live.SILENT if stale else Live.LIVE, sampled_at)


def step(prior: Liveness, sampled_at: float, judge_at: float | None, window_s: float) -> Liveness:
    """Advance one refresh: fold in a new sample (if any), then judge (if judgeable)."""
    state, newest = prior.state, prior.newest_at
    if sampled_at > newest:
        gap = sampled_at - prior.newest_at
        event = Event.NEW_SAMPLE_AFTER_GAP if gap > window_s else Event.NEW_SAMPLE
        state = TRANSITIONS[(state, event)]
        newest = sampled_at
    if judge_at is not None and judge_at - newest > window_s:
        state = TRANSITIONS[(state, Event.STALE)]
    return Liveness(state, newest)
