"""The event loop: simulated time as a heap of events, one run per policy and client count.

Nothing sleeps: the loop pops the earliest event, runs its handler, and the handler
pushes what follows (a completion, the next scrape, a client's next send). Events at
the same instant run in a fixed order, `PRIORITY`, so that every request ending at an
instant frees its slot before any request sent at that instant arrives; otherwise a
closed loop with constant service times would count overshoot that is only an
artefact of processing order.

The grid is up before the clients start: just before t=0 every operator scrapes, polls
its peers, and every gateway reads its operator once; after that each periodic activity
runs at its own seeded phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from heapq import heappop, heappush
from itertools import pairwise
from random import Random
from typing import Any

from gridroute.core import Live, Policy
from gridroute.core.fairness import fair_order_on
from gridroute.core.flow import (
    Answered,
    Attempt,
    Failure,
    GiveUp,
    Hold,
    Refuse,
    Relay,
    Step,
    Wake,
    request_flow,
)
from gridroute.core.group_route import build_table
from gridroute.core.prefix import PrefixRequest
from gridroute.sim.gateway import SimGateway
from gridroute.sim.model import Network, SimOperator, SimRequest, SimSite
from gridroute.sim.scenario import (
    MODEL,
    ClientsEvent,
    FailEvent,
    MetricsDownEvent,
    PartitionEvent,
    RestartEvent,
    Scenario,
)
from gridroute.sim.sessions import BLOCK_TOKENS, Workload
from gridroute.sim.tally import Probe, Series, Tally
from gridroute.sim.tier_audit import NOT_TIERED, tier_skip
from gridroute.sim.worlds import available_slots, build_operators, build_sites, external_changes
from gridroute.wire.overlay import to_index

COMPLETE, CONNECT_FAIL, DISTURB, SCRAPE, OP_POLL, GW_POLL, DRAIN, EXPIRE, SEND = range(9)
PRIORITY = (
    "complete",
    "connect_fail",
    "disturb",
    "scrape",
    "op_poll",
    "gw_poll",
    "drain",
    "expire",
    "send",
)
"""Order of events that fall on the same instant (index = priority, lowest first)."""

PRIME_AT = -1e-3
"""The grid's first scrape, poll and read, just before the clients start at 0: a sample
taken at the very instant of the first sends would be ambiguous about them."""

NO_SITE_RETRY_S = 1.0
"""A client that got 503/404 (no site at all) tries again after this long."""

FULL_RETRY_S = 1.0
"""A client that got a full site's 429 (nowhere else took it) tries again after this long."""

Handler = Callable[[float, Any], None]


@dataclass(slots=True)
class RunResult:
    """One row of the report with what it took to compute it."""

    row: dict[str, Any]
    series: Series
    events: int
    wall_s: float


def split(total: int, shares: list[float]) -> list[int]:
    """`total` clients over gateways by `shares` (largest remainder, so they sum exactly)."""
    raw = [total * s for s in shares]
    counts = [int(r) for r in raw]
    order = sorted(range(len(shares)), key=lambda i: (-(raw[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def ideal_requests(scenario: Scenario, clients: int) -> int:
    """min(clients, slots free of external load) / mean service x measured seconds,
    following client steps and external-load changes."""
    steps = sorted((ev.at_s, ev.clients) for ev in scenario.events if isinstance(ev, ClientsEvent))
    start, end = scenario.warmup_s, scenario.duration_s
    mean = scenario.service.mean_s
    cuts = sorted({start, end, *(at for at, _ in steps), *external_changes(scenario)})
    total = 0.0
    for a, b in pairwise(cuts):
        if b <= start or a >= end:
            continue
        a, b = max(a, start), min(b, end)
        n = clients
        for at, value in steps:
            if at <= a:
                n = value
        total += min(n, available_slots(scenario, a)) / mean * (b - a)
    return round(total)


class SimRun:
    """One simulation of `scenario` under `policy` with `clients` clients."""

    def __init__(
        self, scenario: Scenario, policy: Policy, clients: int, audit: bool = False
    ) -> None:
        sc = scenario
        self.sc = sc
        self.policy = policy
        self.clients = clients
        # Read each of gridroute's first attempts against the seed's tiers (`tier_audit`;
        # the row's `tier_rule`). Off by default: it walks every site per decision.
        self.audit = audit and policy is Policy.GRIDROUTE
        base = f"{sc.seed}:{clients}"
        names = [s.name for s in sc.sites]
        self.sites = build_sites(sc, base)
        self.site_by_name = {s.name: s for s in self.sites}
        self.site_index = {s.key: i for i, s in enumerate(self.sites)}
        self.operators = build_operators(sc, base)
        self.op_by_site = {op.site: op for op in self.operators}
        self.network = Network()
        self.now = PRIME_AT
        """The time of the event being handled: every gateway's clock."""
        table = None if sc.overlay is None else build_table(to_index(sc.overlay))
        self.gateways = [
            SimGateway(
                i,
                site,
                names,
                sc.availability,
                policy,
                Random(f"{base}:pick:{i}"),
                self.clock,
                table,
                sc.overlay_max_attempts,
                Random(f"{base}:round:{i}"),
            )
            for i, site in enumerate(sc.placement)
        ]
        self.report = sc.gateway_reports
        self.phases = Random(f"{base}:phases")
        self.backoff = Random(f"{base}:backoff")
        """Clients' Retry-After waits, when they jitter them (`Scenario.retry_jitter`)."""
        self.tally = Tally(names, sc.warmup_s, sc.duration_s)
        self.workload = (
            None if sc.sessions is None else Workload(sc.sessions, Random(f"{base}:sessions"))
        )
        """Multi-turn conversations (scenario `sessions`): each send is a client's next turn."""
        self.client_gw: list[int] = []
        self.client_active: list[bool] = []
        self.client_keys: list[str] = []
        """Each client's fairness key (its identity, as an API key is at a gateway)."""
        self.heap: list[tuple[float, int, int, Handler, Any]] = []
        self.seq = 0
        self.events = 0
        self._probing = False

    # -- scheduling -------------------------------------------------------------------

    def clock(self) -> float:
        return self.now

    def at(self, t: float, prio: int, fn: Handler, arg: Any = None) -> None:
        self.seq += 1
        heappush(self.heap, (t, prio, self.seq, fn, arg))

    def run(self) -> RunResult:
        began = time.perf_counter()
        sc = self.sc
        self._start()
        end = sc.duration_s + 1e-9
        heap = self.heap
        events = 0
        while heap:
            t, _, _, fn, arg = heap[0]
            if t > end:
                break
            heappop(heap)
            self.now = t
            fn(t, arg)
            events += 1
        self.events = events
        row: dict[str, Any] = {
            "policy": self.policy.value,
            "clients": self.clients,
            "gateways": len(self.gateways),
        }
        measured = self.tally.row(sc.window_s)
        ideal = ideal_requests(sc, self.clients)
        row.update(measured)
        if self.workload is not None:
            row["sessions"] = self.workload.started
        row["ideal_requests"] = ideal
        if self.tally.probes:
            row["events"] = [p.as_dict() for p in self.tally.probes]
        return RunResult(row, self.tally.series(), events, time.perf_counter() - began)

    def _start(self) -> None:
        sc = self.sc
        for i, op in enumerate(self.operators):
            op.scrape(self.sites[i], PRIME_AT)
        for op in self.operators:
            op.poll(self._peers(op), self.network, PRIME_AT)
        for gw in self.gateways:
            gw.refresh(self.op_by_site[gw.site], PRIME_AT, self.report)
        # A grid that is up has relayed its gateways' reports: one more round of peer
        # polls and reads, so each gateway knows how many others report before the
        # clients start (as a gateway that has run a while does).
        for op in self.operators:
            op.poll(self._peers(op), self.network, PRIME_AT)
        for gw in self.gateways:
            gw.refresh(self.op_by_site[gw.site], PRIME_AT, self.report)
        # Periodic work, each at its own phase within its first interval.
        for i in range(len(self.sites)):
            self.at(self.phases.uniform(0, sc.scrape_interval_s), SCRAPE, self._scrape, i)
        for i in range(len(self.operators)):
            self.at(self.phases.uniform(0, sc.poll_interval_s), OP_POLL, self._op_poll, i)
        for g in range(len(self.gateways)):
            self.at(self.phases.uniform(0, sc.gateway_poll_s), GW_POLL, self._gw_poll, g)
        self._set_clients(0.0, self.clients)
        for ev in sc.events:
            self.at(ev.at_s, DISTURB, self._disturb_start, ev)
            if isinstance(ev, PartitionEvent | FailEvent | MetricsDownEvent):
                self.at(ev.until_s, DISTURB, self._disturb_end, ev)
            if isinstance(ev, PartitionEvent | FailEvent):
                self._add_probes(ev)
        for i, spec in enumerate(sc.sites):
            if spec.external is not None:
                for at, level in spec.external.changes(sc.duration_s):
                    if at > 0:  # the level at 0 is in place before the grid is primed
                        self.at(at, DISTURB, self._external, (i, level))

    def _peers(self, op: SimOperator) -> list[SimOperator]:
        return [p for p in self.operators if p is not op]

    # -- the grid's periodic work --------------------------------------------------------

    def _scrape(self, t: float, i: int) -> None:
        site = self.sites[i]
        self.operators[i].scrape(site, t)
        self.tally.rho[i].append((t, site.rho))
        if site.queue and self.tally.counts(t):
            self.tally.queue_s += len(site.queue) * self.sc.scrape_interval_s
        self.at(t + self.sc.scrape_interval_s, SCRAPE, self._scrape, i)

    def _op_poll(self, t: float, i: int) -> None:
        op = self.operators[i]
        op.poll(self._peers(op), self.network, t)
        self.at(t + self.sc.poll_interval_s, OP_POLL, self._op_poll, i)

    def _gw_poll(self, t: float, g: int) -> None:
        gw = self.gateways[g]
        snap = gw.refresh(self.op_by_site[gw.site], t, self.report)
        if g == 0 and self.tally.counts(t):
            # How long the first gateway read each site at a reported rho of 1 or more
            # (out of the seed's tiers with room): what `sim/compare.py` checks before
            # it reads an overshoot in the warm-up as the reason the seed dropped a site.
            for v in snap.views:
                if v.rho is not None and v.rho >= 1.0:
                    full = self.tally.read_full
                    full[v.site] = full.get(v.site, 0.0) + self.sc.gateway_poll_s
        if self._probing:
            self._probe_refresh(gw, t)
        if gw.held:
            self._drain(t, g)
        self.at(t + self.sc.gateway_poll_s, GW_POLL, self._gw_poll, g)

    # -- clients ------------------------------------------------------------------------

    def _set_clients(self, t: float, total: int) -> None:
        """Grow or shrink each gateway's clients to its share of `total`."""
        targets = split(total, self.sc.gateway_shares)
        for g, want in enumerate(targets):
            mine = [c for c, gw in enumerate(self.client_gw) if gw == g and self.client_active[c]]
            for c in mine[want:]:
                self.client_active[c] = False
            for _ in range(want - len(mine)):
                self.client_gw.append(g)
                self.client_active.append(True)
                self.client_keys.append(f"client-{len(self.client_keys)}")
                self.tally.served_by.append(0)
                self.at(t, SEND, self._send, len(self.client_gw) - 1)

    def _send(self, t: float, client: int) -> None:
        if not self.client_active[client]:
            return
        gw = self.gateways[self.client_gw[client]]
        req = SimRequest(client, t)
        prefix = None
        if self.workload is not None:
            req.blocks, req.tokens = self.workload.prompt(client)
            pa = self.sc.prefix_affinity
            if pa.enabled and req.blocks:  # as the gateway: no whole block, no affinity
                blocks = req.blocks[: pa.max_blocks]
                prefix = PrefixRequest.start(blocks, pa, gw.prefixes, t)
        flow = req.flow = request_flow(
            gw,
            MODEL,
            gw.policy,
            overlay=gw.overlay,
            client=self.client_keys[client],
            prefix=prefix,
        )
        self._do(gw, req, next(flow), t)

    def _next(self, t: float, client: int, delay: float = 0.0) -> None:
        self.at(t + delay, SEND, self._send, client)

    # -- the request path: carry out the core's request flow ------------------------------

    def _feed(
        self, gw: SimGateway, req: SimRequest, fed: Failure | Answered | Wake, t: float
    ) -> None:
        assert req.flow is not None
        self._do(gw, req, req.flow.send(fed), t)

    def _audit(self, gw: SimGateway, step: Attempt, key: str, t: float) -> None:
        """Count one first attempt against the seed's tier rule (`tier_audit`) on what
        `decide` read: the sites it was offered (ejected ones are excluded from a first
        attempt) and the counts it used (the sample's own with `local_accounting` off).
        The overflow paths (nothing with room) and overlay picks are outside the rule."""
        path = step.decision.path
        if path in NOT_TIERED:
            return
        snap = step.snapshot
        plan = snap.plan(MODEL)
        if plan is None:
            return
        ejected = gw.ejections.out(t)  # without the snapshot: reads, judges nothing
        healthy = [v for v in plan.healthy if v.key not in ejected]
        s = snap.settings
        counts = gw.own.counts if s.local_accounting else {v.key: v.own_at_sample for v in healthy}
        verdict = tier_skip(healthy, counts, gw.own.peaks, key, s.shedding, s.fair_share)
        self.tally.tier_rule[verdict or "kept"] += 1

    def _do(self, gw: SimGateway, req: SimRequest, step: Step, t: float) -> None:
        """Carry out one step of the request's flow."""
        if isinstance(step, Attempt):
            if step.after is not None and self.tally.counts(t):
                self.tally.retried += 1
            key = step.view.key
            self.tally.picked(t, self.sites[self.site_index[key]].name, step.decision.path.value)
            if self.audit and step.after is None and self.tally.counts(t):
                self._audit(gw, step, key, t)
            self._dispatch(gw, req, key, t)
        elif isinstance(step, Hold):
            if not req.held:  # woken and held again: it keeps its place and its deadline
                req.held = True
                req.held_at = t
                gw.held.append(req)
                self.at(step.deadline, EXPIRE, self._expire, req)
        elif isinstance(step, Relay) and step.status == 429:
            # A full site's refusal that found nowhere else: the client sees a 429.
            if self.tally.counts(t):
                self.tally.shed += 1
            self._next(t, req.client, FULL_RETRY_S)
        elif isinstance(step, Relay):
            view = step.decision.view
            assert view is not None
            self.tally.completed(t, self.site_index[view.key], t - req.sent_at, req.client)
            self._next(t, req.client)
        elif isinstance(step, Refuse) and step.status == 429:
            if self.tally.counts(t):
                self.tally.shed += 1
            wait = float(step.decision.retry_after_s or 1)
            if self.sc.retry_jitter:  # between half and all of it, as `gridroute load` does
                wait = self.backoff.uniform(wait / 2, wait)
            self._next(t, req.client, wait)
        elif isinstance(step, Refuse):
            if self.tally.counts(t):
                self.tally.failed += 1
            self._next(t, req.client, NO_SITE_RETRY_S)
        else:
            assert isinstance(step, GiveUp)
            if self.tally.counts(t):
                self.tally.failed += 1
            self._next(t, req.client)

    def _dispatch(self, gw: SimGateway, req: SimRequest, key: str, t: float) -> None:
        gw.own.start(key, t, MODEL)
        req.key = key
        req.serial += 1
        site = self.sites[self.site_index[key]]
        if self._probing:
            self._probe_send(gw, key, t)
        if not (site.up and self.network.reachable(gw.site, site.name)):
            self.at(
                t + self.sc.connect_timeout_s, CONNECT_FAIL, self._connect_fail, (req, req.serial)
            )
            return
        req.site = site
        if not site.has_slot:
            if site.refuses:  # `when_full: refuse`: a 429 at once, before any service
                self._end_attempt(gw, req, t)
                self._feed(gw, req, Answered(429), t)
                return
            if self.tally.counts(t):
                self.tally.overshoot += 1
                self.tally.overshot[site.name] = self.tally.overshot.get(site.name, 0) + 1
            elif t < self.tally.start_s:
                warm = self.tally.overshot_warmup
                warm[site.name] = warm.get(site.name, 0) + 1
            site.queue.append(req)
            self.tally.queued(t, 1)
        else:
            self._serve(site, req, t)

    def _serve(self, site: SimSite, req: SimRequest, t: float) -> None:
        site.busy += 1
        site.serving.add(req)
        prefill = 0.0
        if site.cache is not None and self.workload is not None:
            # The prefill of the tokens this site has not cached comes first (the first
            # token's wait), then the decode the service time models.
            cached = min(site.cache.serve(req.blocks) * BLOCK_TOKENS, req.tokens)
            prefill = (req.tokens - cached) / self.workload.spec.prefill_tokens_per_second
            if self.tally.counts(t):
                self.tally.prefill(req.tokens, cached, t + prefill - req.sent_at)
        self.at(t + prefill + site.service_s(), COMPLETE, self._complete, (req, req.serial))

    def _end_attempt(self, gw: SimGateway, req: SimRequest, t: float) -> None:
        """The attempt in flight is over: the gateway's count drops, held requests wake."""
        assert req.key is not None
        gw.own.end(req.key, t, MODEL)
        req.key = None
        req.site = None
        req.serial += 1  # events still pending for this attempt are now stale
        if gw.held and not gw.drain_pending:
            gw.drain_pending = True
            self.at(t, DRAIN, self._drain, gw.index)

    def _complete(self, t: float, arg: tuple[SimRequest, int]) -> None:
        req, serial = arg
        if serial != req.serial:
            return  # the site failed while this was in service
        site = req.site
        assert site is not None
        site.busy -= 1
        site.serving.discard(req)
        if site.queue and site.has_slot:
            self.tally.queued(t, -1)
            self._serve(site, site.queue.popleft(), t)
        gw = self.gateways[self.client_gw[req.client]]
        self._end_attempt(gw, req, t)
        self._feed(gw, req, Answered(200), t)

    def _connect_fail(self, t: float, arg: tuple[SimRequest, int]) -> None:
        req, serial = arg
        if serial != req.serial:
            return
        gw = self.gateways[self.client_gw[req.client]]
        self._end_attempt(gw, req, t)
        self._feed(gw, req, Failure.CONNECT_TIMEOUT, t)

    def _drain(self, t: float, g: int) -> None:
        """Wake the held requests, oldest first, as the gateway wakes all of them.

        Every held request decides on the same inputs (no request holds after an
        attempt, and the simulator sets no affinity), and a decision to hold changes
        nothing, so once one must still wait every later one would too: stopping there
        is the gateway's wake-all, exactly, at a fraction of the cost."""
        gw = self.gateways[g]
        gw.drain_pending = False
        held = gw.held
        settings = gw.snapshot.settings
        if len(held) > 1 and fair_order_on(settings, gw.policy):
            # In fair order only the first-ranked waiter may take a slot: wake in rank order.
            rank, keys = gw.fairness.rank, self.client_keys
            live = sorted(
                (r for r in held if r.held),
                key=lambda r: rank(keys[r.client], r.held_at, t, settings),
            )
            held.clear()
            held.extend(live)
        while held:
            req = held[0]
            if not req.held:  # its hold expired meanwhile
                held.popleft()
                continue
            assert req.flow is not None
            step = req.flow.send(Wake.WOKE)
            if isinstance(step, Hold):
                break
            held.popleft()
            req.held = False
            self._do(gw, req, step, t)

    def _expire(self, t: float, req: SimRequest) -> None:
        if not req.held:
            return
        req.held = False  # left in the deque; the next drain drops it
        self._feed(self.gateways[self.client_gw[req.client]], req, Wake.EXPIRED, t)

    # -- disturbances -------------------------------------------------------------------

    def _disturb_start(self, t: float, ev: Any) -> None:
        if isinstance(ev, PartitionEvent):
            self.network.partition(ev.partition)
        elif isinstance(ev, FailEvent):
            self._fail_site(t, self.site_by_name[ev.fail])
        elif isinstance(ev, RestartEvent):
            self.op_by_site[ev.restart_operator].restart()
        elif isinstance(ev, ClientsEvent):
            self._set_clients(t, ev.clients)
        elif isinstance(ev, MetricsDownEvent):
            self.site_by_name[ev.metrics_down].metrics_up = False

    def _disturb_end(self, t: float, ev: Any) -> None:
        if isinstance(ev, PartitionEvent):
            self.network.heal(ev.partition)
        elif isinstance(ev, FailEvent):
            self.site_by_name[ev.fail].up = True
        elif isinstance(ev, MetricsDownEvent):
            self.site_by_name[ev.metrics_down].metrics_up = True

    def _external(self, t: float, change: tuple[int, int]) -> None:
        """External load at a site changes level; freed slots go to its queue."""
        site = self.sites[change[0]]
        site.external = change[1]
        while site.queue and site.has_slot:
            self.tally.queued(t, -1)
            self._serve(site, site.queue.popleft(), t)

    def _fail_site(self, t: float, site: SimSite) -> None:
        """The backend dies: everything in service or queued there loses its connection
        before its answer, which the flow retries once elsewhere like the gateway does
        (the simulator's answers are not streamed: nothing reached the client yet)."""
        site.up = False
        lost = [*site.serving, *site.queue]
        self.tally.queued(t, -len(site.queue))
        site.serving.clear()
        site.queue.clear()
        site.busy = 0
        for req in lost:
            gw = self.gateways[self.client_gw[req.client]]
            self._end_attempt(gw, req, t)
            self._feed(gw, req, Failure.DISCONNECTED, t)

    # -- probes: what each gateway saw of a disturbed site ------------------------------

    def _add_probes(self, ev: PartitionEvent | FailEvent) -> None:
        site = ev.partition if isinstance(ev, PartitionEvent) else ev.fail
        kind = "partition" if isinstance(ev, PartitionEvent) else "fail"
        key = self.site_by_name[site].key
        for gw in self.gateways:
            if kind == "partition" and gw.site == site:
                continue  # a gateway inside the partition still reaches its own site
            self.tally.probes.append(Probe(gw.index, site, key, kind, ev.at_s, ev.until_s))
            self._probing = True

    def _probe_refresh(self, gw: SimGateway, t: float) -> None:
        snap = gw.snapshot
        assert snap is not None
        for p in self.tally.probes:
            if p.gateway != gw.index:
                continue
            view = snap.view(p.key)
            live = view is not None and view.live is Live.LIVE
            if p.silent_at is None and p.at_s <= t < p.until_s and not live:
                p.silent_at = t
            if p.live_again_at is None and t >= p.until_s and live:
                p.live_again_at = t

    def _probe_send(self, gw: SimGateway, key: str, t: float) -> None:
        for p in self.tally.probes:
            if p.gateway != gw.index or p.key != key:
                continue
            if p.at_s <= t < p.until_s:
                if p.silent_at is None:
                    p.sent_before_silent += 1
                else:
                    p.sent_after_silent += 1
            elif t >= p.until_s and p.first_send_after is None:
                p.first_send_after = t


def run_scenario(
    scenario: Scenario, on_row: Callable[[RunResult], None] | None = None
) -> list[RunResult]:
    """Every row of `scenario`: each client count under each policy, in that order."""
    results: list[RunResult] = []
    for clients in scenario.client_counts:
        for policy in scenario.policies:
            result = SimRun(scenario, policy, clients).run()
            results.append(result)
            if on_row is not None:
                on_row(result)
    return results
