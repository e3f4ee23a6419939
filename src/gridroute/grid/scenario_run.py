"""`gridroute sim run SCENARIO.yaml --live`: a simulator scenario on real processes.

Each (policy, clients) row of the scenario runs on a fresh `LocalGrid` (fake sites with
the scenario's slots and service times, an operator per site, a gateway per scenario
gateway at its site), with closed-loop clients split across the gateways as the
simulator splits them, and the scenario's events applied on cue. The row is then
counted with the simulator's own `Tally` over the same measured span, so the table,
the JSON keys and the plot are the simulator's, and the two runs read side by side.

**Time scale** K stretches every duration (service, scrape and poll intervals,
availability windows, timeouts, the run and its events) so a small machine keeps up:
the grid then serves 1/K of the simulated request rate for K times as long, sees the
same ratios, and every reported time is divided by K again. By default K is chosen so
the grid peaks near `AUTO_RATE` requests per second.

What differs from the simulator (real processes cannot do all it models):

* a **partition** fails the site's backend for every gateway (503, retried elsewhere)
  and freezes its operator, so its own gateways lose their operator too; the simulator
  keeps a site's own gateways and backend talking;
* a **fail** answers 503 at once instead of failing after the connect timeout, and
  requests already in service there finish;
* `retried` is not measured (null).
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from gridroute.core.select import Policy
from gridroute.grid.launcher import LocalGrid
from gridroute.grid.layout import PROVIDER, GridSpec, LocalSite
from gridroute.grid.sampler import Sampler, Tick
from gridroute.load.generator import run_load
from gridroute.load.result import LoadResult, Phase, RequestOutcome
from gridroute.sim.engine import RunResult, ideal_requests, split
from gridroute.sim.scenario import (
    ClientsEvent,
    FailEvent,
    PartitionEvent,
    RestartEvent,
    Scenario,
)
from gridroute.sim.tally import Probe, Tally

AUTO_RATE = 300.0
"""Requests per second the local grid is sized for by default: a gateway, a load
generator and six small servers keep it with room to spare on 2 cores."""


def auto_time_scale(sc: Scenario) -> float:
    """The smallest K (in steps of 0.5, at least 1) that keeps the peak rate near
    `AUTO_RATE`: min(clients, slots) / mean service / K."""
    fastest = min(s.service_scale for s in sc.sites) * sc.service.mean_s
    peak = min(max(sc.client_counts), sc.total_slots) / fastest
    return max(1.0, math.ceil(peak / AUTO_RATE * 2) / 2)


def grid_spec(sc: Scenario, policy: Policy, time_scale: float) -> GridSpec:
    """The local grid that stands in for the scenario's sites, operators and gateways."""
    return GridSpec(
        sites=tuple(LocalSite(s.name, s.slots, s.service_scale) for s in sc.sites),
        service_s=sc.service.mean_s,
        distribution=sc.service.distribution,
        sigma=sc.service.sigma,
        gateway_sites=tuple(sc.placement),
        policy=policy.value,
        availability=sc.availability,
        interval_s=sc.scrape_interval_s,
        poll_interval_s=sc.poll_interval_s,
        connect_timeout_s=sc.connect_timeout_s,
        time_scale=time_scale,
        seed=sc.seed,
    )


def client_phases(sc: Scenario, clients: int, time_scale: float) -> list[list[Phase]]:
    """Per gateway, the load generator's phases (wall seconds) following client events."""
    steps = sorted((ev.at_s, ev.clients) for ev in sc.events if isinstance(ev, ClientsEvent))
    bounds: list[tuple[float, int]] = [(0.0, clients)]
    for at, n in steps:
        if at < sc.duration_s:
            bounds.append((at, n))
    shares = sc.gateway_shares
    out: list[list[Phase]] = [[] for _ in shares]
    for i, (start, total) in enumerate(bounds):
        end = bounds[i + 1][0] if i + 1 < len(bounds) else sc.duration_s
        if end <= start:
            continue
        for g, n in enumerate(split(total, shares)):
            out[g].append(Phase((end - start) * time_scale, n))
    return out


@dataclass(frozen=True, slots=True)
class _Action:
    at_s: float
    """Scenario seconds."""
    run: Callable[[], None]


def _actions(sc: Scenario, grid: LocalGrid) -> list[_Action]:
    acts: list[_Action] = []
    for ev in sc.events:
        if isinstance(ev, PartitionEvent):
            acts.append(_Action(ev.at_s, functools.partial(grid.partition, ev.partition)))
            acts.append(_Action(ev.until_s, functools.partial(grid.restore, ev.partition)))
        elif isinstance(ev, FailEvent):
            acts.append(_Action(ev.at_s, functools.partial(grid.fail, ev.fail)))
            acts.append(_Action(ev.until_s, functools.partial(grid.recover, ev.fail)))
        elif isinstance(ev, RestartEvent):
            restart = functools.partial(grid.restart_operator, ev.restart_operator)
            acts.append(_Action(ev.at_s, restart))
    return sorted(acts, key=lambda a: a.at_s)


@dataclass
class _Measured:
    loads: list[LoadResult]
    ticks: list[list[Tick]]
    error: BaseException | None = None


def _drive_in_thread(grid: LocalGrid, phases: list[list[Phase]], sample_s: float) -> tuple[
    threading.Thread, _Measured
]:  # fmt: skip
    """Load every gateway and sample each one's status, on an event loop in a thread (the
    main thread keeps to starting processes and applying events)."""
    measured = _Measured([], [])

    async def main() -> None:
        samplers = [Sampler(url, grid.backend_urls, sample_s) for url in grid.gateway_urls]
        for s in samplers:
            s.start()
        try:
            loads = await asyncio.gather(
                *(run_load(url, model=grid.spec.model, phases=ph, timeout_s=600.0)
                  for url, ph in zip(grid.gateway_urls, phases, strict=True))
            )  # fmt: skip
        finally:
            for s in samplers:
                await s.stop()
        measured.loads = list(loads)
        measured.ticks = [s.ticks for s in samplers]

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # handed to the main thread
            measured.error = exc

    thread = threading.Thread(target=target, name="live-load", daemon=True)
    thread.start()
    return thread, measured


def run_row(
    sc: Scenario, policy: Policy, clients: int, time_scale: float, console: Console
) -> RunResult:
    """One row of the scenario on a fresh local grid."""
    began = time.perf_counter()
    k = time_scale
    grid = LocalGrid(grid_spec(sc, policy, k))
    try:
        grid.start()
        console.print(
            f"live: {policy.value}, {clients} clients: grid up; running "
            f"{sc.duration_s:g} s x {k:g} = {sc.duration_s * k:.0f} s",
            highlight=False,
        )
        phases = client_phases(sc, clients, k)
        sample_s = max(0.25, min(1.0, sc.poll_interval_s * k / 2))
        t0 = time.monotonic()
        thread, measured = _drive_in_thread(grid, phases, sample_s)
        for act in _actions(sc, grid):
            time.sleep(max(0.0, t0 + act.at_s * k - time.monotonic()))
            if not thread.is_alive():
                break
            act.run()
        thread.join()
        if measured.error is not None:
            raise measured.error
        grid.check()
    finally:
        grid.stop()
    row, series = tally_row(sc, policy, clients, k, measured.loads, measured.ticks)
    return RunResult(row, series, 0, time.perf_counter() - began)


def tally_row(
    sc: Scenario,
    policy: Policy,
    clients: int,
    k: float,
    loads: Sequence[LoadResult],
    ticks: Sequence[Sequence[Tick]],
) -> tuple[dict[str, Any], Any]:
    """Count a live run the simulator's way (scenario seconds = wall seconds / k)."""
    names = [s.name for s in sc.sites]
    index = {n: i for i, n in enumerate(names)}
    tally = Tally(names, sc.warmup_s, sc.duration_s)
    for load in loads:
        for r in load.records:
            end = r.end_s / k
            if r.outcome is RequestOutcome.OK and r.site in index:
                tally.completed(end, index[r.site], r.latency_s / k)
            elif r.outcome is RequestOutcome.SHED and tally.counts(r.start_s / k):
                tally.shed += 1
            elif r.outcome is RequestOutcome.FAILED and tally.counts(end):
                tally.failed += 1
    first = ticks[0] if ticks else []
    for tk in first:
        for name, st in tk.sites.items():
            if st.load is not None and name in index:
                tally.rho[index[name]].append((tk.t / k, st.load))
    tally.overshoot = _overshoot([tk for tk in first if tally.counts(tk.t / k)])
    tally.probes = _probes(sc, k, loads, ticks)
    row: dict[str, Any] = {"policy": policy.value, "clients": clients,
                           "gateways": len(sc.gateway_shares)}  # fmt: skip
    row.update(tally.row(sc.window_s))
    row["retried"] = None
    row["ideal_requests"] = ideal_requests(sc, clients)
    if tally.probes:
        row["events"] = [p.as_dict() for p in tally.probes]
    return row, tally.series()


def _overshoot(ticks: Sequence[Tick]) -> int:
    if len(ticks) < 2:
        return 0

    def total(tk: Tick) -> int:
        return sum(st.overshoot or 0 for st in tk.sites.values())

    return max(0, total(ticks[-1]) - total(ticks[0]))


def _probes(
    sc: Scenario, k: float, loads: Sequence[LoadResult], ticks: Sequence[Sequence[Tick]]
) -> list[Probe]:
    """What each gateway saw of each partitioned or failed site (the simulator's probes)."""
    probes = []
    for ev in sc.events:
        if not isinstance(ev, PartitionEvent | FailEvent):
            continue
        site = ev.partition if isinstance(ev, PartitionEvent) else ev.fail
        kind = "partition" if isinstance(ev, PartitionEvent) else "fail"
        for g, gw_ticks in enumerate(ticks):
            p = Probe(g, site, f"{site}/{PROVIDER}", kind, ev.at_s, ev.until_s)
            seen = [(tk.t / k, tk.sites[site]) for tk in gw_ticks if site in tk.sites]
            at_routed = _routed_before(seen, ev.at_s)
            silent = next(((t, st) for t, st in seen
                           if ev.at_s <= t < ev.until_s and st.live != "live"), None)  # fmt: skip
            if silent is not None:
                p.silent_at = silent[0]
                p.sent_before_silent = round(silent[1].routed - at_routed)
                p.sent_after_silent = round(_routed_before(seen, ev.until_s) - silent[1].routed)
            else:
                p.sent_before_silent = round(_routed_before(seen, ev.until_s) - at_routed)
            p.live_again_at = next(
                (t for t, st in seen if t >= ev.until_s and st.live == "live"), None
            )
            recs = loads[g].records if g < len(loads) else ()
            p.first_send_after = next(
                (r.start_s / k for r in recs if r.site == site and r.start_s / k >= ev.until_s),
                None,
            )
            probes.append(p)
    return probes


def _routed_before(seen: Sequence[tuple[float, Any]], at: float) -> float:
    prior = [st.routed for t, st in seen if t <= at]
    return prior[-1] if prior else 0.0


def run_live(
    sc: Scenario, time_scale: float | None = None, console: Console | None = None
) -> list[RunResult]:
    """Every policy at every client count of `sc`, on real processes."""
    console = console or Console(stderr=True)
    k = auto_time_scale(sc) if time_scale is None else time_scale
    rows = len(sc.policies) * len(sc.client_counts)
    console.print(
        f"live run of {sc.name}: {rows} rows x {sc.duration_s * k:.0f} s "
        f"(time scale {k:g}: service, intervals and windows x {k:g})",
        highlight=False,
    )
    return [
        run_row(sc, policy, clients, k, console)
        for clients in sc.client_counts
        for policy in sc.policies
    ]
