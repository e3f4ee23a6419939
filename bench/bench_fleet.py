"""Signals at fleet scale: mesh and NATS on real grids, and 1,000 simulated sites.

One command prints both tables (the grids first, then the simulated fleet):

    .venv/bin/python bench/bench_fleet.py --grid 10,30,60 --seconds 20

`--grid 10,30,60` (the first table): for each size, a local grid of real processes
(every site a fake model server and an operator, one gateway at the first site,
about 4 requests/s through it) on the mesh and then on NATS, side by side: CPU and
RSS per operator and in total (from /proc over the measured window), newest-sample
age at the gateway (p50 / max over once-a-second reads of /grid/status), and sites
the gateway ever judged silent although nothing failed; "start s" is how long the
grid took from the first process to every site live at the gateway (the launcher gives
up after 60 s + 4 s per site). Without `--grid` (as `make bench` runs it) this table
is skipped.

The second table (`--sites 0` skips it):

A publisher process stands in for 1,000 operators: every second it publishes one
message per site (the real relay encoding, one provider each, spread over the
second) through one real nats-server on loopback. A reader process runs the
gateway's `NatsSignalsSource`, polling once per second as the gateway's signals loop
does, and records the newest-sample age of every site at every poll.

The baseline, measured in the same run by the reader: what the mesh transport costs a
gateway for the same fleet, one `/signals` poll per second of its local operator's
whole relay (8 samples per provider, the operator's default, under the 768 KiB
budget), decoded with the same `decode_relay`. Ratios are NATS / mesh.

    .venv/bin/python bench/bench_fleet.py [--sites 1000] [--seconds 20] [--grid 10,30,60|none]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from gridroute.core.sample import Sample
from gridroute.grid.launcher import GridError
from gridroute.grid.nats_server import READER, NatsCluster, password_of
from gridroute.relay.nats_link import NatsLink
from gridroute.relay.nats_source import NatsSignalsSource
from gridroute.relay.poller import PollMetrics, PollResult
from gridroute.wire.signals import TIME_HEADER, decode_relay, encode_relay

FRESHNESS_S = 5.0
"""The gateway's default freshness window: an age past it would judge a site silent."""
WARMUP_S = 3.0


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def site_name(i: int) -> str:
    return f"s{i:04d}"


def link(tmp: Path, urls: list[str], user: str) -> NatsLink:
    pw = tmp / f"{user}.pw"
    pw.write_text(password_of(user))
    return NatsLink(servers=urls, user=user, password_file=pw)


def sample(site: str, at: float, i: int) -> Sample:
    return Sample(site, "pool", at, running=float(i % 7), waiting=0.0, ready=1.0, max_running=8.0)


async def publish(tmp: Path, urls: list[str], sites: int, seconds: float, out: mp.Queue) -> None:
    import nats

    from gridroute.relay.nats_link import connect_options

    nc = await nats.connect(**connect_options(link(tmp, urls, "fleet"), "bench-fleet"))
    cpu0, sent, sent_bytes = cpu_s(), 0, 0
    start = time.monotonic()
    tick = 0
    while time.monotonic() - start < seconds:
        for i in range(sites):
            due = start + tick + i / sites
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            name = site_name(i)
            now = time.time()
            body = encode_relay([[sample(name, now, tick + i)]], {}, local_site=name).body
            await nc.publish(f"gridroute.signals.{name}", body, headers={TIME_HEADER: f"{now:.3f}"})
            sent += 1
            sent_bytes += len(body)
        tick += 1
    await nc.flush()
    await nc.close()
    out.put({"cpu_s": cpu_s() - cpu0, "sent": sent, "bytes": sent_bytes})


async def read(tmp: Path, urls: list[str], sites: int, seconds: float, out: mp.Queue) -> None:
    src = NatsSignalsSource(link(tmp, urls, READER), metrics=PollMetrics(CollectorRegistry()))
    ages: list[float] = []
    silent_sites: set[str] = set()
    polls = failed = 0
    analysis_cpu = 0.0  # the benchmark's own bookkeeping, not the gateway's cost
    seen_max = 0
    start = time.monotonic()
    cpu0 = cpu_s()
    while time.monotonic() - start < seconds + WARMUP_S:
        t0 = time.monotonic()
        outcome = await src.poll()
        polls += 1
        if outcome.result is not PollResult.OK or outcome.decoded is None:
            failed += 1
        elif time.monotonic() - start > WARMUP_S:
            analysis0 = cpu_s()
            newest: dict[str, float] = {}
            for s in outcome.decoded.samples:
                newest[s.site] = max(newest.get(s.site, 0.0), s.at)
            seen_max = max(seen_max, len(newest))
            for site, at in newest.items():
                age = outcome.ended_at - at
                ages.append(age)
                if age > FRESHNESS_S:
                    silent_sites.add(site)
            analysis_cpu += cpu_s() - analysis0
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    nats_cpu = cpu_s() - cpu0 - analysis_cpu
    await src.close()
    # Baseline: the mesh's local poll of the same fleet, once per second.
    now = time.time()
    histories = [[sample(site_name(i), now - 7 + k, i) for k in range(8)] for i in range(sites)]
    encoded = encode_relay(histories, {site_name(i): now for i in range(sites)}, local_site="s0000")
    t0 = cpu_s()
    reps = 5
    for _ in range(reps):
        decoded = decode_relay(
            encoded.body, date=now, offset=0.0, max_lines=1 << 20, max_providers=64
        )
    mesh_cpu_per_poll = (cpu_s() - t0) / reps
    mesh_sites = len({s.site for s in decoded.samples})
    out.put(
        {
            "ages": ages,
            "silent": len(silent_sites),
            "polls": polls,
            "failed": failed,
            "seen": seen_max,
            "cpu_s": nats_cpu,
            "elapsed_s": seconds + WARMUP_S,
            "mesh_bytes": len(encoded.body),
            "mesh_cpu_per_poll": mesh_cpu_per_poll,
            "mesh_sites": mesh_sites,
        }
    )


def _run(kind: str, tmp: str, urls: list[str], sites: int, seconds: float, out: mp.Queue) -> None:
    fn = publish if kind == "publish" else read
    asyncio.run(fn(Path(tmp), urls, sites, seconds, out))


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def grid_run(sites: int, signals: str, seconds: float) -> dict[str, float]:
    """One real grid of `sites` sites on `signals`; what it cost and how fresh it was."""
    from gridroute.grid.launcher import LocalGrid
    from gridroute.grid.layout import GridSpec, LocalSite
    from gridroute.load.background import BackgroundLoad

    spec = GridSpec(
        sites=tuple(LocalSite(site_name(i), 4) for i in range(sites)),
        service_s=0.25,
        signals=signals,
        gateway_sites=(site_name(0),),
    )
    grid = LocalGrid(spec)
    t0 = time.monotonic()
    grid.start(timeout_s=start_deadline_s(sites))
    start_s = time.monotonic() - t0
    load = BackgroundLoad(grid.gateway_url, spec.model, clients=1).start()
    try:
        pids = {site: child.pid for site, child in grid.operators.items()}
        if grid.nats is not None:
            pids["(nats-server)"] = grid.nats.nodes[0].proc.pid  # type: ignore[union-attr]
        cpu0 = {k: proc_cpu_s(p) for k, p in pids.items()}
        start = time.monotonic()
        ages: list[float] = []
        silent: set[str] = set()
        while time.monotonic() - start < seconds:
            t0 = time.monotonic()
            for row in grid.status(timeout_s=5.0)["sites"]:
                if row["silent_s"] is not None:
                    ages.append(float(row["silent_s"]))
                if row["live"] != "live":
                    silent.add(row["site"])
            time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
        elapsed = time.monotonic() - start
        cpu = {k: (proc_cpu_s(p) - cpu0[k]) / elapsed for k, p in pids.items()}
        rss = [proc_rss_mib(p) for k, p in pids.items() if k != "(nats-server)"]
    finally:
        load.stop()
        grid.stop()
    ops = [v for k, v in cpu.items() if k != "(nats-server)"]
    ages.sort()
    return {
        "cpu_op": 100 * statistics.mean(ops),
        "cpu_total": 100 * sum(cpu.values()),
        "rss_op": statistics.mean(rss),
        "age_p50": ages[len(ages) // 2] if ages else float("nan"),
        "age_max": ages[-1] if ages else float("nan"),
        "silent": float(len(silent)),
        "start_s": start_s,
    }


def start_deadline_s(sites: int) -> float:
    return 60.0 + 4.0 * sites


def grid_table(sizes: list[int], seconds: float, transports: list[str]) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"bench_fleet --grid: real processes, {seconds:g} s measured per grid, ~4 req/s "
        f"(load average at the start: {load})"
    )
    head = ("sites", "signals", "CPU/op %", "CPU total %", "RSS/op MiB", "age p50 s",
            "age max s", "silent", "start s")  # fmt: skip
    print("".join(f"{h:>12}" for h in head))
    for n in sizes:
        for signals in transports:
            t0 = time.monotonic()
            try:
                r = grid_run(n, signals, seconds)
            except GridError as exc:
                print(
                    f"{n:>12}{signals:>12}  did not come up in {time.monotonic() - t0:.0f} s "
                    f"(deadline {start_deadline_s(n):.0f} s): {str(exc).splitlines()[0]}",
                    flush=True,
                )
                continue
            print(
                f"{n:>12}{signals:>12}{r['cpu_op']:>12.1f}{r['cpu_total']:>12.1f}"
                f"{r['rss_op']:>12.1f}{r['age_p50']:>12.2f}{r['age_max']:>12.2f}"
                f"{r['silent']:>12.0f}{r['start_s']:>12.0f}",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sites", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument(
        "--grid",
        default="none",
        help="real grids of these sizes (mesh and NATS), e.g. 10,30,60 [none]",
    )
    ap.add_argument("--transports", default="mesh,nats", help="with --grid: mesh, nats or both")
    args = ap.parse_args()
    if args.grid != "none":
        sizes = [int(n) for n in args.grid.split(",")]
        grid_table(sizes, args.seconds, args.transports.split(","))
    if args.sites > 0:
        print()
        simulated_table(args.sites, args.seconds)


def simulated_table(sites: int, seconds: float) -> None:
    """The second table: `sites` simulated publishers, one nats-server, one reader."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        NatsCluster(Path(tmp) / "nats", [], fleet_users=["fleet"]) as nats,
    ):
        assert nats.nodes[0].proc is not None
        server_cpu0 = proc_cpu_s(nats.nodes[0].proc.pid)
        ctx = mp.get_context("spawn")
        q_read: mp.Queue = ctx.Queue()
        q_pub: mp.Queue = ctx.Queue()
        reader = ctx.Process(target=_run, args=("read", tmp, nats.urls, sites, seconds, q_read))
        reader.start()
        time.sleep(1.0)
        pub = ctx.Process(
            target=_run,
            args=("publish", tmp, nats.urls, sites, seconds + WARMUP_S, q_pub),
        )
        pub.start()
        r, p = q_read.get(), q_pub.get()
        reader.join()
        pub.join()
        server_cpu = proc_cpu_s(nats.nodes[0].proc.pid) - server_cpu0
    ages = sorted(r["ages"])
    q = statistics.quantiles(ages, n=100) if len(ages) > 100 else [max(ages or [0.0])] * 99
    elapsed = r["elapsed_s"]
    nats_bps = p["bytes"] / elapsed
    mesh_bps = float(r["mesh_bytes"])
    nats_cpu = r["cpu_s"] / elapsed
    mesh_cpu = r["mesh_cpu_per_poll"]
    print(f"bench_fleet: {sites} simulated sites, {seconds:g} s measured, one nats-server")
    print(f"{'':34}{'NATS':>14}{'mesh (baseline)':>18}{'ratio':>8}")

    def row(label: str, nats_v: float, mesh_v: float, fmt: str) -> None:
        ratio = nats_v / mesh_v if mesh_v else float("nan")
        print(f"{label:34}{nats_v:>14{fmt}}{mesh_v:>18{fmt}}{ratio:>8.2f}")

    row("sites at the gateway", r["seen"], r["mesh_sites"], ",.0f")
    row("bytes/s into the gateway", nats_bps, mesh_bps, ",.0f")
    row("gateway CPU, % of a core", 100 * nats_cpu, 100 * mesh_cpu, ".1f")
    top = ages[-1] if ages else 0.0
    print(
        f"newest-sample age at the gateway: p50 {q[49]:.2f} s, p99 {q[98]:.2f} s, max {top:.2f} s"
    )
    print(f"sites ever past the {FRESHNESS_S:g} s window (would be silent): {r['silent']}")
    pub_cpu = 100 * p["cpu_s"] / elapsed
    print(
        f"reader polls: {r['polls']} ({r['failed']} failed); publisher CPU {pub_cpu:.1f} % "
        f"of a core for {p['sent']:,} messages; "
        f"nats-server CPU {100 * server_cpu / elapsed:.1f} %"
    )


if __name__ == "__main__":
    main()
