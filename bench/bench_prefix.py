"""Prefix affinity (issue 24): off, on, and pure affinity (no load bound), side by side.

    .venv/bin/python bench/bench_prefix.py

1. The example scenario (examples/scenarios/prefix-sessions.yaml): prefill_saved, time
   to first token p50/p99 and overshoot per variant, and the ratio of p99 TTFT to off.
   Targets: prefill_saved >= 0.3 with affinity on; p99 TTFT below affinity off.
2. The seed scenario (seed-partition.yaml) with the same conversations, at each of its
   client counts: per-site share gap and overshoot rate against affinity off, in points.
   Target: both within 1 point with affinity on.

All in simulated time: the numbers are the same on every machine (same seed, same rows).
"""

from __future__ import annotations

from pathlib import Path

from gridroute.sim.prefix_runs import overshoot_rate, share_gap, three_ways, with_sessions
from gridroute.sim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[1] / "examples" / "scenarios"


def main() -> None:
    example = load_scenario(SCENARIOS / "prefix-sessions.yaml")
    print(f"{example.name}: {example.client_counts[0]} clients, gridroute")
    print(
        f"{'variant':>8} {'prefill_saved':>13} {'ttft p50':>9} {'ttft p99':>9} "
        f"{'p99/off':>8} {'overshoot':>9} {'requests':>8}"
    )
    rows = three_ways(example, example.client_counts[0])
    off = rows["off"]
    for name, row in rows.items():
        print(
            f"{name:>8} {row['prefill_saved']:>13.3f} {row['ttft_p50_s']:>9.3f} "
            f"{row['ttft_p99_s']:>9.3f} {row['ttft_p99_s'] / off['ttft_p99_s']:>8.2f} "
            f"{row['overshoot']:>9} {row['requests']:>8}"
        )
    assert example.sessions is not None
    seed = with_sessions(load_scenario(SCENARIOS / "seed-partition.yaml"), example.sessions)
    print(f"\n{seed.name} with sessions, gridroute: points against affinity off")
    print(
        f"{'clients':>7} {'variant':>8} {'share gap':>9} {'overshoot':>9} "
        f"{'prefill_saved':>13} {'ttft p99':>9}"
    )
    for clients in seed.client_counts:
        rows = three_ways(seed, clients)
        off = rows["off"]
        for name, row in rows.items():
            gap = 100 * share_gap(row, off)
            over = 100 * (overshoot_rate(row) - overshoot_rate(off))
            print(
                f"{clients:>7} {name:>8} {gap:>9.2f} {over:>+9.2f} "
                f"{row['prefill_saved']:>13.3f} {row['ttft_p99_s']:>9.3f}"
            )


if __name__ == "__main__":
    main()
