"""Decisions per second of the site-selection core, against `random.choice` in the same run.

    .venv/bin/python bench/bench_select.py [--n 200000] [--prefix-only]

For 3, 10 and 100 sites (capacities 64..256, loads 10-90 %), times `decide` under each
policy on one core and prints microseconds per decision and the ratio to a plain
`random.choice` over the same candidate list (the cheapest "router" Python can do).
Targets (issue 2): 3 sites under 10 us, 100 sites under 100 us, per decision.

Then the overlay rows (issue 12): `core.group_route.route` with every candidate in one
selection group, per picker, at 3 and 100 candidates. "added" is what the picker costs
on top of the group walk: route with that picker minus route with `deterministic`
(for `saturation`, minus the plain `decide(..., saturation)` it wraps). Target: the
picker adds at most 2 us per decision.

Last, whole requests through the one request flow (`core/flow.py`: first decision,
one attempt, its answer, the relay), with and without the overlay, so the cost of
routing overlay requests through the flow (rather than a loop of their own) is a
number: "flow cost" is the flow minus the decision it wraps, measured in the same run.

Then the prefix rows (issue 24): the prefix fingerprint of 8 KiB of prompt, alone and
with its prefix-map lookup, and their ratio to one `zlib.crc32` of the same 8 KiB; and,
with `splintr-rs` installed (`gridroute[tokenizer]`), the tokenizer-exact mode's cost
for the same 8 KiB: the body decoded, its messages rendered, encoded (llama3) and cut
into 256-token blocks, on the repeated text and on 8 KiB of varied words.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from gridroute.core import (
    AvailabilitySettings,
    Candidate,
    GridState,
    OwnLoad,
    Policy,
    Sample,
    decide,
)
from gridroute.core.ejection import Ejections
from gridroute.core.fairness import FairAdmission
from gridroute.core.flow import Answered, request_flow
from gridroute.core.gridstate import Snapshot
from gridroute.core.group_route import Group, ModelGroups, OverlayIndex, Slot, build_table, route
from gridroute.core.groups import Admission
from gridroute.core.overlay_request import OverlayRequest
from gridroute.core.pickers import Picker, PickerStates
from gridroute.core.prefix import PrefixMap, fingerprint, fingerprint_messages, load_tokenizer


def build(n_sites: int, seed: int = 1) -> tuple[GridState, OwnLoad]:
    rng = random.Random(seed)
    cands = [Candidate(f"s{i}", "p", frozenset({"m"}), local=i == 0) for i in range(n_sites)]
    state = GridState(cands, AvailabilitySettings(), models=["m"])
    own = OwnLoad()
    samples = []
    for c in cands:
        cap = rng.choice([64, 128, 256])
        samples.append(
            Sample(
                c.site,
                "p",
                1.0,
                running=cap * rng.uniform(0.1, 0.9),
                waiting=0.0,
                ready=1.0,
                max_running=cap,
                generation=1,
            )
        )
        for _ in range(rng.randrange(0, 8)):
            own.start(c.key, 0.5)
    state.refresh(samples, {c.site: 1.0 for c in cands}, 1.0, {}, own)
    return state, own


def per_call_us(fn: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--prefix-only", action="store_true", help="only the prefix rows")
    args = ap.parse_args()
    if args.prefix_only:
        prefix_rows(args.n)
        return
    print(
        f"{'sites':>5} {'policy':>10} {'us/decision':>12} {'decisions/s':>12} "
        f"{'baseline us':>11} {'ratio':>6}"
    )
    for n_sites in (3, 10, 100):
        state, own = build(n_sites)
        snap = state.snapshot
        assert snap is not None
        rng = random.Random(7)
        views = list(snap.views)
        n = args.n if n_sites < 100 else max(args.n // 10, 1000)
        base = per_call_us(lambda r=rng, vs=views: r.choice(vs), n)
        counts = own.counts
        for policy in Policy:
            us = per_call_us(lambda p=policy, sn=snap, r=rng, c=counts: decide(sn, "m", r, p, c), n)
            print(
                f"{n_sites:>5} {policy.value:>10} {us:>12.2f} {1e6 / us:>12,.0f} "
                f"{base:>11.3f} {us / base:>6.1f}"
            )

    overlay_rows(args.n)
    flow_rows(args.n)
    prefix_rows(args.n)


def overlay_rows(n_calls: int, reps: int = 7) -> None:
    """Interleaved: every repetition times each variant once, in turn, and each keeps
    its best, so a noisy neighbour slows all of them alike rather than one. Timed in
    this thread's CPU time (`time.thread_time`), so time spent descheduled on a
    shared machine does not count."""
    print(
        f"\n{'sites':>5} {'picker':>13} {'us/decision':>12} {'added us':>9} "
        f"{'baseline us':>11} {'ratio':>6}"
    )
    for n_sites in (3, 100):
        state, own = build(n_sites)
        snap = state.snapshot
        assert snap is not None
        rng = random.Random(7)
        views = list(snap.views)
        n = n_calls if n_sites < 100 else max(n_calls // 10, 1000)
        counts = own.counts
        slots = tuple(Slot(v.site, v.provider, 1 + i % 5) for i, v in enumerate(views))
        fns: dict[str, Callable[[], object]] = {
            "baseline": lambda r=rng, vs=views: r.choice(vs),
            "decide": lambda sn=snap, r=rng, c=counts: decide(sn, "m", r, Policy.SATURATION, c),
        }
        for picker in Picker:
            mg = ModelGroups("m", picker, (Group(0, Admission.NEW_AND_EXISTING, slots),))
            table = build_table(OverlayIndex(1, "d", {"m": mg}))
            states = PickerStates()
            fns[picker.value] = lambda t=table, st=states, r=rng, sn=snap, c=counts: route(
                t, "m", st, r, snapshot=sn, own=c
            )
        best = dict.fromkeys(fns, float("inf"))
        for _ in range(reps):
            for name, fn in fns.items():
                t0 = time.thread_time()
                for _ in range(n):
                    fn()
                best[name] = min(best[name], (time.thread_time() - t0) / n * 1e6)
        base = best["baseline"]
        for picker in Picker:
            us = best[picker.value]
            ref = best["decide"] if picker is Picker.SATURATION else best["deterministic"]
            print(
                f"{n_sites:>5} {picker.value:>13} {us:>12.2f} {us - ref:>9.2f} "
                f"{base:>11.3f} {us / base:>6.1f}"
            )


@dataclass
class _Grid:
    """The `FlowGrid` a gateway is, minus the I/O: snapshot, rng, own load, ejections,
    fair order (unused: these requests carry no fairness key)."""

    snapshot: Snapshot
    own: OwnLoad
    rng: random.Random
    ejections: Ejections = field(default_factory=Ejections)
    fairness: FairAdmission = field(default_factory=FairAdmission)

    @property
    def clock(self) -> Callable[[], float]:
        return lambda: 1.0


def _one_request(grid: _Grid, policy: Policy, overlay: OverlayRequest | None) -> object:
    flow = request_flow(grid, "m", policy, None, overlay)
    next(flow)
    return flow.send(Answered(200))


def _flow_variants(grid: _Grid) -> dict[str, Callable[[], object]]:
    """Each decision alone, and one whole request through the flow around it."""
    snap, rng, counts = grid.snapshot, grid.rng, grid.own.counts
    slots = tuple(Slot(v.site, v.provider) for v in snap.views)
    mg = ModelGroups("m", Picker.ROUND_ROBIN, (Group(0, Admission.NEW_AND_EXISTING, slots),))
    table = build_table(OverlayIndex(1, "d", {"m": mg}))
    overlay = OverlayRequest(table, PickerStates())
    return {
        "decide first": lambda: decide(snap, "m", rng, Policy.FIRST, counts),
        "decide gridroute": lambda: decide(snap, "m", rng, Policy.GRIDROUTE, counts),
        "route roundRobin": lambda: route(table, "m", overlay.states, rng, snapshot=snap),
        "flow first": lambda: _one_request(grid, Policy.FIRST, None),
        "flow gridroute": lambda: _one_request(grid, Policy.GRIDROUTE, None),
        "flow overlay roundRobin": lambda: _one_request(grid, Policy.GRIDROUTE, overlay),
    }


def flow_rows(n_calls: int, reps: int = 7) -> None:
    """Interleaved and in thread CPU time, as `overlay_rows`."""
    print(
        f"\n{'sites':>5} {'request':>22} {'us/request':>11} {'decision us':>12} "
        f"{'flow cost us':>13}"
    )
    for n_sites in (3, 100):
        state, own = build(n_sites)
        snap = state.snapshot
        assert snap is not None
        grid = _Grid(snap, own, random.Random(7))
        n = n_calls if n_sites < 100 else max(n_calls // 10, 1000)
        fns = _flow_variants(grid)
        best = dict.fromkeys(fns, float("inf"))
        for _ in range(reps):
            for name, fn in fns.items():
                t0 = time.thread_time()
                for _ in range(n):
                    fn()
                best[name] = min(best[name], (time.thread_time() - t0) / n * 1e6)
        for name, ref in (
            ("flow first", "decide first"),
            ("flow gridroute", "decide gridroute"),
            ("flow overlay roundRobin", "route roundRobin"),
        ):
            us = best[name]
            print(
                f"{n_sites:>5} {name.removeprefix('flow '):>22} {us:>11.2f} "
                f"{best[ref]:>12.2f} {us - best[ref]:>13.2f}"
            )


def prefix_rows(n_calls: int, reps: int = 7) -> None:
    """Issue 24: the prefix fingerprint of an 8 KiB prompt (1 KiB blocks, so 8
    chained hashes) and its lookup in a warm prefix map, against one CRC-32 of the raw
    8 KiB (`zlib.crc32`) in the same run. Target: fingerprint under 5 us."""
    prompt = (b'{"role":"user","content":"' + b"lorem ipsum dolor sit amet " * 400)[:8192]
    table = PrefixMap()
    blocks = fingerprint(prompt)
    table.record(blocks, "s0/p", 0.0)
    fns: dict[str, Callable[[], object]] = {
        "crc32 8 KiB once": lambda: zlib.crc32(prompt),
        "fingerprint 8 KiB": lambda: fingerprint(prompt),
        "fingerprint + match": lambda: table.matches(fingerprint(prompt), 1.0),
    }
    fns.update(token_rows())
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(reps):
        for name, fn in fns.items():
            n = max(n_calls // 200, 20) if name.startswith("tokens") else n_calls
            t0 = time.thread_time()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (time.thread_time() - t0) / n * 1e6)
    base = best["crc32 8 KiB once"]
    print(f"\n{'prefix (issue 24)':>22} {'us/call':>9} {'ratio vs crc32 once':>20}")
    for name, us in best.items():
        print(f"{name:>22} {us:>9.2f} {us / base:>20.1f}")
    if not any(name.startswith("tokens") for name in best):
        print(f"{'tokens 8 KiB':>22} (splintr-rs not installed: pip install '.[tokenizer]')")


def token_rows() -> dict[str, Callable[[], object]]:
    """The tokenizer-exact mode, as the gateway runs it (`gateway/proxy.prefix_of`): the
    body decoded (`json.loads`), its messages rendered and encoded once (llama3, loaded
    before timing), 256-token blocks hashed, for 8 KiB of English prose (this module's
    docstrings, repeated) and 8 KiB of varied made-up words (seeded). "warm": the
    encoder's cache of pre-split words already holds the text's words (a conversation's
    next turn resends its history); "cold": that cache cleared before each call (a new
    prompt). Empty without `splintr-rs`."""
    try:
        encode = load_tokenizer("llama3")
    except ValueError:
        return {}
    clear = encode.__self__.clear_cache  # type: ignore[attr-defined]
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(4000)]
    prose = " ".join(f.__doc__ or "" for f in (prefix_rows, token_rows, build)) + (__doc__ or "")
    texts = {
        "prose": (prose * (8192 // len(prose) + 1))[:8192],
        "varied": " ".join(rng.choice(vocab) for _ in range(1600))[:8192],
    }
    fns: dict[str, Callable[[], object]] = {}
    for label, text in texts.items():
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})

        def warm(body: str = body) -> object:
            return fingerprint_messages(json.loads(body)["messages"], encode, 256, 64)

        def cold(body: str = body) -> object:
            clear()
            return fingerprint_messages(json.loads(body)["messages"], encode, 256, 64)

        fns[f"tokens {label} warm"] = warm
        fns[f"tokens {label} cold"] = cold
    return fns


if __name__ == "__main__":
    main()
