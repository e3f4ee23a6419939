"""One request's flow: pick, attempt, retry elsewhere, hold, fall through, refuse.

The gateway and the simulator drive this same generator (httpx's auth flow idea: the
flow yields what to do next and is sent what happened). It never awaits, sleeps or
reads a clock of its own: time comes from `grid.clock`, randomness from `grid.rng`.

    flow = request_flow(grid, model, policy)            # or overlay=OverlayRequest(...)
    step = next(flow)
    while not step.terminal:
        step = flow.send(<what happened: a Failure, Answered(status) or a Wake>)

Steps it yields (the last one is terminal, after which the generator is finished):

    Attempt(decision, snapshot, number, after)   send the request to decision.view
    Hold(deadline)                               wait for a wake (a request ended or a
                                                 new snapshot), at most until deadline
    Relay(decision)              terminal: the answer in hand goes to the client as it is
    Refuse(decision, status)     terminal: the gateway's own 429 / 404 / 503
    GiveUp(status, failure)      terminal: the last attempt failed before answering (502/504;
                                 503 when it was a last resort, every site judged down)

States and transitions (everything that decides a transition is in this file):

    DECIDE      decide on the newest snapshot (under an overlay: its binding, best
                viable group and picker, `core/overlay_request.py`; it never holds)
                  HOLD -> HOLDING; ROUTE -> ATTEMPT 1; otherwise -> Refuse
                  in fair order (a fairness key, `core/fairness.py`): ROUTE while a
                  waiter ranks ahead, or SHED, -> HOLDING (for `fair_wait_ms`)
    HOLDING     Wake.WOKE: DECIDE again (may hold again, same deadline)
                Wake.EXPIRED: DECIDE with can_hold=False (never holds)
                leaving it (or the flow closed) leaves the fair order's waiters
    ATTEMPT n   Answered(429 or 503), n < max, another site routes -> RETRY
                Answered(anything else, or no other site) -> Relay
                retryable Failure, n < max, another site routes -> RETRY
                retryable Failure otherwise, or a read timeout / broken answer -> GiveUp
                  (a retryable Failure of a LAST_RESORT attempt: GiveUp 503 no site)
    RETRY       decide again on the request's ORIGINAL snapshot (the one its attempt was
                decided on), excluding every site tried, can_hold=False -> ATTEMPT n+1
                (under an overlay: the next untried member of the failed one's group,
                then the next viable group: retry in the group, then fall through)

max is MAX_ATTEMPTS (2) without an overlay, `overlay.max_attempts` with one. So a
request makes at most max attempts, each on a different candidate, holds only before
its first, and ends in exactly one terminal step. Without an overlay this is the
gateway's behaviour since wave 1 (seed PR, "Errors"): retry once elsewhere before any
byte reached the client.

Passive outlier ejection (`core/ejection.py`) lives here too: every attempt's outcome is
recorded (a flow closed while an attempt is out records none), and every decision
treats ejected candidates as demoted (excluded; if nothing else routes, decided again
among them as a `last_resort`), the overlay's decisions too (skipped as if down).

Own-load accounting stays with the driver: it calls `own.start` before carrying out an
Attempt and `own.end` when that attempt is over (for a relayed answer, after its body),
so that the count covers exactly the time the request occupies the site.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from enum import StrEnum
from random import Random
from typing import Protocol

from gridroute.core.accounting import OwnLoad
from gridroute.core.ejection import Ejections
from gridroute.core.fairness import FairAdmission, fair_hold_s, fair_order_on
from gridroute.core.gridstate import Snapshot
from gridroute.core.group_route import GroupDecision
from gridroute.core.overlay_request import OverlayRequest
from gridroute.core.prefix import PrefixRequest
from gridroute.core.select import Decision, Outcome, Path, Policy, Reason, decide, retry_after_s
from gridroute.core.view import SiteView


class Failure(StrEnum):
    """An attempt that ended before the backend's answer (label values of
    `grid_route_retries_total{reason}`, with `status_429` and `status_503`)."""

    CONNECT_FAILED = "connect_failed"
    """Refused, unreachable, TLS handshake failed, or the site left the config."""
    CONNECT_TIMEOUT = "connect_timeout"
    RESET = "reset"
    """The connection was reset before the answer's headers."""
    DISCONNECTED = "disconnected"
    """The connection closed before the answer's headers (a backend going away)."""
    READ_TIMEOUT = "read_timeout"
    """The backend stayed silent past the read timeout before answering."""
    BROKEN = "broken"
    """Any other failure before the headers (a malformed answer)."""


class Wake(StrEnum):
    """What ended a Hold."""

    WOKE = "woke"
    """One of this gateway's requests ended or a new snapshot arrived."""
    EXPIRED = "expired"
    """The hold's deadline passed."""


@dataclass(slots=True)
class Answered:
    """The backend's answer headers are in, with this status."""

    status: int


Feed = Failure | Answered | Wake
"""What a driver sends into the flow.

Steps and feeds are slotted dataclasses but not frozen: a request makes three of them
on the hot path, a frozen dataclass's `__init__` costs about three times as much
(measured: the simulator ran 1.55x slower than before the flow with them frozen,
1.33x without), and none outlives the step it belongs to."""

FAILURES: dict[Failure, tuple[bool, int]] = {
    Failure.CONNECT_FAILED: (True, 502),
    Failure.CONNECT_TIMEOUT: (True, 504),
    Failure.RESET: (True, 502),
    Failure.DISCONNECTED: (True, 502),
    Failure.READ_TIMEOUT: (False, 504),
    Failure.BROKEN: (False, 502),
}
"""Failure -> (retried once on another site?, status the client gets when not)."""

RETRY_STATUS = frozenset({429, 503})
"""Answers that are retried once on another site before any byte reached the client."""

GATEWAY_ERROR_STATUS = frozenset({502, 503, 504})
"""Answers that count towards ejection (Envoy's gateway errors); every Failure does too."""

REFUSAL_STATUS: dict[Outcome, int] = {
    Outcome.SHED: 429,
    Outcome.UNKNOWN_MODEL: 404,
    Outcome.NO_SITE: 503,
}

MAX_ATTEMPTS = 2

NO_KEYS: frozenset[str] = frozenset()


@dataclass(slots=True)
class Attempt:
    """Send the request to `decision.view`; then send in a Failure or Answered."""

    decision: Decision
    snapshot: Snapshot
    """The snapshot the decision was made on: the request's own (a retry reuses it)."""
    number: int
    """1 for the first attempt, n + 1 for the retry after attempt n."""
    after: tuple[str, str] | None = None
    """For a retry: (site, reason) of the attempt that failed (for retry metrics)."""
    choice: GroupDecision | None = None
    """Under an overlay: its group, picker, step and affinity (the evidence headers)."""
    terminal = False

    @property
    def view(self) -> SiteView:
        view = self.decision.view
        assert view is not None  # an Attempt is made only of a routed decision
        return view


@dataclass(slots=True)
class Hold:
    """Wait in the admission queue; then send in Wake.WOKE or, at `deadline`, Wake.EXPIRED."""

    deadline: float
    decision: Decision
    hold_s: float = 0.0
    """The whole hold's length (`max_queue_ms`), for a driver that keeps its own
    deadline on another clock (the gateway waits on the monotonic clock)."""
    terminal = False


@dataclass(slots=True)
class Relay:
    """Terminal: the answer in hand is the client's answer."""

    decision: Decision
    status: int
    terminal = True


@dataclass(slots=True)
class Refuse:
    """Terminal: the gateway answers itself (429 shed, 404 unknown model, 503 no site)."""

    decision: Decision
    status: int
    choice: GroupDecision | None = None
    """Under an overlay: the choice that found no viable group (its picker, for metrics)."""
    terminal = True


@dataclass(slots=True)
class GiveUp:
    """Terminal: the last attempt failed before answering; the client gets `status`."""

    decision: Decision
    status: int
    failure: Failure
    retry_after_s: int | None = None
    """Set with status 503: the attempt was a last resort (every candidate judged
    down) and never reached a backend, so the client is told "no healthy site, retry
    later" (the seed's 503 + Retry-After), not a gateway error of a live backend."""
    terminal = True


Step = Attempt | Hold | Relay | Refuse | GiveUp


class FlowError(TypeError):
    """The driver sent something the current step does not take (a bug in the driver)."""


class FlowGrid(Protocol):
    """What the flow reads of one gateway (the gateway's LiveGrid, the simulator's gateway)."""

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def rng(self) -> Random: ...

    @property
    def own(self) -> OwnLoad:
        """This gateway's in-flight per candidate (the flow reads `own.counts`)."""
        ...

    @property
    def ejections(self) -> Ejections: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def fairness(self) -> FairAdmission:
        """This gateway's fair admission order past capacity (`core/fairness.py`)."""
        ...


def request_flow(
    grid: FlowGrid,
    model: str,
    policy: Policy,
    affinity: str | None = None,
    overlay: OverlayRequest | None = None,
    client: str | None = None,
    prefix: PrefixRequest | None = None,
) -> Generator[Step, Feed, None]:
    """The flow of one request to `model` (see the module docstring); `overlay` when
    the routing overlay names the model. `client` is the request's fairness key: with
    it, and fair order on (`core/fairness.py`), DECIDE and HOLDING admit in fair order.
    `prefix` is the request's prefix (`core/prefix.py`): its first decisions prefer the
    site holding it (never a retry), and a relayed answer below 500 records the site
    that served it in the gateway's prefix map."""
    clock = grid.clock
    ejections = grid.ejections
    now = clock()
    snap = grid.snapshot
    who = client or ""
    if who:
        grid.fairness.demand.arrived(model, who)
    fair = None
    if client and fair_order_on(snap.settings, policy, overlay is not None):
        fair = grid.fairness
    choice: GroupDecision | None = None
    if overlay is not None:
        d, choice = _by_overlay(grid, overlay, snap, model, NO_KEYS, None, now)
    else:
        # In fair order the gate holds a borrow while the request may wait, so the one site
        # left within the budget is taken at once (`decide`'s `borrow_by_pairs`): held, the
        # request waited for one of its own slots at a less full site (0.18 s on average
        # at 500 ms) or, one time in ten, its whole hold and then borrowed (BENCHMARKS.md).
        by_pairs = fair is None
        d = _decide(grid, snap, model, policy, affinity, NO_KEYS, True, now, prefix, by_pairs)
    if fair is not None:
        d = fair.gate(d, model, who, None, now, snap.settings, True)
    if d.outcome is Outcome.HOLD:
        hold_s = snap.settings.max_queue_ms / 1000.0
        ticket = 0
        if fair is not None:
            turnover = fair.turnover_s(grid.own.total(), now)
            hold_s, ticket = fair_hold_s(snap.settings, turnover), fair.join(model, who, now)
        deadline = now + hold_s
        demand = grid.fairness.demand
        demand.hold(model)  # waiting counts as demand, fair order or not (core/demand.py)
        try:
            while d.outcome is Outcome.HOLD:
                wake = yield Hold(deadline, d, hold_s)
                if not isinstance(wake, Wake):
                    raise FlowError(f"a Hold takes a Wake, not {wake!r}")
                snap = grid.snapshot
                now = clock()
                woke = wake is Wake.WOKE
                if (
                    woke
                    and fair is not None
                    and not fair.first(model, who, ticket, now, snap.settings)
                ):
                    continue  # another waiter goes first: no decision needed (all are woken)
                d = _decide(
                    grid, snap, model, policy, affinity, NO_KEYS, woke, now, prefix, by_pairs
                )
                if fair is not None:
                    d = fair.gate(d, model, who, ticket, now, snap.settings, woke)
        finally:
            demand.release(model)
            if fair is not None:
                fair.leave(model, ticket, clock())
    if fair is not None:
        d = fair.settle(d, model, who, now, snap.settings, grid.rng)
    if d.outcome is Outcome.SHED:
        # A refused client comes back after its Retry-After: demand until then.
        away = d.retry_after_s if d.retry_after_s is not None else snap.settings.retry_after_max_s
        grid.fairness.demand.refused(model, now, away, who)
    tried = NO_KEYS
    after: tuple[str, str] | None = None
    number = 0
    limit = MAX_ATTEMPTS if overlay is None else overlay.max_attempts
    while True:
        view = d.view
        if d.outcome is not Outcome.ROUTE or view is None:
            yield Refuse(d, REFUSAL_STATUS.get(d.outcome, 503), choice)
            return
        number += 1
        key = view.key
        sent_at = now  # an attempt is sent as soon as it is decided
        ejections.sent(key, sent_at)
        fed: Feed | None = None
        try:
            fed = yield Attempt(d, snap, number, after, choice)
        finally:
            if fed is None:  # closed without an outcome: the client went away
                ejections.abandon(key)
        now = clock()
        settings = snap.settings
        if isinstance(fed, Answered):
            status = fed.status
            ejections.record(key, status not in GATEWAY_ERROR_STATUS, now, settings, sent_at)
            if status in RETRY_STATUS and number < limit:
                nxt = _retry(grid, snap, model, policy, tried | {key}, now, overlay, key)
                if nxt is not None:
                    tried, after = tried | {key}, (view.site, f"status_{status}")
                    d, choice = nxt
                    continue
            if prefix is not None and status < 500:
                prefix.served(key, now)
            yield Relay(d, status)
            return
        if not isinstance(fed, Failure):
            ejections.abandon(key)
            raise FlowError(f"an Attempt takes a Failure or Answered, not {fed!r}")
        ejections.record(key, False, now, settings, sent_at)
        retryable, status = FAILURES[fed]
        if retryable and number < limit:
            nxt = _retry(grid, snap, model, policy, tried | {key}, now, overlay, key)
            if nxt is not None:
                tried, after = tried | {key}, (view.site, fed.value)
                d, choice = nxt
                continue
        if retryable and d.path is Path.LAST_RESORT:
            yield GiveUp(d, REFUSAL_STATUS[Outcome.NO_SITE], fed, retry_after_s(grid.rng))
            return
        yield GiveUp(d, status, fed)
        return


def _retry(
    grid: FlowGrid,
    snap: Snapshot,
    model: str,
    policy: Policy,
    exclude: frozenset[str],
    now: float,
    overlay: OverlayRequest | None = None,
    last: str | None = None,
) -> tuple[Decision, GroupDecision | None] | None:
    """Where a retry goes: another site on the request's snapshot, or nowhere (under an
    overlay: in the group of `last`, the key that just failed, then the next group)."""
    if overlay is None:
        d, choice = _decide(grid, snap, model, policy, None, exclude, False, now), None
    else:
        d, choice = _by_overlay(grid, overlay, snap, model, exclude, last, now)
    return (d, choice) if d.outcome is Outcome.ROUTE and d.view is not None else None


def _by_overlay(
    grid: FlowGrid,
    overlay: OverlayRequest,
    snap: Snapshot,
    model: str,
    tried: frozenset[str],
    last: str | None,
    now: float,
) -> tuple[Decision, GroupDecision | None]:
    """The overlay's pick, with ejected candidates skipped (its last resort: them)."""
    ejected = grid.ejections.out(now, snap)
    return overlay.decide(snap, model, grid.rng, grid.own.counts, tried, last, ejected)


def _decide(
    grid: FlowGrid,
    snap: Snapshot,
    model: str,
    policy: Policy,
    affinity: str | None,
    tried: frozenset[str],
    can_hold: bool,
    now: float,
    prefix: PrefixRequest | None = None,
    by_pairs: bool = True,
) -> Decision:
    """The core's pick, with ejected candidates demoted (`by_pairs`: `decide`'s
    `borrow_by_pairs`; a retry, never held, keeps it true).

    Ejected keys are excluded (and, unless this request tried them already, counted
    refused as `demoted`); only when that leaves
    no site at all is the pick made again among them, as a `last_resort`, as for any
    demoted candidate."""
    ejected = grid.ejections.out(now, snap)
    own = grid.own
    args = (snap, model, grid.rng, policy, own.counts, affinity, can_hold)
    if not ejected:
        return decide(*args, tried, prefix, by_pairs, own.peaks)
    d = decide(*args, tried | ejected, prefix, by_pairs, own.peaks)
    if d.outcome is Outcome.NO_SITE:
        last = decide(*args, tried, None, by_pairs, own.peaks)
        if last.outcome is Outcome.ROUTE:
            return replace(last, path=Path.LAST_RESORT)
        return last
    plan = snap.plan(model)
    if plan is None:
        return d
    demoted = tuple(
        (v.site, Reason.DEMOTED.value)
        for v in plan.views
        if v.key in ejected and v.key not in tried and v.ready
    )
    return replace(d, refused=d.refused + demoted) if demoted else d
