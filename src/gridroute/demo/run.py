"""`gridroute demo`: a local grid, closed-loop traffic in phases, a live view, a summary.

    under capacity -> partition one site -> the site returns -> past capacity (shedding)

The grid is real (`LocalGrid`: fake sites, an operator per site in a mutual-TLS ring,
a gateway); the traffic is the load generator's closed-loop clients sent through the
gateway; the live view and the plot read the gateway's `/grid/status` and the sites'
own completion counts once a second (`Sampler`). Every process started is stopped
on the way out, whether the run ends, fails, or is interrupted with Ctrl-C or SIGTERM.

Scale: by default 128/128/64 slots (the seed's sites) with a 1 s service time instead
of the seed's 200 ms, so the grid peaks at 320 requests/s: the same shares and rho as
the seed's 1600/s, at a rate one gateway, the load generator and six small servers
sustain on 2 cores with room to spare.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.live import Live

from gridroute.demo.report import (
    FaultTimes,
    PhaseSpan,
    fairness_line,
    fault_report,
    summary_table,
    write_plot,
)
from gridroute.demo.view import digest, render
from gridroute.grid.launcher import GridError, LocalGrid
from gridroute.grid.layout import GridSpec, LocalSite, default_sites
from gridroute.grid.sampler import Sampler, Tick, site_ticks
from gridroute.load.background import BackgroundLoad
from gridroute.load.generator import run_load
from gridroute.load.result import LoadResult

WIDE = 150
"""Columns the output gets when stdout is not a terminal."""
DIGEST_EVERY_S = 5.0
"""How often a run without a terminal prints a progress line."""
PHASE_FRACTIONS = (0.25, 0.25, 0.2, 0.3)
SERVE_SHARE = 0.1
"""`--serve` traffic as a fraction of all slots."""
"""Share of `duration_s` given to: under capacity, partition, return, past capacity. The
partition needs ~6 s to be seen and the overload ~8 s to latch shedding."""


def parse_sites(text: str) -> tuple[LocalSite, ...]:
    """`hub:128,west:128,east:64` -> site specs; a clear `ValueError` otherwise."""
    sites = []
    for part in text.split(","):
        name, sep, slots = part.strip().partition(":")
        if not sep or not name or not slots.strip().isdigit() or int(slots) < 1:
            raise ValueError(f"--sites: expected NAME:SLOTS[,NAME:SLOTS...], got {part!r}")
        sites.append(LocalSite(name.strip(), int(slots)))
    return tuple(sites)


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What `gridroute demo` runs; every CLI option lands here."""

    sites: tuple[LocalSite, ...] = field(default_factory=default_sites)
    service_ms: float = 1000.0
    clients: int | None = None
    """Clients of the under-capacity phases; default 60 % of all slots."""
    peak_clients: int | None = None
    """Clients of the past-capacity phase; default 150 % of all slots."""
    duration_s: float = 60.0
    """Seconds of traffic over all phases (0: no phases, useful with `serve`)."""
    partition: str | None = None
    """Site to partition; default the last site that runs no gateway."""
    plot: Path = Path("out/gridroute-demo.png")
    serve: bool = False
    signals: str = "mesh"
    """Signals transport of the grid: `mesh` or `nats` (a local nats-server)."""

    def spec(self) -> GridSpec:
        return GridSpec(
            sites=self.sites,
            service_s=self.service_ms / 1000.0,
            distribution="exponential",
            gateway_sites=(self.sites[0].name,),
            signals=self.signals,
        )

    @property
    def total_slots(self) -> int:
        return sum(s.slots for s in self.sites)

    @property
    def base_clients(self) -> int:
        return self.clients if self.clients is not None else max(1, round(0.6 * self.total_slots))

    @property
    def overload_clients(self) -> int:
        if self.peak_clients is not None:
            return self.peak_clients
        return max(1, round(1.5 * self.total_slots))

    @property
    def serve_clients(self) -> int:
        """Clients of `--serve` (after the phases, or alone with duration 0): light
        traffic, 10 % of all slots, so the dashboard moves while the grid idles."""
        return max(1, round(SERVE_SHARE * self.total_slots))

    @property
    def cut_site(self) -> str | None:
        if self.partition is not None:
            return self.partition
        others = [s.name for s in self.sites[1:]]
        return others[-1] if others else None


@dataclass(frozen=True, slots=True)
class DemoPhase:
    name: str
    duration_s: float
    clients: int
    fault: str | None = None
    """`partition` or `restore`, applied as the phase begins."""


def plan(opts: DemoOptions) -> list[DemoPhase]:
    """The phases for `opts` (without a site to cut, the partition phases are skipped)."""
    d = [opts.duration_s * f for f in PHASE_FRACTIONS]
    site = opts.cut_site
    phases = [DemoPhase("under capacity", d[0], opts.base_clients)]
    if site is not None:
        phases.append(DemoPhase(f"partition {site}", d[1], opts.base_clients, "partition"))
        phases.append(DemoPhase(f"{site} returns", d[2], opts.base_clients, "restore"))
    else:
        phases[0] = DemoPhase("under capacity", d[0] + d[1] + d[2], opts.base_clients)
    phases.append(DemoPhase("past capacity, shedding on", d[3], opts.overload_clients))
    return [p for p in phases if p.duration_s > 0]


@dataclass
class DemoPass:
    """What one pass through the phases produced."""

    result: LoadResult
    ticks: list[Tick]
    spans: list[PhaseSpan]
    fault: FaultTimes | None


class _Clock:
    """Which phase is running, for the view (the load generator keeps its own copy)."""

    def __init__(self, phases: list[DemoPhase]) -> None:
        self.phases = phases
        self.index = 0
        self.started = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.started

    @property
    def phase(self) -> DemoPhase:
        return self.phases[self.index]

    def left_s(self) -> float:
        end = sum(p.duration_s for p in self.phases[: self.index + 1])
        return end - self.now()


def _routed_now(grid: LocalGrid, site: str) -> float | None:
    """How many requests the gateway has routed to `site` so far (None if unreadable)."""
    try:
        row = site_ticks(grid.status(), {}).get(site)
    except (GridError, OSError, ValueError):
        return None
    return None if row is None else row.routed


async def _script(grid: LocalGrid, clock: _Clock, site: str | None) -> FaultTimes | None:
    """Advance the phase marker and apply each phase's fault on time."""
    fault: FaultTimes | None = None
    at = 0.0
    for i, phase in enumerate(clock.phases):
        await asyncio.sleep(max(0.0, at - clock.now()))
        clock.index = i
        if phase.fault == "partition" and site is not None:
            routed = await asyncio.to_thread(_routed_now, grid, site)
            fault = FaultTimes(site, clock.now(), None, routed)
            await asyncio.to_thread(grid.partition, site)
        elif phase.fault == "restore" and site is not None and fault is not None:
            await asyncio.to_thread(grid.restore, site)
            fault = FaultTimes(site, fault.cut_at, clock.now(), fault.routed_at_cut)
        at += phase.duration_s
    return fault


async def _show(
    console: Console, sampler: Sampler, clock: _Clock, caps: dict[str, float], done: asyncio.Event
) -> None:
    """Redraw the live view (a terminal) or print a digest line now and then (a pipe)."""

    def view() -> object:
        p = clock.phase
        return render(sampler.ticks, caps, p.name, clock.left_s(), p.clients)

    if console.is_terminal:
        with Live(view(), console=console, refresh_per_second=4, transient=False) as live:  # type: ignore[arg-type]
            while not done.is_set():
                live.update(view())  # type: ignore[arg-type]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 0.5)
        return
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), DIGEST_EVERY_S)
        console.print(digest(sampler.ticks, clock.phase.name, clock.phase.clients),
                      highlight=False, markup=False, soft_wrap=True)  # fmt: skip


async def drive(grid: LocalGrid, opts: DemoOptions, console: Console) -> DemoPass:
    """DemoPass every phase against the grid's gateway with the live view on."""
    phases = plan(opts)
    caps = capacity_shares(opts.sites)
    sampler = Sampler(grid.gateway_url, grid.backend_urls, interval_s=1.0)
    clock = _Clock(phases)
    done = asyncio.Event()
    sampler.start()
    clock.started = sampler.started
    shower = asyncio.create_task(_show(console, sampler, clock, caps, done))
    script = asyncio.create_task(_script(grid, clock, opts.cut_site))
    try:
        result = await run_load(
            grid.gateway_url,
            model=grid.spec.model,
            phases=[(p.duration_s, p.clients) for p in phases],
            timeout_s=max(60.0, 30 * opts.service_ms / 1000),
            identities=True,  # each client its own API key: the fair order tells them apart
        )
        fault = await script
    finally:
        done.set()
        script.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await shower
        await sampler.stop()
    spans, at = [], 0.0
    for p in phases:
        spans.append(PhaseSpan(p.name, p.clients, at, at + p.duration_s))
        at += p.duration_s
    return DemoPass(result, sampler.ticks, spans, fault)


def capacity_shares(sites: tuple[LocalSite, ...]) -> dict[str, float]:
    total = sum(s.slots for s in sites)
    return {s.name: s.slots / total for s in sites}


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (make killed, a CI timeout) unwinds like Ctrl-C, so cleanup runs."""

    def raise_interrupt(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _describe(opts: DemoOptions) -> str:
    sites = ", ".join(f"{s.name} {s.slots}" for s in opts.sites)
    links = "publishing to a local nats-server" if opts.signals == "nats" else "mutual TLS ring"
    return (
        f"local grid: {len(opts.sites)} fake sites ({sites} slots, "
        f"{opts.service_ms:g} ms mean service), an operator per site ({links}), "
        "one gateway; all on 127.0.0.1"
    )


def run_demo(opts: DemoOptions, console: Console | None = None) -> int:
    """The whole demo; returns the exit status (0 ok, 1 the grid failed, 130 interrupted)."""
    console = console or Console()
    if not console.is_terminal:
        console.width = max(console.width, WIDE)  # a log or a pipe: never squeeze the table
    grid = LocalGrid(opts.spec(), keep_failed=True)
    with _sigterm_as_interrupt():
        try:
            console.print(f"[bold]gridroute demo[/]: starting a {_describe(opts)}")
            t0 = time.monotonic()
            grid.start()
            console.print(
                f"up in {time.monotonic() - t0:.1f} s: gateway {grid.gateway_url}  "
                f"dashboard {grid.dashboard_url}",
                highlight=False,
            )
            if opts.duration_s > 0:
                run = asyncio.run(drive(grid, opts, console))
                grid.check()
                report(console, opts, run)
            if opts.serve:
                serve(grid, opts, console)
            return 0
        except GridError as exc:
            # The processes' logs say why: they are kept (a clean run deletes its work dir).
            console.print(f"[bold red]the local grid failed:[/] {exc}", highlight=False)
            console.print(f"logs kept in {grid.procs.log_dir}", highlight=False)
            return 1
        except KeyboardInterrupt:
            console.print("interrupted: stopping the grid")
            return 130
        finally:
            n = len(grid.procs.children)
            grid.stop()
            console.print(f"stopped {n} processes")


def report(console: Console, opts: DemoOptions, run: DemoPass) -> None:
    """The summary table, the partition timings and the plot's path."""
    caps = capacity_shares(opts.sites)
    console.print(summary_table(run.result, run.spans, caps))
    if run.spans:
        console.print(fairness_line(run.result, run.spans[-1]), highlight=False)
    if run.fault is not None:
        for line in fault_report(run.result, run.ticks, run.fault):
            console.print(line, highlight=False)
    try:
        path = write_plot(opts.plot, run.result, run.ticks, run.spans, caps, run.fault)
    except Exception as exc:  # a plot is a bonus: never fail the demo over it
        console.print(f"[yellow]plot not written[/] ({type(exc).__name__}: {exc})")
    else:
        console.print(f"plot: {path.resolve()}", highlight=False)


def serve(grid: LocalGrid, opts: DemoOptions, console: Console) -> None:
    """Keep the grid up under light traffic (`serve_clients`) until Ctrl-C, with the URLs
    to look at."""
    console.print(f"\n[bold]serving[/]: dashboard {grid.dashboard_url}", highlight=False)
    console.print(f"  OpenAI API: {grid.gateway_url}/v1 (model {grid.spec.model})", highlight=False)
    site = opts.cut_site or opts.sites[-1].name
    fake = grid.backend_urls[site]
    console.print(
        f"  partition {site} by hand: curl -XPOST {fake}/admin/fail -d '{{\"status\": 503}}'; "
        f"curl -XPOST {fake}/admin/pause -d '{{\"metrics\": true}}'; "
        f"undo: curl -XPOST {fake}/admin/recover",
        highlight=False,
        soft_wrap=True,
    )
    if not _serves_dashboard(grid):
        console.print("  [yellow]note[/]: this gateway does not serve /dashboard yet; its "
                      f"JSON status is at {grid.gateway_url}/grid/status")  # fmt: skip
    clients = opts.serve_clients
    console.print(f"  {clients} clients (10 % of the slots) keep sending; Ctrl-C stops everything")
    load = BackgroundLoad(grid.gateway_url, grid.spec.model, clients)
    # Ctrl-C is the way out of --serve, not a failure: the load stops, then the grid.
    with contextlib.suppress(KeyboardInterrupt), load:
        while True:
            time.sleep(1.0)
            grid.check()


def _serves_dashboard(grid: LocalGrid) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(grid.dashboard_url, timeout=2.0) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False
