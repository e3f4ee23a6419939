"""What observability costs per request: the gateway with metrics and tracing on vs off,
in one run on this machine.

Rounds interleave five gateways (same config otherwise: three sites on live signals,
own-load accounting, health probes), each pinned to core 0 in turn, against the fast
fake backend (proxy_backend.py) on core 1; each round starts one later in the list, so
a slow phase of a shared machine hits all of them alike:

    off                 no metrics listener, no tracing
    metrics             `metrics.listen` on, scraped once a second as Prometheus would
    metrics+tracing     that, and `tracing.otlp_endpoint` exporting every request's
                        spans over OTLP/HTTP to a receiver on core 1 (otlp_sink.py,
                        which decodes them and counts the spans it got)
    metrics+tracing 1%  the same with `tracing.sample_ratio: 0.01`
    metrics+tracing 0%  and with `tracing.sample_ratio: 0` (the tracer's cost on a
                        request it does not trace, with no export at all)

Load: C keep-alive connections in a closed loop (as fast as each gateway goes, as in
bench_proxy.py), or with `--rate R` R requests/s offered to every gateway alike.
Measured: requests/s served and CPU per request (the process tree's user + system time
over the run, all threads: the OTLP export thread too), medians over the rounds, and
each one's ratio to `off` in the same round. In a closed loop a gateway that answers
slower also batches less, which moves its CPU per request a little; at a set rate that
confound is gone, but a low rate's CPU per request (wake-ups, the once-a-second work
spread over fewer requests) varies far more on a shared machine. The spans
received per request show the exporter kept up (2 per traced request: the route span
and its attempt); fewer would mean spans were dropped and the cost understated.

The per-request counters (`grid_route_selections_total`, `..._decisions_total`, the
latency histograms) cannot be turned off, since /grid/status and the dashboard read them.
So the micro section times, in this process, what one routed request calls on them
and on the tracer, next to the routing decision itself (`decide`, three sites).

    .venv/bin/python bench/bench_observability.py [--rounds 3] [--seconds 3] [--rate R]
    .venv/bin/python bench/bench_observability.py --only off,metrics+tracing   # a subset
    .venv/bin/python bench/bench_observability.py --dataplane   # on listener.dataplane
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench_proxy import (
    HERE,
    PY,
    Conn,
    Stats,
    drive,
    free_port,
    request_bytes,
    run_for,
    start,
    stop,
    tree_cpu,
    wait_port,
)

NAMES = ("off", "metrics", "metrics+tracing", "metrics+tracing 1%", "metrics+tracing 0%")
TRACED = {"metrics+tracing": 1.0, "metrics+tracing 1%": 0.01, "metrics+tracing 0%": 0.0}
"""Configurations that trace, and their `tracing.sample_ratio`."""
SCRAPE_INTERVAL_S = 1.0


def gateway_args(
    tmp: Path, name: str, port: int, backend: int, sink: int, dataplane: bool = False
) -> tuple[list[str], int]:
    """The gateway's command line for `name`, and its metrics port (0: none); with
    `dataplane`, on the data-plane listener (`listener.dataplane`)."""
    url = f"http://127.0.0.1:{backend}"
    sites = "\n".join(f"  - {{name: {s}, backend_url: '{url}'}}" for s in ("hub", "west", "east"))
    text = (
        f"listen: 127.0.0.1:{port}\nlocal_site: hub\n"
        f"operator: {{url: '{url}', poll_interval_s: 1.0}}\n"
        f"sites:\n{sites}\nmodels: [{{name: m}}]\n"
        "shutdown_drain_s: 0\nshutdown_grace_s: 1\n"  # the load has stopped by then
        + ("listener: {dataplane: true}\n" if dataplane else "")
    )
    metrics = 0
    if name != "off":
        metrics = free_port()
        text += f"metrics: {{listen: '127.0.0.1:{metrics}'}}\n"
    if name in TRACED:
        endpoint = f"http://127.0.0.1:{sink}/v1/traces"
        text += f"tracing: {{otlp_endpoint: '{endpoint}', sample_ratio: {TRACED[name]}}}\n"
    cfg = tmp / f"gateway-{free_port()}.yaml"
    cfg.write_text(text)
    return [str(Path(PY).with_name("gridroute")), "gateway", "--config", str(cfg)], metrics


class PacedConn(Conn):
    """A keep-alive connection sending one request every `interval_s` (the next as soon
    as the answer is in when it is late): open-loop-ish load at a set rate."""

    def __init__(self, req: bytes, stats: Stats, interval_s: float, offset_s: float) -> None:
        super().__init__(req, stats)
        self.interval_s = interval_s
        self.offset_s = offset_s
        self.due = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        self.due = loop.time() + self.offset_s
        loop.call_at(self.due, super().send)

    def send(self) -> None:  # called when an answer is complete
        loop = asyncio.get_running_loop()
        self.due += self.interval_s
        if self.due <= loop.time():
            self.due = loop.time()
            super().send()
        else:
            loop.call_at(self.due, super().send)


async def paced(port: int, connections: int, rate: float, seconds: float) -> Stats:
    """`rate` requests/s in all over `connections`, for `seconds`."""
    stats = Stats()
    req = request_bytes(port)
    interval = connections / rate
    protocols: list[Callable[[], asyncio.Protocol]] = [
        lambda i=i: PacedConn(req, stats, interval, interval * i / connections)  # type: ignore[misc]
        for i in range(connections)
    ]
    return await run_for(port, protocols, stats, seconds)


class Scraper:
    """GETs /metrics once a second in a thread while a run lasts; counts bytes."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.scrapes = 0
        self.bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL_S):
            try:
                with urllib.request.urlopen(self.url, timeout=2.0) as resp:
                    self.bytes += len(resp.read())
                self.scrapes += 1
            except OSError:
                pass

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5.0)


def sink_spans(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5.0) as resp:
        return int(json.loads(resp.read())["spans"])


@dataclass
class Run:
    rps: float
    cpu_us: float
    errors: int
    spans_per_request: float | None
    scrapes: int


def one_run(tmp: Path, name: str, backend: int, sink: int, a: argparse.Namespace) -> Run:
    port = free_port()
    args, metrics = gateway_args(tmp, name, port, backend, sink, a.dataplane)
    spans0 = sink_spans(sink)
    log = tmp / f"{Path(args[-1]).stem}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["taskset", "-c", "0", *args], stdout=out, stderr=subprocess.STDOUT)

    def load(seconds: float) -> Stats:
        if a.rate > 0:
            return asyncio.run(paced(port, a.connections, a.rate, seconds))
        return asyncio.run(drive(port, a.connections, seconds))

    try:
        try:
            wait_port(port)
        except RuntimeError:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise RuntimeError(f"{name} did not start:\n" + "\n".join(tail)) from None
        time.sleep(1.5)  # the first signals poll and probe round
        warm = load(1.0)  # warm-up: pools, caches
        cpu0 = tree_cpu(proc.pid)
        t0 = time.perf_counter()
        if metrics:
            with Scraper(metrics) as scraper:
                stats = load(a.seconds)
            scrapes = scraper.scrapes
        else:
            stats = load(a.seconds)
            scrapes = 0
        elapsed = time.perf_counter() - t0 - 0.2
        cpu = tree_cpu(proc.pid) - cpu0
    finally:
        stop(proc)  # flushes the spans still buffered
    spans = None
    if name in TRACED:  # the gateway's whole life: its exporter batches
        spans = (sink_spans(sink) - spans0) / max(warm.done + stats.done, 1)
    return Run(stats.done / elapsed, cpu / max(stats.done, 1) * 1e6, stats.errors, spans, scrapes)


def med(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


@contextmanager
def backend_and_sink() -> Iterator[tuple[int, int]]:
    """The proxy backend and the OTLP sink, each on core 1, answering; their ports."""
    backend, sink = free_port(), free_port()
    procs = [
        start([PY, str(HERE / "proxy_backend.py"), str(backend)], 1),
        start([PY, str(HERE / "otlp_sink.py"), str(sink)], 1),
    ]
    try:
        wait_port(backend)
        wait_port(sink)
        yield backend, sink
    finally:
        for proc in procs:
            stop(proc)


def processes(names: tuple[str, ...], a: argparse.Namespace) -> None:
    rounds = a.rounds
    res: dict[str, list[Run]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with backend_and_sink() as (backend, sink):
            for r in range(rounds):
                # Each round starts one later in the list, so a machine that slows down
                # (or warms up) during a round does not always hit the same gateway.
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    run = one_run(tmp, name, backend, sink, a)
                    res[name].append(run)
                    extra = "" if run.spans_per_request is None else (
                        f"  spans/req {run.spans_per_request:.2f}"
                    )  # fmt: skip
                    print(
                        f"round {r} {name:<19}{run.rps:8.0f}/s {run.cpu_us:6.0f} us"
                        f"  errors {run.errors}  scrapes {run.scrapes}{extra}",
                        flush=True,
                    )
    load = f"{a.rate:g} requests/s" if a.rate > 0 else "closed loop"
    print(
        f"\ngateway processes: medians over {rounds} rounds of {a.seconds:g} s, {load}"
        f" on {a.connections} connections"
    )
    off = res["off"]
    for name in names:
        runs = res[name]
        rps_ratio = med([x.rps / b.rps for x, b in zip(runs, off, strict=True)])
        cpu_ratio = med([x.cpu_us / b.cpu_us for x, b in zip(runs, off, strict=True)])
        added = med([x.cpu_us - b.cpu_us for x, b in zip(runs, off, strict=True)])
        spans = [x.spans_per_request for x in runs if x.spans_per_request is not None]
        tail = f"  spans/req {med(spans):.2f}" if spans else ""
        print(
            f"{name:<19}{med([x.rps for x in runs]):8.0f}/s {med([x.cpu_us for x in runs]):6.0f}"
            f" us/req  req/s {rps_ratio:.2f}x off  CPU/req {cpu_ratio:.2f}x off"
            f" ({added:+.0f} us){tail}"
        )


def per_call_us(fn: Callable[[], object], n: int) -> float:
    """Best of three, in this thread's CPU time (descheduled time on a shared machine
    does not count, nor does the span processor's export thread)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, time.thread_time() - t0)
    return best / n * 1e6


def micro(n: int) -> None:
    """One routed request's calls on the metrics and the tracer, against `decide`."""
    import random

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from prometheus_client import CollectorRegistry

    from bench_select import build
    from gridroute.core import Policy, decide
    from gridroute.gateway.metrics import GatewayMetrics
    from gridroute.gateway.tracing import RequestTracer

    class Discard(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    state, own = build(3)
    snap, rng = state.snapshot, random.Random(1)
    assert snap is not None
    d = decide(snap, "m", rng, Policy.GRIDROUTE, own.counts)
    assert d.view is not None
    site = d.view.site
    metrics = GatewayMetrics(CollectorRegistry())

    def count() -> None:
        metrics.decision(d)
        metrics.added(0.0002)
        metrics.duration(site, 200, 0.001)

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    tracer = RequestTracer(provider.get_tracer("bench"), provider)

    def trace() -> None:
        span = tracer.start("/v1/chat/completions", "m", Policy.GRIDROUTE)
        child = tracer.attempt(span, d, 1)
        tracer.attempt_end(child, 200, None)
        tracer.end(span, d, site, 1, 200)

    sampled = RequestTracer(provider.get_tracer("bench"), provider, 0.01, random.Random(2))

    def trace_1pct() -> None:
        span = sampled.start("/v1/chat/completions", "m", Policy.GRIDROUTE)
        child = sampled.attempt(span, d, 1)
        sampled.attempt_end(child, 200, None)
        sampled.end(span, d, site, 1, 200)

    base = per_call_us(lambda: decide(snap, "m", rng, Policy.GRIDROUTE, own.counts), n)
    counted = per_call_us(count, n)
    traced = per_call_us(trace, n // 4)
    traced_1pct = per_call_us(trace_1pct, n)
    provider.shutdown()
    print(f"\nin process, per routed request (thread CPU time, best of 3 x {n} calls):")
    print(f"decide (3 sites)        {base:6.2f} us  1.00x")
    print(f"metrics (always on)     {counted:6.2f} us  {counted / base:.2f}x decide")
    print(f"tracing (span + child)  {traced:6.2f} us  {traced / base:.2f}x decide")
    print(f"tracing 1%, per request {traced_1pct:6.2f} us  {traced_1pct / base:.2f}x decide")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="requests/s offered to every gateway alike; 0 (default): closed loop",
    )
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--n", type=int, default=40_000, help="calls in the micro section")
    ap.add_argument("--dataplane", action="store_true", help="gateways on the data plane")
    ap.add_argument(
        "--only",
        default=",".join(NAMES),
        help="comma-separated, from " + ", ".join(NAMES).replace("%", "%%"),
    )
    a = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("needs two cores: the gateway on one, backend, sink and load on the other")
    os.sched_setaffinity(0, {1})
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    names = tuple(n.strip() for n in a.only.split(","))
    unknown = set(names) - set(NAMES)
    if unknown or "off" not in names:
        sys.exit(f"--only: names from {', '.join(NAMES)}, with off (the ratios' base)")
    processes(names, a)
    micro(a.n)


if __name__ == "__main__":
    main()
