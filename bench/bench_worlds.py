"""The seed rule beside gridroute in each simulated world (issue 11).

    .venv/bin/python bench/bench_worlds.py [SCENARIO.yaml ...]

Runs every `examples/scenarios/world-*.yaml` (or the files given) and prints one table
row per (world, clients, policy): requests / ideal, overshoot, the peak 10 s window
share of the busiest site beside its share of the capacity free of external load, and
failed requests. `saturation` is the seed PR's rule; `gridroute` the default policy;
in worlds with external load `gridroute-unreported` is gridroute with operators that
relay no gateway reports (the share as it was before), measured in the same run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from gridroute.core import Policy
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[1] / "examples" / "scenarios"


def free_shares(sc: Scenario) -> dict[str, float]:
    """Each site's share of the slots not held by external load at the start."""
    free = {
        s.name: max(s.slots - (s.external.level(0.0) if s.external else 0), 0) for s in sc.sites
    }
    total = sum(free.values()) or 1
    return {k: v / total for k, v in free.items()}


def rows(sc: Scenario) -> list[tuple[str, int, str, dict[str, object]]]:
    out = []
    external = any(s.external is not None for s in sc.sites)
    for clients in sc.client_counts:
        for policy in sc.policies:
            out.append((sc.name, clients, policy.value, SimRun(sc, policy, clients).run().row))
        if external and Policy.GRIDROUTE in sc.policies:
            off = sc.model_copy(update={"gateway_reports": False})
            row = SimRun(off, Policy.GRIDROUTE, clients).run().row
            out.append((sc.name, clients, "gridroute-unreported", row))
    return out


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(ROOT.glob("world-*.yaml"))
    print(
        "| world | clients | policy | requests / ideal | overshoot "
        "| peak 10 s share (site) vs free-capacity share | failed |"
    )
    print("|---|---:|---|---:|---:|---|---:|")
    began = time.perf_counter()
    for path in paths:
        sc = load_scenario(path)
        caps = free_shares(sc)
        for name, clients, policy, row in rows(sc):
            peaks: dict[str, float] = row["peak_window_shares"]  # type: ignore[assignment]
            site = max(peaks, key=lambda k: peaks[k])
            ideal = int(row["ideal_requests"])  # type: ignore[call-overload]
            ratio = int(row["requests"]) / ideal if ideal else 0.0  # type: ignore[call-overload]
            print(
                f"| {name.removeprefix('world-')} | {clients} | {policy} | {ratio:.3f} "
                f"| {row['overshoot']} | {peaks[site]:.2f} ({site}) vs {caps[site]:.2f} "
                f"| {row['failed']} |",
                flush=True,
            )
    print(f"\n{len(paths)} worlds in {time.perf_counter() - began:.1f} s wall")


if __name__ == "__main__":
    main()
