"""How fast the simulator runs the seed scenario, row by row.

    .venv/bin/python bench/bench_sim.py [SCENARIO.yaml]

Prints wall time and events per second for each row (policy x clients) and the total,
and, as a baseline measured in the same run, a bare heapq loop that pushes and pops the
same number of events with a no-op handler: the ratio says what the simulator's own
work (the core's refresh and decide, the queues, the tally) costs per event on this
machine, independent of how fast the machine is.
"""

from __future__ import annotations

import sys
import time
from heapq import heappop, heappush
from pathlib import Path

from gridroute.sim.engine import RunResult, run_scenario
from gridroute.sim.scenario import Scenario, load_scenario

DEFAULT = Path(__file__).resolve().parents[1] / "examples" / "scenarios" / "seed-partition.yaml"


def bare_loop(events: int, pending: int = 320) -> float:
    """Seconds for `events` heap pops (each pushing its successor) with a no-op handler,
    over a heap holding `pending` events, about what the seed run keeps in flight."""

    def handler(t: float, arg: object) -> None:
        return None

    heap: list[tuple[float, int, int, object, object]] = [
        (i / pending * 0.2, 0, i, handler, None) for i in range(pending)
    ]
    began = time.perf_counter()
    for seq in range(pending, pending + events):
        t, _, _, fn, arg = heappop(heap)
        handler(t, arg)
        heappush(heap, (t + 0.2, 0, seq, fn, arg))
    return time.perf_counter() - began


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    scenario: Scenario = load_scenario(path)
    print(f"{scenario.name}: {scenario.duration_s:g} simulated s per row")
    head = ("policy", "clients", "events", "wall s", "events/s", "requests")
    print(f"{head[0]:<11} {head[1]:>7} {head[2]:>9} {head[3]:>7} {head[4]:>10} {head[5]:>9}")

    def on_row(r: RunResult) -> None:
        rate = r.events / r.wall_s if r.wall_s else float("inf")
        print(
            f"{r.row['policy']:<11} {r.row['clients']:>7} {r.events:>9} {r.wall_s:>7.2f} "
            f"{rate:>10,.0f} {r.row['requests']:>9}"
        )

    began = time.perf_counter()
    results = run_scenario(scenario, on_row)
    wall = time.perf_counter() - began
    events = sum(r.events for r in results)
    base = bare_loop(events)
    print(f"total: {events} events in {wall:.2f} s wall = {events / wall:,.0f} events/s")
    print(
        f"baseline bare heapq loop, same events: {base:.2f} s = {events / base:,.0f} events/s; "
        f"simulator / baseline = {wall / base:.1f}x per event"
    )


if __name__ == "__main__":
    main()
