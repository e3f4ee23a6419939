"""How soon a partitioned site is routed to again after it is restored, on a live grid.

    .venv/bin/python bench/bench_return.py [PARTITION_S ...]      # default 12 13.3 14.6 15.9

A local grid (hub 32, west 32, east 16 slots, 1 s exponential service, 48 clients, one
gateway at hub) partitions east as the demo does (backend 503, operator frozen, metrics
stalled after a drain) for each given length in turn, restores it, and prints per cycle
the seconds from the restore until the gateway shows east live with its health up, and
when hub's operator next polled east successfully. Lengths that differ by a fraction of
a second put the thaw at different phases of the poll rounds. The seed's rule is two new
samples, "about two peer polls": about 2 s at the grid's 1 s intervals is the baseline.
"""

from __future__ import annotations

import sys
import time

from gridroute.grid.launcher import LocalGrid, http_json
from gridroute.grid.layout import GridSpec, LocalSite
from gridroute.load.background import BackgroundLoad

SPEC = GridSpec(
    sites=(LocalSite("hub", 32), LocalSite("west", 32), LocalSite("east", 16)),
    service_s=1.0,
    distribution="exponential",
)
WATCH_S = 12.0
"""Seconds each restore is watched."""


def main(lengths: list[float]) -> None:
    with LocalGrid(SPEC) as grid, BackgroundLoad(grid.gateway_url, SPEC.model, 48):
        ctx = grid.operator_context("hub")
        hub = grid.operator_urls["hub"]
        time.sleep(5)
        for length in lengths:
            grid.partition("east")  # returns after its drain of 3 service times
            time.sleep(max(0.0, length - 3 * SPEC.service_s))
            grid.restore("east")
            restored = time.monotonic()
            back: float | None = None
            polls: list[float] = []
            last_ok = None
            while time.monotonic() - restored < WATCH_S:
                row = grid.site_states()["east"]
                if back is None and row["live"] == "live" and row["health"] != "down":
                    back = time.monotonic() - restored
                op = http_json(f"{hub}/status", context=ctx, timeout_s=1)
                peer = next(p for p in op["peers"] if p["site"] == "east")
                if peer["lastSuccess"] != last_ok:
                    if last_ok is not None:
                        polls.append(round(time.monotonic() - restored, 1))
                    last_ok = peer["lastSuccess"]
                time.sleep(0.1)
            shown = "never" if back is None else f"{back:.1f} s"
            print(
                f"partition {length:5.1f} s: east live and up {shown} after the restore; "
                f"hub's polls of east ok at {polls[:5]} s",
                flush=True,
            )


if __name__ == "__main__":
    main([float(a) for a in sys.argv[1:]] or [12.0, 13.3, 14.6, 15.9])
