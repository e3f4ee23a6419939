"""The default policy against the seed rule in generated worlds (issue 23).

    .venv/bin/python bench/bench_differential.py [--worlds 60] [--first 0] [--jobs 1]

Draws `--worlds` worlds of each kind (`sim/compare.world`: 2-8 sites of 1-256 slots,
1-8 gateways, failed scrapes), numbered from `--first`, and runs `gridroute` and the
seed rule `saturation` on the same request stream in each (`--jobs` processes; the
figures do not depend on it):

* own: all load gridroute's; prints gridroute's goodput over the seed's (the baseline,
  measured in the same run), worst and total, and the worlds where it served fewer;
* outside: 50-120 % of each site's slots held from outside; prints how many site shares
  differ by more than 5 points (beyond the seed's own sampling noise) and which named
  rule explains each, and any that no rule explains (each such site is run on 7 more
  request streams first: `stream_noise` where gridroute overshot it no more over all
  of them and the mean difference plus t standard errors is within 5 points).

World `i` is the same world whatever the range it is drawn in, so `--first 120
--worlds 120` runs the next 120 past the default ones. Past capacity it also prints the
slot-time gridroute left idle beyond what the excess clients force (what the
`past_capacity` rule bounds). `--undo-external-ranking` runs gridroute with its
external-load split undone (the defect the rules must never hide: its sites must read
unexplained).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from random import Random

from gridroute.core import Policy, gridstate
from gridroute.sim.compare import compare, idle_beyond_excess, world
from gridroute.sim.scenario import parse_scenario

BOTH = [Policy.GRIDROUTE, Policy.SATURATION]


def own_world(i: int) -> tuple[int, int, int]:
    """(world, gridroute's requests, the seed's) with all load gridroute's."""
    sc = parse_scenario(world(Random(f"own:{i}"), external=(0.0, 0.0), broken=False))
    (c,) = compare(sc, BOTH)
    return i, c.rows["gridroute"]["requests"], c.rows["saturation"]["requests"]


def outside_world(i: int) -> tuple[int, int, int, list[tuple[str, str | None]], float | None]:
    """(world, gridroute's requests, the seed's, (site, departure) each, idle) with
    50-120 % of each site's slots held from outside; idle, past capacity only, is the
    slot-time gridroute's requests queued beyond what the excess clients force, over
    the free slot-time (Little's law: a slot left idle queues one more client)."""
    sc = parse_scenario(world(Random(f"outside:{i}"), external=(0.5, 1.2)))
    (c,) = compare(sc, BOTH)
    rows = c.rows
    sites = [(d.site, d.departure) for d in c.sites]
    idle = idle_beyond_excess(sc, c.clients, rows["gridroute"]["queue_s"])
    return i, rows["gridroute"]["requests"], rows["saturation"]["requests"], sites, idle


def _undo_external_ranking() -> None:
    """gridroute's split of the grid's external load over the sites, undone (process
    initializer, so every worker runs the same code)."""
    gridstate._apportion = lambda external, unreported: {}  # type: ignore[assignment]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, default=60, help="worlds of each kind [60]")
    ap.add_argument("--first", type=int, default=0, help="number of the first world [0]")
    ap.add_argument("--jobs", type=int, default=1, help="processes [1]")
    ap.add_argument(
        "--undo-external-ranking",
        action="store_true",
        help="run gridroute with the external-load split undone (a known defect)",
    )
    args = ap.parse_args()
    began = time.perf_counter()
    ids = range(args.first, args.first + args.worlds)
    init = _undo_external_ranking if args.undo_external_ranking else None
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1), initializer=init) as pool:
        owns = list(pool.map(own_world, ids))
        outs = list(pool.map(outside_world, ids))
    ours = sum(a for _, a, _ in owns)
    theirs = sum(b for _, _, b in owns)
    worst = min((a / b for _, a, b in owns if b), default=float("inf"))
    fewer = [i for i, a, b in owns if a < b]
    span = f"worlds {ids.start}-{ids.stop - 1}" if args.first else f"{args.worlds} worlds"
    print(
        f"own load, {span}: goodput gridroute / saturation "
        f"{ours / max(theirs, 1):.3f} in all, {worst:.3f} at worst; "
        f"worlds where gridroute served fewer: {fewer or 'none'}"
    )
    why: Counter[str] = Counter()
    unexplained: list[tuple[int, str]] = []
    sites = 0
    for i, _, _, departures, _ in outs:
        for site, departure in departures:
            sites += 1
            why[departure or "within 5 points"] += 1
            if departure == "unexplained":
                unexplained.append((i, site))
    ratio_ours = sum(a for _, a, _, _, _ in outs)
    ratio_theirs = sum(b for _, _, b, _, _ in outs)
    print(
        f"outside load, {span}, {sites} sites: "
        + ", ".join(f"{k} {v}" for k, v in why.most_common())
        + f"; goodput gridroute / saturation {ratio_ours / max(ratio_theirs, 1):.3f}; "
        f"unexplained: {unexplained or 'none'}"
    )
    idle = sorted((x, i) for i, _, _, _, x in outs if x is not None)
    if idle:
        top = ", ".join(f"{i}: {x:.1%}" for x, i in reversed(idle[-3:]))
        print(
            f"past capacity, {len(idle)} worlds: slot-time gridroute left idle beyond the "
            f"excess, of the free: median {idle[len(idle) // 2][0]:.1%}, most {top}"
        )
    print(f"{2 * args.worlds} worlds in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
