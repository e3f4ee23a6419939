"""SSE through each proxy, side by side in one run: streams per second, slow streams.

Same layout as bench_proxy.py: each proxy pinned to core 0 (taskset), the streaming
backend (sse_backend.py) and this load generator on core 1.

1. Streams per second per core: C keep-alive connections in a closed loop, each
   request `stream: true`, answered with `--events` SSE events (each its own chunk and
   write) and `data: [DONE]`. CPU per stream is the proxy's CPU time over streams served.
2. Slow streams: N streams open at once (default 1,000), each getting one event every
   `--interval` s (default 0.05: 20 chunks/s). Every event carries the backend's
   CLOCK_MONOTONIC time of writing, so the generator measures each event's delay from
   the backend's write to its own read; "added" is a proxy's percentile minus the direct
   run's. Inter-chunk gap: time between two events of one stream minus the interval.
   Memory per open stream: the proxy's RSS with N streams open minus its RSS before
   (warmed up, idle), over N.

Ratios are against the plain aiohttp baseline (baseline_proxy.py). Targets (issue 5):
>= 4,000 streams/s per core; 1,000 slow streams with < 5 ms added p99 delay and
< 64 KiB per open stream.

    .venv/bin/python bench/bench_sse.py [--seconds 5] [--connections 64] [--streams 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_proxy import (
    HERE,
    PY,
    STREAM_BODY,
    Target,
    drive,
    free_port,
    print_ratios,
    proxy_targets,
    request_bytes,
    rss_kib,
    start,
    stop,
    tree_cpu,
    wait_port,
)

STAMP = re.compile(rb'"t":([0-9.]+),')
"""An event's stamp; the trailing comma keeps a number cut by a read from matching."""


@dataclass
class FastRow:
    name: str
    streams_s: float
    cpu_us: float | None
    errors: int


def fast(name: str, port: int, pid: int | None, seconds: float, conns: int) -> FastRow:
    asyncio.run(drive(port, conns, 1.0, body=STREAM_BODY))  # warm-up
    cpu0 = tree_cpu(pid) if pid else 0.0
    t0 = time.perf_counter()
    stats = asyncio.run(drive(port, conns, seconds, body=STREAM_BODY))
    elapsed = time.perf_counter() - t0 - 0.2
    cpu = (tree_cpu(pid) - cpu0) if pid else None
    return FastRow(
        name,
        stats.done / elapsed,
        None if cpu is None else cpu / max(stats.done, 1) * 1e6,
        stats.errors,
    )


@dataclass
class Slow:
    """What the slow-stream generator saw."""

    interval: float
    measure_from: float = float("inf")
    measure_to: float = float("inf")
    delays: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    events: int = 0
    open_streams: int = 0
    errors: int = 0


class SlowConn(asyncio.Protocol):
    """One slow stream: records each event's delay and the gap since the previous one."""

    def __init__(self, req: bytes, slow: Slow) -> None:
        self.req = req
        self.slow = slow
        self.tail = b""
        self.last = 0.0
        self.headed = False
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.t.write(self.req)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        buf = self.tail + data
        if not self.headed:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.tail = buf
                return
            if b" 200 " not in buf[:16]:
                self.slow.errors += 1
            self.headed = True
            self.slow.open_streams += 1
        s = self.slow
        measuring = s.measure_from <= now < s.measure_to
        last_end = 0
        for m in STAMP.finditer(buf):
            last_end = m.end()
            s.events += 1
            if measuring:
                s.delays.append(now - float(m.group(1)))
                if self.last:
                    s.gaps.append(now - self.last - s.interval)
            self.last = now
        self.tail = buf[max(last_end, len(buf) - 64) :]
        if buf.endswith(b"0\r\n\r\n"):
            self.t.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.headed:
            self.slow.open_streams -= 1
        if not self.done.done():
            self.done.set_result(None)


@dataclass
class SlowRow:
    name: str
    p50_ms: float
    p99_ms: float
    gap_p99_ms: float
    rss_kib_per_stream: float | None
    opened: int
    events: int
    errors: int


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * q))]


async def slow_streams(
    port: int, pid: int | None, n: int, interval: float, hold_s: float
) -> SlowRow:
    loop = asyncio.get_running_loop()
    slow = Slow(interval)
    req = request_bytes(port, STREAM_BODY)
    # Warm the proxy (first pools, code paths) with a few streams, then let it idle.
    warm = Slow(interval)
    conns = [
        (await loop.create_connection(lambda: SlowConn(req, warm), "127.0.0.1", port))
        for _ in range(8)
    ]
    await asyncio.sleep(0.5)
    for tr, _ in conns:
        tr.close()
    await asyncio.sleep(0.5)
    rss0 = rss_kib(pid) if pid else 0
    protos: list[SlowConn] = []
    for i in range(n):  # open in batches of 100, 20 ms apart
        tr, proto = await loop.create_connection(lambda: SlowConn(req, slow), "127.0.0.1", port)
        protos.append(proto)
        if i % 100 == 99:
            await asyncio.sleep(0.02)
    deadline = time.monotonic() + 10.0
    while slow.open_streams < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    opened = slow.open_streams
    slow.measure_from = time.monotonic() + 1.0
    slow.measure_to = slow.measure_from + hold_s
    await asyncio.sleep(1.0 + hold_s / 2)
    rss1 = rss_kib(pid) if pid else 0
    await asyncio.sleep(hold_s / 2)
    for proto in protos:
        proto.t.close()
    await asyncio.sleep(0.3)
    return SlowRow(
        "",
        pct(slow.delays, 0.5) * 1e3,
        pct(slow.delays, 0.99) * 1e3,
        pct(slow.gaps, 0.99) * 1e3,
        (rss1 - rss0) / max(opened, 1) if pid else None,
        opened,
        len(slow.delays),
        slow.errors,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--events", type=int, default=8, help="events per fast stream")
    ap.add_argument("--streams", type=int, default=1000, help="concurrent slow streams")
    ap.add_argument("--interval", type=float, default=0.05, help="s between slow events")
    ap.add_argument("--hold", type=float, default=8.0, help="s of slow streams measured")
    ap.add_argument("--skip-nginx", action="store_true")
    ap.add_argument("--skip-litellm", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated target names")
    a = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("needs two cores: the proxy on one, backend and load on the other")
    os.sched_setaffinity(0, {1})
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    fast_rows: list[FastRow] = []
    slow_rows: list[SlowRow] = []
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        fast_port, slow_port = free_port(), free_port()
        backend = [PY, str(HERE / "sse_backend.py")]
        procs.append(start([*backend, str(fast_port), "--events", str(a.events)], 1))
        events = int((a.hold + 6.0) / a.interval)  # outlives opening + measuring
        slow_args = [str(slow_port), "--events", str(events), "--interval", str(a.interval)]
        procs.append(start([*backend, *slow_args], 1))
        wait_port(fast_port)
        wait_port(slow_port)
        try:
            fast_rows.append(fast("direct", fast_port, None, a.seconds, a.connections))
            row = asyncio.run(slow_streams(slow_port, None, a.streams, a.interval, a.hold))
            row.name = "direct"
            slow_rows.append(row)
            print(f"direct: {fast_rows[-1]}\n        {row}", flush=True)
            for which, port in (("fast", fast_port), ("slow", slow_port)):
                (tmp / which).mkdir()
                targets = proxy_targets(
                    tmp / which,
                    port,
                    nginx=not a.skip_nginx,
                    litellm=not a.skip_litellm and which == "fast",
                )
                for t in targets:
                    if only and t.name not in only:
                        continue
                    run_target(t, which, a, fast_rows, slow_rows, procs)
        finally:
            for proc in procs:
                stop(proc)
    report(fast_rows, slow_rows, a)


def run_target(
    t: Target,
    which: str,
    a: argparse.Namespace,
    fast_rows: list[FastRow],
    slow_rows: list[SlowRow],
    procs: list[subprocess.Popen[bytes]],
) -> None:
    proc = start(t.args, 0, t.env)
    procs.append(proc)
    try:
        wait_port(t.port)
        time.sleep(t.settle_s)
        if which == "fast":
            fast_rows.append(fast(t.name, t.port, proc.pid, a.seconds, a.connections))
            print(f"{t.name}: {fast_rows[-1]}", flush=True)
        else:
            row = asyncio.run(slow_streams(t.port, proc.pid, a.streams, a.interval, a.hold))
            row.name = t.name
            slow_rows.append(row)
            print(f"{t.name}: {row}", flush=True)
    finally:
        stop(proc)


def report(fast_rows: list[FastRow], slow_rows: list[SlowRow], a: argparse.Namespace) -> None:
    base = next((r for r in fast_rows if r.name == "aiohttp baseline"), None)
    print(
        f"\nSSE streams/s: proxy on core 0, backend + load generator on core 1; "
        f"{a.connections} connections, {a.events} events + [DONE] per stream, "
        f"{a.seconds:.0f} s per target\n"
    )
    head = f"{'target':<21}{'streams/s':>11}{'CPU us/stream':>15}{'vs baseline':>13}{'errors':>8}"
    print(head + "\n" + "-" * len(head))
    for r in fast_rows:
        ratio = f"{r.streams_s / base.streams_s:.2f}x" if base else "-"
        cpu = f"{r.cpu_us:.0f}" if r.cpu_us is not None else "-"
        print(f"{r.name:<21}{r.streams_s:>11.0f}{cpu:>15}{ratio:>13}{r.errors:>8}")
    print_ratios(fast_rows, "streams/s", "CPU per stream")
    direct = next((r for r in slow_rows if r.name == "direct"), None)
    print(
        f"\nslow streams: {a.streams} open at once, one event every {a.interval * 1e3:.0f} ms "
        f"each, {a.hold:.0f} s measured; delay = backend write to generator read\n"
    )
    head = (
        f"{'target':<21}{'open':>6}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>9}{'+p99 ms':>9}"
        f"{'gap p99 ms':>12}{'KiB/stream':>12}{'events':>9}{'errors':>8}"
    )
    print(head + "\n" + "-" * len(head))
    for r in slow_rows:
        add50 = r.p50_ms - direct.p50_ms if direct else float("nan")
        add99 = r.p99_ms - direct.p99_ms if direct else float("nan")
        kib = f"{r.rss_kib_per_stream:.1f}" if r.rss_kib_per_stream is not None else "-"
        print(
            f"{r.name:<21}{r.opened:>6}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}{add50:>9.2f}"
            f"{add99:>9.2f}{r.gap_p99_ms:>12.2f}{kib:>12}{r.events:>9}{r.errors:>8}"
        )


if __name__ == "__main__":
    main()
