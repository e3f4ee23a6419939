"""Where a tracing gateway's CPU goes, live: py-spy samples the gateway under load and
this counts the samples in tracing code (the request path's spans) and in the span
exporter's thread, as a share of all the gateway's samples.

A closed-loop row of bench_observability.py moves by +-100 us per request from one
round to the next on a shared machine (its CPU per request follows the throughput the
machine allowed that round), far more than the 10-20 us tracing at 1 % costs; a share
of one process's own samples does not move with that. Each gateway is configured as
bench_observability.py's (`metrics+tracing 1%` and the others), pinned to core 0, with
the backend, the OTLP receiver and 64 closed-loop connections on core 1, and recorded
with `py-spy record --nonblocking` (not pausing the gateway) for `--seconds`.

A name prefixed `before:` runs the gateway from another source tree (`--before DIR`,
e.g. `git archive HEAD~1 src | tar -x -C /tmp/before`), so a change is measured against
the code it replaces in the same run:

    pip install py-spy     # into the venv; root, or ptrace allowed
    .venv/bin/python bench/profile_tracing.py --before /tmp/before/src \\
        --names 'metrics+tracing 1%,before:metrics+tracing 1%' --rounds 2 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_observability import Scraper, backend_and_sink, gateway_args
from bench_proxy import PY, drive, free_port, stop, tree_cpu, wait_port

PY_SPY = Path(PY).with_name("py-spy")
EXPORT_THREAD = "OtelBatchSpan"
"""The SDK's BatchSpanProcessor thread (its name as py-spy shows it)."""


def shares(raw: Path) -> tuple[int, float, float]:
    """py-spy's raw output (`thread;frame;... count` lines): the samples, the share in
    tracing frames on the request path, and the share in the exporter's thread."""
    total = traced = exporting = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, n = stack.split(";"), int(count)
        total += n
        if EXPORT_THREAD in frames[0]:
            exporting += n
        elif any("opentelemetry" in f or "gateway/tracing.py" in f for f in frames):
            traced += n
    return total, traced / max(total, 1), exporting / max(total, 1)


def one(tmp: Path, label: str, before: str | None, seconds: int, ports: tuple[int, int]) -> str:
    name = label.removeprefix("before:")
    env = dict(os.environ)
    if label.startswith("before:"):
        if before is None:
            sys.exit(f"{label}: needs --before DIR")
        env["PYTHONPATH"] = before
    backend, sink = ports
    port = free_port()
    args, metrics = gateway_args(tmp, name, port, backend, sink)
    proc = subprocess.Popen(
        ["taskset", "-c", "0", *args], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env
    )
    raw = tmp / f"{free_port()}.txt"
    try:
        wait_port(port)
        time.sleep(1.5)  # the first signals poll and probe round
        asyncio.run(drive(port, 64, 1.0))  # warm-up
        spy = subprocess.Popen(
            [str(PY_SPY), "record", "--nonblocking", "--threads", "-r", "200", "-d", str(seconds),
             "-f", "raw", "-o", str(raw), "-p", str(proc.pid)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        cpu0, t0 = tree_cpu(proc.pid), time.perf_counter()
        if metrics:
            with Scraper(metrics):
                stats = asyncio.run(drive(port, 64, seconds))
        else:
            stats = asyncio.run(drive(port, 64, seconds))
        cpu_us = (tree_cpu(proc.pid) - cpu0) / max(stats.done, 1) * 1e6
        rps = stats.done / (time.perf_counter() - t0)
        spy.wait(seconds + 30)
    finally:
        stop(proc)
    total, traced, exporting = shares(raw)
    return (
        f"{label:<30}{rps:7.0f}/s {cpu_us:5.0f} us/req  samples {total:5d}  "
        f"tracing {traced:6.2%} ({traced * cpu_us:4.1f} us/req)  "
        f"export thread {exporting:6.2%} ({exporting * cpu_us:4.1f} us/req)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--names", default="metrics+tracing 1%,metrics+tracing 0%,metrics")
    ap.add_argument("--before", help="a src/ directory for the names prefixed before:")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=15)
    a = ap.parse_args()
    if not PY_SPY.exists():
        sys.exit(f"{PY_SPY}: missing (pip install py-spy into the venv)")
    os.sched_setaffinity(0, {1})
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    names = [n.strip() for n in a.names.split(",")]
    print(f"load average {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as d, backend_and_sink() as ports:
        tmp = Path(d)
        for r in range(a.rounds):
            for label in names[r % len(names) :] + names[: r % len(names)]:
                print(f"round {r} " + one(tmp, label, a.before, a.seconds, ports), flush=True)


if __name__ == "__main__":
    main()
