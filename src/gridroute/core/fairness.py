"""Fair admission past capacity: who takes a freed slot, who is refused, and for how long.

Why: past capacity a closed-loop client that has just been answered sends its next
request at once and finds the slot it freed, while a refused client comes back after
its Retry-After and finds none; first come, first served then starves some clients
completely (measured: 36 of 384 clients served nothing in 60 s, the median 10 times).

What this keeps, per fairness key (an API key, a user, a header or an address; the
gateway chooses, `gateway/fairness_key.py`), in a bounded table (`fair_keys`, oldest
seen forgotten first; unseen for `fair_key_ttl_ms`, forgotten):

    score    admissions, decayed by half every `fair_half_life_ms`
    streak   refusals since the key was last admitted

A key's *standing* is `score - streak` (the streak decaying with the score, so that
two keys keep their order while neither is used): lower ranks first. Only admissions
made while the model is *contended* count toward the score: someone waited or was
refused within the last `retry_after_max_s` (the longest a refused client stays away).
An admission that took room nobody else wanted deprived no one, as deficit round robin
forgets a flow's deficit when its queue empties; were it counted, clients served all
through a quiet spell would rank behind every newcomer of a surge and be refused for a
half-life (measured in the demo's shape, 192 clients joined by 288 more past capacity:
min 1 / median 14 / max 29 served, Jain 0.71). A key never seen stands at
0, like one served long ago; a refused key moves ahead of one just served by one
admission per refusal, so a request coming back after its Retry-After is admitted
before a fresh request of a key that was just served.

The order (`FairAdmission`, one per gateway, on the grid the request flow reads): past
capacity a request that finds no room, or finds a waiter of the same model that ranks
ahead of it (lower standing, or equal and waiting longer), waits (`core/flow.py` yields
`Hold`). When a slot frees, only the waiter ranked first may take it; the others wait
on. A wait lasts 1.5 turnovers of the gateway's slots (`fair_hold_s`: about one
service time, at most `fair_wait_ms`); a waiter not admitted by then ranks behind a
whole round and is refused: by construction the ones refused are those of the keys
served most. Decisions stay the core's (`select.decide`): this only says who goes
first and who waits.

Everything is injected (time from the caller, randomness from the caller's `Random`);
nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from random import Random

from gridroute.core.demand import DemandMeter
from gridroute.core.select import Decision, Outcome, Path, Policy
from gridroute.core.settings import AvailabilitySettings

RATE_TAU_S = 30.0
"""Time constant of the observed admission rate (hold length and Retry-After): several
rounds of a 5 s service, so a closed loop's waves of completions average out."""

FAIR_WAIT_MIN_S = 0.1
"""Shortest fair wait, however fast the slots turn over."""

FAIR_WAIT_TURNOVERS = 1.5
"""A fair wait lasts this many turnovers: a request that arrives just after a round of
completions still sees the next one, whatever the noise of the rate estimate."""


@dataclass(slots=True)
class _Key:
    score: float
    at: float
    """When `score` was last brought up to date (decay runs from here)."""
    seen: float
    """Last time the key was used (its TTL runs from here)."""
    streak: int = 0
    owed: float = 0.0
    """The refusals of the streak as a weight that decays with `score` (so the order of
    any two keys does not change while neither is used)."""


class FairnessTable:
    """Per-key standing in a table that never holds more than `fair_keys` entries."""

    __slots__ = ("_keys", "refused_keys")

    def __init__(self) -> None:
        self._keys: OrderedDict[str, _Key] = OrderedDict()
        """Least recently seen first (eviction order)."""
        self.refused_keys = 0
        """Keys whose last decision was a refusal (they are coming back)."""

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def _live(self, key: str, now: float, s: AvailabilitySettings) -> _Key | None:
        e = self._keys.get(key)
        if e is not None and now - e.seen > s.fair_key_ttl_ms / 1000.0:
            self._drop(key)
            return None
        return e

    def _drop(self, key: str) -> None:
        e = self._keys.pop(key)
        if e.streak:
            self.refused_keys -= 1

    def standing(self, key: str, now: float, s: AvailabilitySettings) -> float:
        """Decayed admissions minus refusals since the last one (lower ranks first)."""
        e = self._live(key, now, s)
        if e is None:
            return 0.0
        return (e.score - e.owed) * _decay(e, now, s)

    def streak(self, key: str) -> int:
        e = self._keys.get(key)
        return 0 if e is None else e.streak

    def _touch(self, key: str, now: float, s: AvailabilitySettings) -> _Key:
        e = self._live(key, now, s)
        if e is None:
            ttl = s.fair_key_ttl_ms / 1000.0
            while self._keys:  # expired ones first, then the least recently seen
                oldest, first = next(iter(self._keys.items()))
                if now - first.seen <= ttl and len(self._keys) < s.fair_keys:
                    break
                self._drop(oldest)
            e = self._keys[key] = _Key(0.0, now, now)
        else:
            f = _decay(e, now, s)
            e.score *= f
            e.owed *= f
            e.at = e.seen = now
            self._keys.move_to_end(key)
        return e

    def admitted(self, key: str, now: float, s: AvailabilitySettings, counts: bool = True) -> None:
        """`key` was admitted; `counts`: the admission adds to its score (it was made
        while others waited or were refused), else it only ends the refusal streak."""
        e = self._touch(key, now, s)
        if counts:
            e.score += 1.0
        if e.streak:
            self.refused_keys -= 1
            e.streak = 0
            e.owed = 0.0

    def refused(self, key: str, now: float, s: AvailabilitySettings) -> None:
        e = self._touch(key, now, s)
        if not e.streak:
            self.refused_keys += 1
        e.streak += 1
        e.owed += 1.0


def _decay(e: _Key, now: float, s: AvailabilitySettings) -> float:
    """The factor by which `e`'s weights have decayed since it was last brought up to date."""
    dt = now - e.at
    if dt <= 0.0:
        return 1.0
    return math.pow(0.5, dt / (s.fair_half_life_ms / 1000.0))


class _Rate:
    """An event rate, exponentially weighted over `RATE_TAU_S`, unbiased while young."""

    __slots__ = ("at", "count", "since")

    def __init__(self, now: float) -> None:
        self.since = now
        self.at = now
        self.count = 0.0

    def add(self, now: float) -> None:
        self.count = self.count * math.exp(-(now - self.at) / RATE_TAU_S) + 1.0
        self.at = now

    def per_s(self, now: float) -> float:
        count = self.count * math.exp(-(now - self.at) / RATE_TAU_S)
        age = max(now - self.since, 1.0)
        return count / (RATE_TAU_S * (1.0 - math.exp(-age / RATE_TAU_S)))


@dataclass(slots=True)
class _Waiter:
    key: str
    since: float
    ticket: int


def fair_order_on(s: AvailabilitySettings, policy: Policy, by_overlay: bool = False) -> bool:
    """Whether fair order applies: gridroute, `fair_order`, and shedding or a queue; not
    to a request the routing overlay decides (`by_overlay`: its groups and pickers do)."""
    return (
        not by_overlay
        and s.fair_order
        and policy is Policy.GRIDROUTE
        and (s.shedding or s.max_queue_ms > 0)
    )


def fair_hold_s(s: AvailabilitySettings, turnover_s: float | None) -> float:
    """How long a request waits for its turn: the admission queue's length when set, else
    one turnover of this gateway's slots (every slot it holds frees once in that time,
    so a request not given one by then ranks behind a whole round), within
    `FAIR_WAIT_MIN_S`..`fair_wait_ms`; `fair_wait_ms` itself before any admission."""
    if s.max_queue_ms > 0:
        return s.max_queue_ms / 1000.0
    most = s.fair_wait_ms / 1000.0
    if turnover_s is None:
        return most
    return min(max(turnover_s * FAIR_WAIT_TURNOVERS, FAIR_WAIT_MIN_S), most)


class FairAdmission:
    """One gateway's fair order: the key table and, per model, who waits for a slot."""

    __slots__ = ("_best", "_pressed", "_rate", "_seq", "_version", "_waiting", "demand", "table")

    def __init__(self) -> None:
        self.table = FairnessTable()
        self.demand = DemandMeter()
        """This gateway's waiting and refused requests per model, fair order or not: what
        budgets across gateways follow (`core/demand.py`)."""
        self._waiting: dict[str, dict[int, _Waiter]] = {}
        self._seq = 0
        self._version = 0
        """Bumped by every change of a waiter set or a standing: `_best` is valid until."""
        self._best: dict[str, tuple[int, _Waiter | None]] = {}
        self._rate: dict[str, _Rate] = {}
        """Per model, and under "" for every model: admissions per second lately."""
        self._pressed: dict[str, float] = {}
        """Per model: when a request last had to wait or was refused."""

    def contended(self, model: str, now: float, s: AvailabilitySettings) -> bool:
        """Whether an admission of `model` now is taken from someone: a request waits, or
        one waited or was refused within `retry_after_max_s` (it may be coming back)."""
        if self._waiting.get(model):
            return True
        pressed = self._pressed.get(model)
        return pressed is not None and now - pressed <= s.retry_after_max_s

    def waiting(self, model: str) -> int:
        return len(self._waiting.get(model, ()))

    def join(self, model: str, key: str, now: float) -> int:
        """A request of `key` starts waiting; returns its ticket (for `leave`, `first`)."""
        self._seq += 1
        self._pressed[model] = now
        self._waiting.setdefault(model, {})[self._seq] = _Waiter(key, now, self._seq)
        self._version += 1
        return self._seq

    def leave(self, model: str, ticket: int, now: float | None = None) -> None:
        """The waiter is done waiting (admitted, refused, or its client went away); `now`:
        when, so that the model counts as contended from the end of the wait."""
        waiters = self._waiting.get(model)
        if waiters is not None and waiters.pop(ticket, None) is not None:
            self._version += 1
            if now is not None:
                self._pressed[model] = max(self._pressed.get(model, now), now)
            if not waiters:
                del self._waiting[model]

    def rank(
        self, key: str, since: float, now: float, s: AvailabilitySettings
    ) -> tuple[float, float]:
        """Sort key of a request of `key` waiting since `since` (lower goes first)."""
        return (self.table.standing(key, now, s), since)

    def _first(self, model: str, now: float, s: AvailabilitySettings) -> _Waiter | None:
        cached = self._best.get(model)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        waiters = self._waiting.get(model)
        best = None
        if waiters:
            best = min(
                waiters.values(), key=lambda w: (*self.rank(w.key, w.since, now, s), w.ticket)
            )
        self._best[model] = (self._version, best)
        return best

    def first(
        self, model: str, key: str, ticket: int | None, now: float, s: AvailabilitySettings
    ) -> bool:
        """May this request take a free slot now: is no waiter of `model` ranked ahead?

        A waiter (`ticket`) goes only when it ranks first; a request not waiting yet goes
        when it ranks strictly ahead of the first waiter (ties go to who waited)."""
        best = self._first(model, now, s)
        if best is None or best.ticket == ticket:
            return True
        if ticket is not None:
            return False
        return self.rank(key, now, now, s) < self.rank(best.key, best.since, now, s)

    def gate(
        self,
        d: Decision,
        model: str,
        key: str,
        ticket: int | None,
        now: float,
        s: AvailabilitySettings,
        can_hold: bool,
    ) -> Decision:
        """The core's decision in fair order: while the request may still wait, a slot
        taken ahead of a waiter ranked first, a slot borrowed past this gateway's share
        (every gateway with waiters would borrow on the same poll-old estimate: measured,
        it doubled the overshoot at 4 gateways), or a shed past capacity, becomes a hold."""
        if not can_hold:
            return d
        if d.outcome is Outcome.ROUTE and (
            d.path is Path.BORROW or not self.first(model, key, ticket, now, s)
        ):
            return Decision(Outcome.HOLD, Path.HOLD, None, d.refused)
        if d.outcome is Outcome.SHED:
            return Decision(Outcome.HOLD, Path.HOLD, None, d.refused)
        return d

    def settle(
        self, d: Decision, model: str, key: str, now: float, s: AvailabilitySettings, rng: Random
    ) -> Decision:
        """Record the final decision for `key`; a refusal gets its Retry-After here."""
        if d.outcome is Outcome.ROUTE:
            self.table.admitted(key, now, s, self.contended(model, now, s))
            self._version += 1
            for name in (model, ""):
                rate = self._rate.get(name)
                if rate is None:
                    rate = self._rate[name] = _Rate(now)
                rate.add(now)
        elif d.outcome is Outcome.SHED:
            self._pressed[model] = now
            self.table.refused(key, now, s)
            self._version += 1
            return replace(d, retry_after_s=self.retry_after_s(model, now, s, rng))
        return d

    def admission_rate(self, model: str, now: float) -> float:
        """Admissions per second of `model` lately (0 before the first); "": every model."""
        rate = self._rate.get(model)
        return 0.0 if rate is None else rate.per_s(now)

    def turnover_s(self, in_flight: int, now: float) -> float | None:
        """Seconds in which this gateway's slots free once (Little's law: in flight over
        the admission rate), or None before the first admission."""
        rate = self.admission_rate("", now)
        return None if rate <= 0.0 else in_flight / rate

    def retry_after_s(self, model: str, now: float, s: AvailabilitySettings, rng: Random) -> int:
        """Seconds until a refused request can expect room, bounded and jittered.

        Ahead of it: every request waiting now and every refused key coming back (it is
        one of them); they are admitted at the observed rate. The estimate is clamped to
        `retry_after_min_s`..`retry_after_max_s`, then spread by up to a quarter of that
        range, so refusals at the floor do not all come back in the same second."""
        lo, hi = s.retry_after_min_s, s.retry_after_max_s
        rate = self.admission_rate(model, now)
        ahead = self.waiting(model) + self.table.refused_keys
        expected = ahead / rate if rate > 0.0 else float(lo)
        value = min(max(expected, lo), hi) + rng.random() * (hi - lo) / 4.0
        return max(lo, min(hi, round(value)))
