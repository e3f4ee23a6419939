"""What the demo prints and draws once its phases are over.

Pure over the load generator's records and the sampler's ticks: one table row per
phase (shares against capacity shares, the worst 10 s window, 429s, failures,
latency), a sentence on how fast the gateway saw the partitioned site go silent and
come back, and a PNG of share, rho and throughput per second with the phases marked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from gridroute.grid.sampler import Tick
from gridroute.load.result import LoadResult, RequestOutcome


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One phase as it ran: its name, clients and where it sits on the run's clock."""

    name: str
    clients: int
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class FaultTimes:
    """When the demo partitioned a site and restored it (run clock, seconds)."""

    site: str
    cut_at: float
    restored_at: float | None
    routed_at_cut: float | None = None
    """The gateway's routed count for the site read just before the cut (exact, where
    the last tick before it can be up to a sampling interval older)."""


def phase_result(result: LoadResult, index: int, span: PhaseSpan) -> LoadResult:
    """The requests sent during one phase, as a `LoadResult` of their own."""
    recs = tuple(r for r in result.records if r.phase == index)
    return LoadResult(recs, span.end_s - span.start_s)


def peak_share(result: LoadResult, start_s: float, end_s: float, window_s: float = 10.0
               ) -> tuple[str, float] | None:  # fmt: skip
    """The largest share one site had of the completions in any `window_s` window lying
    wholly inside [start_s, end_s] (the whole span when it is shorter), by the second.
    Windows that hang over the span's edge would catch a few stragglers and read 100 %."""
    series = result.timeseries(1.0)
    first, last = math.ceil(start_s), min(len(series), math.floor(end_s))
    width = max(1, min(round(window_s), last - first))
    best: tuple[str, float] | None = None
    for lo in range(first, max(first, last - width) + 1):
        counts: dict[str, int] = {}
        for bucket in series[lo : lo + width]:
            for site, n in bucket.items():
                counts[site] = counts.get(site, 0) + n
        total = sum(counts.values())
        if total:
            site, n = max(counts.items(), key=lambda kv: kv[1])
            if best is None or n / total > best[1]:
                best = (site, n / total)
    return best


def _secs(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def summary_table(
    result: LoadResult, spans: Sequence[PhaseSpan], capacity_shares: Mapping[str, float]
) -> Table:
    """One row per phase and one for the whole run."""
    t = Table(title="gridroute demo: requests by phase (shares = completed requests)")
    t.add_column("phase")
    t.add_column("clients", justify="right")
    t.add_column("ok", justify="right")
    t.add_column("req/s", justify="right")
    for name, cap in capacity_shares.items():
        t.add_column(f"{name} ({cap:.2f})", justify="right")
    for col in ("peak 10s", "429", "failed", "p50 s", "p99 s"):
        t.add_column(col, justify="right")
    rows = [(span.name, span.clients, phase_result(result, i, span), span.start_s, span.end_s)
            for i, span in enumerate(spans)]  # fmt: skip
    end = spans[-1].end_s if spans else result.duration_s
    rows.append(("whole run", max((s.clients for s in spans), default=0), result, 0.0, end))
    for i, (name, clients, part, start_s, end_s) in enumerate(rows):
        if i == len(rows) - 1:
            t.add_section()
        peak = peak_share(result, start_s, end_s)
        dur = part.duration_s or 1.0
        t.add_row(
            name,
            str(clients),
            str(part.ok),
            f"{part.ok / dur:.0f}",
            *(f"{part.shares.get(site, 0.0):.2f}" for site in capacity_shares),
            "-" if peak is None else f"{peak[0]} {peak[1]:.2f}",
            str(part.shed),
            str(part.failed),
            _secs(part.latency_s(0.5)),
            _secs(part.latency_s(0.99)),
        )
    return t


def fault_report(result: LoadResult, ticks: Sequence[Tick], fault: FaultTimes) -> list[str]:
    """Sentences on the partition: how soon the gateway stopped routing to the site, how
    many requests it still sent there (each one refused and retried elsewhere), and how
    soon the site took traffic again after it returned."""
    site = fault.site
    end = fault.restored_at if fault.restored_at is not None else math.inf
    cut = [tk for tk in ticks if fault.cut_at <= tk.t < end and site in tk.sites]
    out = next((tk for tk in cut if tk.sites[site].state != "live"), None)
    lines = []
    if out is None:
        lines.append(
            f"{site}: partitioned at {fault.cut_at:.1f} s; the gateway kept it live "
            "(the partition was shorter than its freshness window and health checks)"
        )
    else:
        before, noticed, last = _sent_dead(ticks, cut, out, fault)
        lines.append(
            f"{site}: partitioned at {fault.cut_at:.1f} s; the gateway stopped routing to it "
            f"({out.sites[site].state}) {out.t - fault.cut_at:.1f} s later, after sending it "
            f"{noticed - before:.0f} requests that were retried elsewhere, "
            f"and sent it {last - noticed:.0f} after that"
        )
    if fault.restored_at is not None and out is not None:
        back = next(
            (tk.t for tk in ticks if tk.t >= fault.restored_at and _state(tk, site) == "live"),
            None,
        )
        first = next(
            (r.start_s for r in result.records
             if r.site == site and r.outcome is RequestOutcome.OK
             and r.start_s >= fault.restored_at),
            None,
        )  # fmt: skip
        seen = "never" if back is None else f"{back - fault.restored_at:.1f} s"
        sent = "none" if first is None else f"{first - fault.restored_at:.1f} s"
        lines.append(
            f"{site}: restored at {fault.restored_at:.1f} s; live again after {seen}, "
            f"first request served there after {sent}"
        )
    elif fault.restored_at is not None:
        lines.append(f"{site}: restored at {fault.restored_at:.1f} s")
    return lines


def _sent_dead(
    ticks: Sequence[Tick], cut: Sequence[Tick], out: Tick, fault: FaultTimes
) -> tuple[float, float, float]:
    """Requests sent to the cut site (before the cut, when noticed, at the last tick of
    the cut) as counts whose differences are what the report says.

    Where the site's own server counts the requests it answered with its failure, those
    counts: exactly the requests that reached it dead. The gateway's routed count,
    read just before the cut, is the fallback: it also counts what the gateway routed
    between that read and the failure taking effect (served requests, sent before the
    site died; the final wave-2 demo's 7 included 2 of them)."""
    site = fault.site
    counts = [tk.sites[site].failed_requests for tk in (out, cut[-1])]
    prior = [tk.sites[site] for tk in ticks if tk.t <= fault.cut_at and site in tk.sites]
    if counts[0] is not None and counts[1] is not None:
        start = prior[-1].failed_requests if prior else None
        return float(start or 0), float(counts[0]), float(counts[1])
    before = fault.routed_at_cut
    if before is None:
        before = _routed(ticks, site, fault.cut_at)
    return before, out.sites[site].routed, cut[-1].sites[site].routed


def fairness_line(result: LoadResult, span: PhaseSpan) -> str:
    """Who got served during `span` (issue 16): per-client served min / median / max and
    Jain's index over the phase's clients (each sends as its own API key)."""
    served = [0] * span.clients
    for r in result.records:
        inside = span.start_s <= r.end_s <= span.end_s
        if r.outcome is RequestOutcome.OK and inside and 0 <= r.client < span.clients:
            served[r.client] += 1
    if not served:
        return f"{span.name}: no clients"
    ordered = sorted(served)
    total, squares = sum(served), sum(c * c for c in served)
    jain = total * total / (len(served) * squares) if squares else 0.0
    return (
        f"{span.name}: {span.clients} clients, served per client min / median / max "
        f"{ordered[0]} / {ordered[len(ordered) // 2]} / {ordered[-1]}, "
        f"Jain's fairness index {jain:.3f}"
    )


def _routed(ticks: Sequence[Tick], site: str, at: float) -> float:
    """The gateway's routed count for `site` at the last tick before `at`."""
    prior = [tk.sites[site].routed for tk in ticks if tk.t <= at and site in tk.sites]
    return prior[-1] if prior else 0.0


def _state(tick: Tick, site: str) -> str | None:
    st = tick.sites.get(site)
    return None if st is None else st.state


def write_plot(
    path: Path,
    result: LoadResult,
    ticks: Sequence[Tick],
    spans: Sequence[PhaseSpan],
    capacity_shares: Mapping[str, float],
    fault: FaultTimes | None,
) -> Path:
    """Share of completions, reported rho and throughput per second, phases marked (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    series = result.timeseries(1.0)
    secs = [i + 0.5 for i in range(len(series))]
    colors = {name: f"C{i}" for i, name in enumerate(capacity_shares)}
    fig, (ax_share, ax_rho, ax_rate) = plt.subplots(3, 1, figsize=(11, 7.5), sharex=True)
    for name, cap in capacity_shares.items():
        shares = [b.get(name, 0) / max(1, sum(b.values())) for b in series]
        ax_share.plot(secs, shares, color=colors[name], label=name)
        ax_share.axhline(cap, color=colors[name], linestyle=":", linewidth=0.9)
        rho = [(tk.t, tk.sites[name].rho_reported) for tk in ticks
               if name in tk.sites and tk.sites[name].rho_reported is not None]  # fmt: skip
        ax_rho.plot([p[0] for p in rho], [p[1] for p in rho], color=colors[name], label=name)
    ax_rho.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ok = [sum(b.values()) for b in series]
    shed = [0] * len(series)
    for r in result.records:
        if r.outcome is RequestOutcome.SHED and int(r.end_s) < len(shed):
            shed[int(r.end_s)] += 1
    ax_rate.plot(secs, ok, color="C2", label="completed / s")
    ax_rate.plot(secs, shed, color="C3", label="429 / s")
    for i, span in enumerate(spans):
        for ax in (ax_share, ax_rho, ax_rate):
            if i % 2:
                ax.axvspan(span.start_s, span.end_s, color="grey", alpha=0.07)
        ax_share.text(span.start_s + 0.3, 1.0, span.name, fontsize=8, va="top")
    if fault is not None:
        end = fault.restored_at if fault.restored_at is not None else secs[-1] if secs else 0
        for ax in (ax_share, ax_rho, ax_rate):
            ax.axvspan(fault.cut_at, end, color="red", alpha=0.08)
    ax_share.set_ylim(-0.02, 1.08)
    ax_share.set_ylabel("share of completions")
    ax_share.legend(loc="upper right", fontsize=8)
    ax_rho.set_ylabel("rho (reported)")
    ax_rho.legend(loc="upper left", fontsize=8)
    ax_rate.set_ylabel("requests / s")
    ax_rate.set_xlabel("seconds since traffic started")
    ax_rate.legend(loc="upper left", fontsize=8)
    fig.suptitle("gridroute demo: share (dotted: capacity share), rho and throughput per site")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
