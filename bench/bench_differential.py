"""The default policy against the seed rule in generated worlds (issue 23).

    .venv/bin/python bench/bench_differential.py [--worlds 60] [--first 0] [--jobs 1]
        [--clients-times K] [--max-queue-ms MS] [--service DIST] [--defect NAME]

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
`past_capacity` rule bounds).

`--clients-times K` runs each world with K times its clients (rounded, at least 1, past
the 240 the drawn worlds stop at): the same sites, outside load, gateways and events,
more or fewer clients. The drawn worlds never vary the client count within a world, and
a change to the policy can look right at a world's own count and herd its gateways at
three times it (BENCHMARKS.md, "Tried, not kept: the seed's two-site split"). Each line
then also reads the overshoot of both policies in all, and gridroute's p99 latency.
`--max-queue-ms MS` gives every world an admission queue of MS (so fair order is on:
docs/selection.md, "Fair admission past capacity"), for the same reading.
`--service DIST` (`exponential` or `lognormal`) draws each request's service time
around the same 200 ms mean where the drawn worlds hold it constant: closed-loop clients
on a constant time move in step, which a long tail breaks up (a queue's collisions
that one world hides, another shows). The rules were read on constant times.

`--defect NAME` runs gridroute with a known defect the rules must never hide (`_defect`):
`undo-external-ranking` (its split of external load undone; the same as
`--undo-external-ranking`; felt with several gateways only) or `misread-outside:K`
(everything at a site but its own in-flight ranked at K of it; felt with one gateway
too). It then also prints the sites whose share the defect moved past the tolerance
(gridroute with it against gridroute without it, on the same stream) and how each
reads: a site the defect moved that a rule names (not `unexplained`, nor within 5
points of the seed) is a rule hiding the defect, or a move toward the seed's share.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, NamedTuple

from gridroute.core import Policy, gridstate, view
from gridroute.sim.compare import TOLERANCE, _noise, compare, harness_world, idle_beyond_excess
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import parse_scenario
from gridroute.sim.tier_audit import OWN_PART, SKIP

BOTH = [Policy.GRIDROUTE, Policy.SATURATION]

Moved = tuple[str, str, bool]
"""(site, departure, away): a site whose share a defect moved (`outside_world`)."""


def _shaped(w: dict[str, Any]) -> dict[str, Any]:
    """World `w` with `--clients-times` times its clients, `--max-queue-ms` and
    `--service` set."""
    shape = _SHAPE[0]
    if shape.times != 1.0:
        w["clients"] = [max(1, round(n * shape.times)) for n in w["clients"]]
    if shape.queue_ms:
        w["availability"] = {"max_queue_ms": shape.queue_ms}
    if shape.service != "constant":
        w["service"] = {"distribution": shape.service}
    return w


class Shaped(NamedTuple):
    """What a shaped run (`--clients-times`, `--max-queue-ms`, `--service`) reads besides
    the rules."""

    p99: float
    """gridroute's p99 latency (an admission queue holds requests at the gateway)."""
    overshoot: int
    """gridroute's overshoot in all."""
    seed_overshoot: int
    """The seed rule's."""
    tiers: dict[str, int]
    """gridroute's first attempts read against the seed's tiers (`sim/tier_audit.py`),
    by verdict; read in every run, shaped or not."""

    @classmethod
    def of(cls, rows: dict[str, dict[str, Any]]) -> Shaped:
        ours, ref = rows["gridroute"], rows["saturation"]
        return cls(
            ours["latency_p99_s"] or 0.0,
            ours["overshoot"],
            ref["overshoot"],
            ours.get("tier_rule", {}),
        )


def own_world(i: int) -> tuple[int, int, int, Shaped]:
    """(world, gridroute's requests, the seed's, what a shaped run reads) with all load
    gridroute's."""
    sc = parse_scenario(_shaped(harness_world("own", i)))
    with _defect():
        (c,) = compare(sc, BOTH, audit=True)
    return i, c.rows["gridroute"]["requests"], c.rows["saturation"]["requests"], Shaped.of(c.rows)


Outside = tuple[int, int, int, list[tuple[str, str | None]], float | None, list[Moved], Shaped]
"""What `outside_world` reads of one world."""


def outside_world(i: int) -> Outside:
    """(world, gridroute's requests, the seed's, (site, departure) each, idle, moved,
    what a shaped run reads) with
    50-120 % of each site's slots held from outside; idle, past capacity only, is the
    slot-time gridroute's requests queued beyond what the excess clients force, over
    the free slot-time (Little's law: a slot left idle queues one more client). Where a
    defect is set (`_DEFECT`), moved lists (site, departure, away) for each site whose
    share the defect moved past the tolerance and its noise: gridroute's share with the
    defect against its share without it, on the same stream; away where the defect
    left it further from the seed's share than it was."""
    sc = parse_scenario(_shaped(harness_world("outside", i)))
    with _defect():
        (c,) = compare(sc, BOTH, audit=True)
    rows = c.rows
    sites = [(d.site, d.departure) for d in c.sites]
    idle = idle_beyond_excess(sc, c.clients, rows["gridroute"]["queued_s"])
    moved: list[Moved] = []
    if _DEFECT:
        sound = SimRun(sc, Policy.GRIDROUTE, c.clients).run().row
        for d in c.sites:
            was = float(sound["shares"][d.site])
            if abs(d.shares["gridroute"] - was) > TOLERANCE + _noise(was, sound["requests"]):
                seed = d.shares["saturation"]
                away = abs(d.shares["gridroute"] - seed) > abs(was - seed)
                moved.append((d.site, d.departure or "within 5 points", away))
    ours, ref = rows["gridroute"]["requests"], rows["saturation"]["requests"]
    return i, ours, ref, sites, idle, moved, Shaped.of(rows)


DEFECTS = ("undo-external-ranking", "misread-outside")
"""The defects `--defect` knows (`_defect`)."""

_DEFECT: list[str] = []
"""The defect this process runs gridroute with (`_set_defect`), empty for none."""


SERVICES = ("constant", "exponential", "lognormal")


class Shape(NamedTuple):
    """How each world is shaped: `--clients-times`, `--max-queue-ms` and `--service`
    (the defaults leave the drawn world as it is)."""

    times: float = 1.0
    queue_ms: int = 0
    service: str = "constant"


_SHAPE: list[Shape] = [Shape()]
"""This process's shape (`_set_defect`)."""


def _set_defect(
    defect: str, times: float = 1.0, queue_ms: int = 0, service: str = "constant"
) -> None:
    """Process initializer: every worker runs gridroute with the same defect, the same
    factor on each world's clients, the same admission queue and service times."""
    _DEFECT[:] = [defect] if defect else []
    _SHAPE[0] = Shape(times, queue_ms, service)


@contextlib.contextmanager
def _defect() -> Iterator[None]:
    """gridroute with `_DEFECT` while the block runs (both policies' runs inside it; the
    seed rule reads neither piece):

    * `undo-external-ranking`: its split of the grid's external load over the sites
      undone, so other gateways' share ranking discounts outside load too (several
      gateways only: alone, a gateway's others are all external and ranked whole);
    * `misread-outside:K`: everything at a site but its own in-flight ranked at K of
      what it is (one gateway or many: a site held from outside reads emptier)."""
    if not _DEFECT:
        yield
        return
    name, _, arg = _DEFECT[0].partition(":")
    if name == "undo-external-ranking":
        saved_apportion = gridstate._apportion
        gridstate._apportion = lambda external, unreported: {}
        try:
            yield
        finally:
            gridstate._apportion = saved_apportion
    elif name == "misread-outside":
        k = float(arg)
        saved_post = view.SiteView.__post_init__

        def misread(self: view.SiteView) -> None:
            saved_post(self)
            object.__setattr__(self, "ranked_others", self.ranked_others * k)

        view.SiteView.__post_init__ = misread  # type: ignore[method-assign]
        try:
            yield
        finally:
            view.SiteView.__post_init__ = saved_post  # type: ignore[method-assign]
    else:
        raise SystemExit(f"--defect: unknown defect {_DEFECT[0]!r}")


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
    ap.add_argument(
        "--defect",
        default="",
        help="run gridroute with a known defect: undo-external-ranking, or "
        "misread-outside:K (all load not its own ranked at K of it)",
    )
    ap.add_argument(
        "--clients-times",
        type=float,
        default=1.0,
        help="run each world with K times its clients [1]",
    )
    ap.add_argument(
        "--max-queue-ms",
        type=int,
        default=0,
        help="run each world with an admission queue of MS (fair order on) [0: none]",
    )
    ap.add_argument(
        "--service",
        choices=SERVICES,
        default="constant",
        help="each request's service time around 200 ms [constant, as drawn]",
    )
    args = ap.parse_args()
    if args.max_queue_ms < 0:
        ap.error(f"--max-queue-ms: 0 or more, not {args.max_queue_ms}")
    if not args.clients_times > 0:
        ap.error(f"--clients-times: a factor above 0, not {args.clients_times}")
    began = time.perf_counter()
    ids = range(args.first, args.first + args.worlds)
    defect = "undo-external-ranking" if args.undo_external_ranking else args.defect
    name, _, arg = defect.partition(":")
    if defect and name not in DEFECTS:
        ap.error(f"--defect: unknown defect {defect!r} (known: {', '.join(DEFECTS)})")
    if name == "misread-outside" and not re.fullmatch(r"\d+(\.\d*)?", arg):
        ap.error(f"--defect: misread-outside needs a factor, misread-outside:K, not {defect!r}")
    init = functools.partial(
        _set_defect, defect, args.clients_times, args.max_queue_ms, args.service
    )
    shaped = args.clients_times != 1.0 or args.max_queue_ms > 0 or args.service != "constant"
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1), initializer=init) as pool:
        owns = list(pool.map(own_world, ids))
        outs = list(pool.map(outside_world, ids))
    ours = sum(o[1] for o in owns)
    theirs = sum(o[2] for o in owns)
    worst = min((o[1] / o[2] for o in owns if o[2]), default=float("inf"))
    fewer = [o[0] for o in owns if o[1] < o[2]]
    span = f"worlds {ids.start}-{ids.stop - 1}" if args.first else f"{args.worlds} worlds"
    if args.clients_times != 1.0:
        span += f" at {args.clients_times:g} times their clients"
    if args.max_queue_ms:
        span += f" with a {args.max_queue_ms} ms admission queue"
    if args.service != "constant":
        span += f", {args.service} service"
    print(
        f"own load, {span}: goodput gridroute / saturation "
        f"{ours / max(theirs, 1):.3f} in all, {worst:.3f} at worst; "
        f"worlds where gridroute served fewer: {fewer or 'none'}" + _overshoot(owns, shaped)
    )
    why: Counter[str] = Counter()
    unexplained: list[tuple[int, str]] = []
    sites = 0
    moved: list[tuple[int, str, str, bool]] = []
    for i, _, _, departures, _, shifted, _ in outs:
        for site, departure in departures:
            sites += 1
            why[departure or "within 5 points"] += 1
            if departure == "unexplained":
                unexplained.append((i, site))
        moved += [(i, *m) for m in shifted]
    ratio_ours = sum(o[1] for o in outs)
    ratio_theirs = sum(o[2] for o in outs)
    print(
        f"outside load, {span}, {sites} sites: "
        + ", ".join(f"{k} {v}" for k, v in why.most_common())
        + f"; goodput gridroute / saturation {ratio_ours / max(ratio_theirs, 1):.3f}; "
        f"unexplained: {unexplained or 'none'}" + _overshoot(outs, shaped)
    )
    if defect:
        caught = Counter(m[2] for m in moved)
        named = [m for m in moved if m[2] not in ("unexplained", "within 5 points")]
        away = [(w, site, rule) for w, site, rule, off in named if off]
        worlds = sorted({m[0] for m in moved})
        flagged = [w for w in worlds if any(u[0] == w for u in unexplained)]
        print(
            f"defect {defect}: it moved {len(moved)} sites' shares past the tolerance "
            "(gridroute with it against gridroute without it, same stream): "
            + ", ".join(f"{k} {v}" for k, v in caught.most_common())
            + f"; named by a rule, moved toward the seed's share {len(named) - len(away)}, "
            f"away from it: {away or 'none'}; worlds it moved {len(worlds)}, of them with a "
            f"site unexplained {len(flagged)}"
        )
    idle = sorted((o[4], o[0]) for o in outs if o[4] is not None)
    if idle:
        top = ", ".join(f"{i}: {x:.1%}" for x, i in reversed(idle[-3:]))
        print(
            f"past capacity, {len(idle)} worlds: slot-time gridroute left idle beyond the "
            f"excess, of the free: median {idle[len(idle) // 2][0]:.1%}, most {top}"
        )
    print(_tier_rule(span, owns, outs))
    print(f"{2 * args.worlds} worlds in {time.perf_counter() - began:.0f} s")


TIER_WORLDS_SHOWN = 8
"""Worlds named on the tier rule's line, those with the most skips first."""


def _tier_rule(span: str, owns: list[Any], outs: list[Any]) -> str:
    """The issue's first rule read on every first attempt of gridroute's runs
    (`sim/tier_audit.py`): kept, this gateway's part of an over-full site before a borrow
    (`own_part`, on purpose), and skips of a lower tier with admissible room, with the
    worlds that skipped most (each row is (world, ..., `Shaped`))."""
    parts = []
    for kind, rows in (("own load", owns), ("outside load", outs)):
        total: Counter[str] = Counter()
        skipped = []
        for r in rows:
            total.update(r[-1].tiers)
            if r[-1].tiers.get(SKIP):
                skipped.append((r[0], r[-1].tiers[SKIP]))
        skipped.sort(key=lambda ws: -ws[1])
        parts.append(
            f"{kind} {sum(total.values())} picks: kept {total['kept']}, "
            f"{OWN_PART} {total[OWN_PART]}, {SKIP} {total[SKIP]}"
            + (
                f" in {len(skipped)} worlds (most: {skipped[:TIER_WORLDS_SHOWN]})"
                if skipped
                else ""
            )
        )
    return f"tier rule, {span}, gridroute's first attempts: " + "; ".join(parts)


def _overshoot(rows: list[Any], shaped: bool) -> str:
    """gridroute's p99 latency (the mean over worlds) and the overshoot of both policies
    in all, with the worlds where gridroute's was the greater, read where the worlds are
    shaped (`--clients-times`, `--max-queue-ms`; each row is (world, ..., `Shaped`))."""
    if not shaped:
        return ""
    figures = [(r[0], r[-1]) for r in rows]
    p99 = sum(f.p99 for _, f in figures) / max(len(figures), 1)
    ours = sum(f.overshoot for _, f in figures)
    theirs = sum(f.seed_overshoot for _, f in figures)
    more = [i for i, f in figures if f.overshoot > f.seed_overshoot]
    return (
        f"; gridroute's p99 {p99:.3f} s (mean); overshoot gridroute {ours}, "
        f"saturation {theirs}; worlds where gridroute overshot more: {more or 'none'}"
    )


if __name__ == "__main__":
    main()
