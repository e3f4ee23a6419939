"""The default policy against the seed rule in generated worlds (issue 23).

    .venv/bin/python bench/bench_differential.py [--worlds 60]

Draws `--worlds` worlds of each kind (`sim/compare.world`: 2-8 sites of 1-256 slots,
1-8 gateways, failed scrapes) and runs `gridroute` and the seed rule `saturation` on
the same request stream in each:

* own: all load gridroute's; prints gridroute's goodput over the seed's (the baseline,
  measured in the same run), worst and total, and the worlds where it served fewer;
* outside: 50-120 % of each site's slots held from outside; prints how many site shares
  differ by more than 5 points (beyond the seed's own sampling noise) and which named
  rule explains each, and any that no rule explains.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from random import Random

from gridroute.core import Policy
from gridroute.sim.compare import compare, world
from gridroute.sim.scenario import parse_scenario

BOTH = [Policy.GRIDROUTE, Policy.SATURATION]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, default=60, help="worlds of each kind [60]")
    args = ap.parse_args()
    began = time.perf_counter()
    ours = theirs = 0
    worst = float("inf")
    fewer: list[int] = []
    for i in range(args.worlds):
        sc = parse_scenario(world(Random(f"own:{i}"), external=(0.0, 0.0), broken=False))
        (c,) = compare(sc, BOTH)
        a, b = c.rows["gridroute"]["requests"], c.rows["saturation"]["requests"]
        ours, theirs = ours + a, theirs + b
        if b:
            worst = min(worst, a / b)
        if a < b:
            fewer.append(i)
    print(
        f"own load, {args.worlds} worlds: goodput gridroute / saturation "
        f"{ours / max(theirs, 1):.3f} in all, {worst:.3f} at worst; "
        f"worlds where gridroute served fewer: {fewer or 'none'}"
    )
    why: Counter[str] = Counter()
    unexplained: list[tuple[int, str]] = []
    sites = 0
    ratio_ours = ratio_theirs = 0
    for i in range(args.worlds):
        sc = parse_scenario(world(Random(f"outside:{i}"), external=(0.5, 1.2)))
        (c,) = compare(sc, BOTH)
        ratio_ours += c.rows["gridroute"]["requests"]
        ratio_theirs += c.rows["saturation"]["requests"]
        for d in c.sites:
            sites += 1
            why[d.departure or "within 5 points"] += 1
            if d.departure == "unexplained":
                unexplained.append((i, d.site))
    print(
        f"outside load, {args.worlds} worlds, {sites} sites: "
        + ", ".join(f"{k} {v}" for k, v in why.most_common())
        + f"; goodput gridroute / saturation {ratio_ours / max(ratio_theirs, 1):.3f}; "
        f"unexplained: {unexplained or 'none'}"
    )
    print(f"{2 * args.worlds} worlds in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
