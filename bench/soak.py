"""Soak: a local grid under steady load for minutes, faults injected periodically.

Flat file descriptors, memory and asyncio tasks across a long run are what a leak
would break first, and a 10-minute test is too long for CI, so this is a script
(issue 14: "file descriptors and memory are flat across a 10-minute soak at steady
load"). It starts a `LocalGrid` (three sites, one gateway, real processes), drives a
closed loop of requests at `--concurrency` (every fourth one streamed), and every
`--fault-every` seconds injects the next fault of a cycle on a site other than the
gateway's: a partition and its restore, a failing backend and its recovery, an
operator restart.

The baseline is this run's own start: every process's RSS (`/proc/PID/status`),
open file descriptors (`/proc/PID/fd`), the gateway's event-loop tasks
(`grid_gateway_event_loop_tasks`) and its pooled backend connections
(`grid_route_backend_connections{state="open"}`, which grow to what the load needs
and stay, bounded by the pool; the fds outside them are what a leak would grow) are
read after a warm-up of steady load, and again at the end after the last fault healed
and the same steady load ran as long as the warm-up; the table prints both and the
ratio end/start (an operator restarted by a fault is a new process at the end, and
says so). Requests are counted by how they ended: served, refused (by status and
OpenAI error code), failed (no answer, a cut stream, past the deadline).

    .venv/bin/python bench/soak.py [--minutes 10] [--concurrency 16] [--fault-every 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from gridroute.grid.launcher import LocalGrid
from gridroute.grid.layout import GridSpec

WARMUP_S = 30.0
DEADLINE_S = 30.0
"""A request still unanswered after this is failed (`past_deadline`)."""


@dataclass
class Counts:
    sent: int = 0
    served: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)


def proc_stats(pid: int) -> tuple[float, int]:
    """(RSS in MiB, open file descriptors) of one process."""
    rss_kib = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
    return rss_kib / 1024.0, len(os.listdir(f"/proc/{pid}/fd"))


async def gateway_gauges(http: aiohttp.ClientSession, metrics_url: str) -> tuple[int, int]:
    """(event-loop tasks, open backend connections in its pools) of the gateway."""
    async with http.get(metrics_url + "/metrics") as r:
        text = await r.text()
    tasks, pooled = -1, 0
    for line in text.splitlines():
        if line.startswith("grid_gateway_event_loop_tasks "):
            tasks = int(float(line.split()[1]))
        elif line.startswith("grid_route_backend_connections{") and 'state="open"' in line:
            pooled += int(float(line.split()[-1]))
    return tasks, pooled


async def snapshot(grid: LocalGrid, http: aiohttp.ClientSession) -> dict[str, float]:
    """Every process's RSS and fds, and the gateway's event-loop tasks."""
    out: dict[str, float] = {}
    children = {
        "gateway": grid.gateways[0],
        **{f"operator {s}": c for s, c in grid.operators.items()},
    }
    for name, child in children.items():
        rss, fds = proc_stats(child.pid)
        out[f"{name} RSS MiB"] = rss
        out[f"{name} fds"] = fds
        out[f"{name} pid"] = child.pid
    tasks, pooled = await gateway_gauges(http, grid.gateway_metrics_urls[0])
    out["gateway event-loop tasks"] = tasks
    out["gateway backend connections (pooled)"] = pooled
    out["gateway fds outside the backend pools"] = out["gateway fds"] - pooled
    return out


async def one(http: aiohttp.ClientSession, url: str, model: str, counts: Counts, n: int) -> None:
    stream = n % 4 == 0
    body = {"model": model, "messages": [{"role": "user", "content": "soak"}], "stream": stream}
    counts.sent += 1
    try:
        async with (
            asyncio.timeout(DEADLINE_S),
            http.post(url + "/v1/chat/completions", json=body) as r,
        ):
            raw = await r.read()
            if r.status == 200:
                if stream and not raw.rstrip().endswith(b"data: [DONE]"):
                    counts.failed["stream_truncated"] += 1
                else:
                    counts.served += 1
                return
            try:
                code = json.loads(raw)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = "not_openai_shaped"
            counts.refused[f"{r.status} {code}"] += 1
    except TimeoutError:
        counts.failed["past_deadline"] += 1
    except aiohttp.ClientPayloadError:
        counts.failed["stream_cut"] += 1
    except (aiohttp.ClientError, OSError) as exc:
        counts.failed[type(exc).__name__] += 1


async def drive(
    url: str, model: str, counts: Counts, stop: asyncio.Event, concurrency: int
) -> None:
    connector = aiohttp.TCPConnector(limit=concurrency * 2)
    async with aiohttp.ClientSession(connector=connector) as http:
        turn = 0

        async def worker() -> None:
            nonlocal turn
            while not stop.is_set():
                turn += 1
                await one(http, url, model, counts, turn)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def inject(grid: LocalGrid, i: int, heal_after_s: float) -> str:
    """The i-th fault of the cycle, healed after `heal_after_s` (blocking)."""
    others = [s.name for s in grid.spec.sites if s.name not in grid.spec.gateway_sites]
    site = others[i % len(others)]
    kind = ("partition", "fail", "operator restart")[i % 3]
    if kind == "partition":
        grid.partition(site)
        time.sleep(heal_after_s)
        grid.restore(site)
    elif kind == "fail":
        grid.fail(site)
        time.sleep(heal_after_s)
        grid.recover(site)
    else:
        grid.restart_operator(site)
    return kind


async def soak(minutes: float, concurrency: int, fault_every_s: float) -> None:
    spec = GridSpec(gateway_metrics=True, service_s=0.2)
    with LocalGrid(spec) as grid:
        counts = Counts()
        stop = asyncio.Event()
        driver = asyncio.create_task(drive(grid.gateway_url, spec.model, counts, stop, concurrency))
        faults: Counter[str] = Counter()
        async with aiohttp.ClientSession() as http:
            t0 = time.monotonic()
            await asyncio.sleep(WARMUP_S)
            start = await snapshot(grid, http)
            sent_at_start = counts.sent
            fault_until = t0 + minutes * 60.0 - WARMUP_S
            i = 0
            while time.monotonic() + fault_every_s < fault_until:
                await asyncio.sleep(fault_every_s / 2)
                faults[await asyncio.to_thread(inject, grid, i, fault_every_s / 4)] += 1
                i += 1
                await asyncio.sleep(max(0.0, fault_every_s / 4))
            await asyncio.to_thread(grid.wait_for, grid.all_routable, 60.0, "every site back")
            await asyncio.sleep(max(0.0, t0 + minutes * 60.0 - time.monotonic()))
            end = await snapshot(grid, http)
            stop.set()
            await driver
            grid.check()
        elapsed = time.monotonic() - t0
    print(
        f"soak: {elapsed / 60:.1f} min, concurrency {concurrency}, faults every "
        f"{fault_every_s:g} s: " + ", ".join(f"{k} x{v}" for k, v in sorted(faults.items()))
    )
    print(
        f"requests: sent {counts.sent} ({counts.sent - sent_at_start} after the baseline), "
        f"served {counts.served}, refused {sum(counts.refused.values())} "
        f"{dict(counts.refused)}, failed {sum(counts.failed.values())} {dict(counts.failed)}"
    )
    print()
    print("| process, measure | start (baseline) | end | end / start |")
    print("|---|---:|---:|---:|")
    for key, before in start.items():
        if key.endswith(" pid"):
            continue
        name = key.rsplit(" ", 2)[0] if "RSS" in key else key.rsplit(" ", 1)[0]
        pid = f"{name} pid"
        restarted = pid in start and start[pid] != end[pid]
        after = end[key]
        ratio = after / before if before else float("nan")
        label = f"{key} (restarted: a new process)" if restarted else key
        print(f"| {label} | {before:.1f} | {after:.1f} | {ratio:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="whole run, warm-up included")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--fault-every", type=float, default=30.0, help="seconds between faults")
    args = ap.parse_args()
    if args.minutes * 60.0 < 2 * WARMUP_S + args.fault_every:
        ap.error("--minutes must leave room for two warm-ups and one fault")
    asyncio.run(soak(args.minutes, args.concurrency, args.fault_every))


if __name__ == "__main__":
    main()
