"""Per-site share and rho over time, one row of panels per run, as one PNG.

A table says how a policy did on average; the plot shows *how*: whether shares swing
between polls, whether a site's rho sits past 1 (queueing) while another idles, and
what a partition or a failure did second by second.
"""

from __future__ import annotations

from pathlib import Path

from gridroute.sim.engine import RunResult
from gridroute.sim.scenario import Scenario

SHARE_BUCKET_S = 1.0
"""Shares are drawn per second (the series is finer; one second reads better)."""


def write_plot(path: Path, scenario: Scenario, results: list[RunResult]) -> None:
    """Draw every run's per-site share and rho over time into `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig, axes = plt.subplots(n, 2, figsize=(12, 2.4 * n + 0.6), squeeze=False, sharex=True)
    caps = {s.name: s.slots / scenario.total_slots for s in scenario.sites}
    colors = {name: f"C{i}" for i, name in enumerate(caps)}
    for row_axes, result in zip(axes, results, strict=True):
        ax_share, ax_rho = row_axes
        s = result.series
        per = max(1, round(SHARE_BUCKET_S / s.bucket_s))
        nb = len(s.completions[0])
        starts = list(range(0, nb, per))
        totals = [sum(sum(r[i : i + per]) for r in s.completions) for i in starts]
        times = [s.start_s + i * s.bucket_s for i in starts]
        for name, row in zip(s.sites, s.completions, strict=True):
            shares = [
                sum(row[i : i + per]) / tot if tot else 0.0
                for i, tot in zip(starts, totals, strict=True)
            ]
            ax_share.step(times, shares, where="post", color=colors[name], label=name)
            ax_share.axhline(caps[name], color=colors[name], linestyle=":", linewidth=0.8)
        for name, points in zip(s.sites, s.rho, strict=True):
            if points:
                ax_rho.plot(
                    [p[0] for p in points], [p[1] for p in points], color=colors[name], label=name
                )
        ax_rho.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        label = f"{result.row['policy']}, {result.row['clients']} clients"
        ax_share.set_ylabel("share / s")
        ax_share.set_ylim(-0.02, 1.05)
        ax_share.set_title(f"{label}: share of completed requests", fontsize=9)
        ax_rho.set_ylabel("rho")
        ax_rho.set_title(f"{label}: (in service + queued) / slots at each scrape", fontsize=9)
        for ev in scenario.events:
            until = getattr(ev, "until_s", None)
            for ax in row_axes:
                if until is not None:
                    ax.axvspan(ev.at_s, until, color="red", alpha=0.08)
                else:
                    ax.axvline(ev.at_s, color="red", alpha=0.4, linewidth=0.8)
    axes[0][0].legend(loc="upper right", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("simulated seconds")
    fig.suptitle(scenario.name)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
