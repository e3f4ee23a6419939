"""Passive outlier ejection: a site that keeps failing this gateway's requests is set
aside at once, without waiting for health probes or signals.

Envoy's `consecutive_gateway_failure` idea, per candidate and per gateway: after
`eject_after_failures` consecutive gateway errors (a failed or timed-out connect, a
connection lost before the answer, a read timeout or garbled answer before the
headers, or a 502/503/504 answer), the candidate is *ejected* for `eject_base_ms`. The
request flow then treats it as demoted: only a last resort when nothing else is left.

Why: health probes need `fall` failed rounds and signals a whole freshness window
before they demote a dead site, and until then every request this gateway sends there
costs a retry (measured in the demo: about 300 requests in the 3 s of a partition).
The gateway's own answers are the first and cheapest evidence it has.

Lifecycle of one candidate (an *episode* runs from its first ejection to its return):

    counting  --N consecutive errors--> ejected (for base x 2^level, at most eject_max_ms)
    ejected   --time passes-----------> on probation: one trial request at a time
    probation --the trial fails-------> ejected again, for twice as long
    probation --the trial succeeds----> counting (episode over)
    episode   --signals or probes show it down, then up again--> counting (episode over)
    any       --success of a request sent after the last error--> error count reset

So health probes and signals still decide a dead site's return: a site they judged
down (silent, unready or probe-demoted) at any time during the episode comes back as
soon as they judge it up again, without waiting for the backoff; and while they judge
it down it is out of the healthy tiers whatever the ejection says. On probation only
one request at a time is let through (a half-open circuit): a trial that takes a
2 s connect timeout to fail must not be joined by every request of those 2 s.

While ejected, outcomes of requests sent before the ejection change nothing (they are
not new evidence).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gridroute.core.gridstate import Snapshot
from gridroute.core.liveness import Live
from gridroute.core.settings import AvailabilitySettings

NONE_OUT: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Site:
    """One candidate's consecutive errors and ejection episode."""

    errors: int = 0
    level: int = 0
    """Ejections in the current episode (the next lasts base x 2^level); 0: no episode."""
    until: float = float("-inf")
    """Ejected until this instant (exclusive); on probation after it."""
    trial: bool = False
    """On probation with its one trial request in flight."""
    seen_down: bool = False
    """Signals or probes judged it down since the episode began."""
    last_error_sent: float = float("-inf")
    """When the newest failed attempt was sent: an answer to a request sent before it
    is older evidence and does not reset the count."""
    judged_at: float = float("-inf")
    """The newest snapshot time it was judged by (an older snapshot, read by a retry,
    must not undo what a newer one showed)."""


class Ejections:
    """This gateway's ejected candidates. Not thread-safe: one owner feeds it."""

    __slots__ = ("_episodes", "_sites", "on_eject", "total")

    def __init__(self, on_eject: Callable[[str, float, int], None] | None = None) -> None:
        self.on_eject = on_eject
        """Called as `on_eject(key, seconds, level)` at each ejection (the gateway logs it)."""
        self._sites: dict[str, _Site] = {}
        self._episodes: dict[str, _Site] = {}
        """Candidates in an episode (ejected or on probation)."""
        self.total: dict[str, int] = {}
        """Ejections so far per key (for `grid_route_ejections_total`)."""

    def record(
        self,
        key: str,
        ok: bool,
        now: float,
        settings: AvailabilitySettings,
        sent_at: float | None = None,
    ) -> bool:
        """Fold one attempt's outcome in; True when it ejected `key` just now.

        `ok` is any answer that is not a gateway error (a 429 is a busy site, not a
        broken one, so it counts as ok). `sent_at` is when the attempt was sent (default
        `now`): errors are consecutive in the order requests were sent, so a request
        that was in service before the site broke and succeeds after its first errors
        (a site that fails new requests while it finishes old ones) resets nothing."""
        sent = now if sent_at is None else sent_at
        site = self._sites.get(key)
        if site is None:
            if ok:
                return False
            site = self._sites[key] = _Site()
        site.trial = False
        if ok:
            if sent < site.last_error_sent:
                return False
            site.errors = 0
            if site.level and now >= site.until:
                self._end(key, site)  # the trial (or a later request) succeeded
            return False
        after = settings.eject_after_failures
        if after <= 0 or now < site.until:
            return False
        site.last_error_sent = max(site.last_error_sent, sent)
        site.errors += 1
        if site.level == 0 and site.errors < after:
            return False
        base = settings.eject_base_ms / 1000.0
        cap = settings.eject_max_ms / 1000.0
        seconds = min(base * (2.0**site.level), cap)
        site.until = now + seconds
        site.level += 1
        site.errors = 0
        self._episodes[key] = site
        self.total[key] = self.total.get(key, 0) + 1
        if self.on_eject is not None:
            self.on_eject(key, seconds, site.level)
        return True

    def out(self, now: float, snapshot: Snapshot | None = None) -> frozenset[str]:
        """Keys set aside at `now`: ejected, or on probation with a trial in flight.

        With `snapshot`, each episode is first judged by its signals and probes (see the
        module docstring). The empty set, allocation-free, when there is no episode."""
        if not self._episodes:
            return NONE_OUT
        out: list[str] = []
        for key, site in list(self._episodes.items()):
            if snapshot is not None and snapshot.at >= site.judged_at:
                view = snapshot.view(key)
                if view is not None:
                    site.judged_at = snapshot.at
                    down = (
                        not view.ready
                        or view.demoted
                        or (view.measured and view.live is not Live.LIVE)
                    )
                    if down:
                        site.seen_down = True
                    elif site.seen_down:
                        self._end(key, site)  # back by signals and probes
                        continue
            if now < site.until or site.trial:
                out.append(key)
        return frozenset(out) if out else NONE_OUT

    def sent(self, key: str, now: float) -> None:
        """A request is sent to `key`: on probation, it is the one trial."""
        site = self._episodes.get(key)
        if site is not None and now >= site.until:
            site.trial = True

    def abandon(self, key: str) -> None:
        """A request to `key` ended without an outcome (the client went away)."""
        site = self._episodes.get(key)
        if site is not None:
            site.trial = False

    def until(self, key: str) -> float | None:
        """When `key`'s current ejection ends, or None outside an episode."""
        site = self._episodes.get(key)
        return None if site is None else site.until

    def forget(self, keep: set[str]) -> None:
        """Drop state of candidates no longer configured (a reload)."""
        self._sites = {k: s for k, s in self._sites.items() if k in keep}
        self._episodes = {k: s for k, s in self._episodes.items() if k in keep}

    def _end(self, key: str, site: _Site) -> None:
        site.level = 0
        site.errors = 0
        site.until = float("-inf")
        site.trial = False
        site.seen_down = False
        self._episodes.pop(key, None)
