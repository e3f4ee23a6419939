"""Where gridroute's CPU per request goes, by layer: py-spy on the gateway under load.

The same set-up as bench_proxy.py (gateway pinned to core 0; fake backend and load
generator on core 1; 64 keep-alive connections), with `py-spy record` sampling the
gateway process for the run. Each sample is charged to the first layer its stack
names, reading from the innermost frame outwards (a socket write done inside the
upstream client is the upstream client's), and the layers are printed as shares of
the CPU per request measured in the same run.

    .venv/bin/pip install py-spy        # not a dependency of the project
    .venv/bin/python bench/profile_proxy.py [--seconds 10] [--sse] [--raw OUT.txt]

`--raw` keeps py-spy's collapsed stacks (flamegraph.pl or speedscope read them).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_proxy import (
    BODY,
    HERE,
    PY,
    STREAM_BODY,
    drive,
    free_port,
    gridroute_args,
    start,
    stop,
    tree_cpu,
    wait_port,
)

LAYERS = [
    ("metrics (prometheus_client, gateway/metrics.py)", ["prometheus_client/", "metrics.py"]),
    ("tracing", ["gateway/tracing.py", "opentelemetry"]),
    ("flow + selection (core/)", ["gridroute/core/"]),
    ("body read + `model` parse", ["request_body.py", "read_body (", "json/", "read_model ("]),
    ("upstream client (request write, answer parse)", ["gateway/upstream.py", "httptools"]),
    (
        "response objects + writes (aiohttp; the data plane's _relay)",
        ["_relay (", "_fill_headers (", "web_response.py", "http_writer.py", "finish_response"],
    ),
    (
        "handler glue (proxy.py, overlay, fairness key, headers)",
        [
            "gateway/proxy.py",
            "overlay_route.py",
            "fairness_key.py",
            "admission_queue.py",
            "gateway/current.py",
            "shedding_state.py",
            "gateway/app.py",
        ],
    ),
    (
        "aiohttp request objects + dispatch",
        [
            "web_app.py",
            "web_request.py",
            "web_urldispatcher.py",
            "RequestHandler.start",
            "RequestHandler._handle_request",
            "aiohttp/helpers.py",
            "aiohttp/streams.py",
        ],
    ),
    (
        "accept + request parse (aiohttp protocol, guard)",
        ["web_protocol.py", "inbound/", "base_protocol"],
    ),
    (
        "background (signals poll, probes, history)",
        [
            "signals_loop.py",
            "gateway/health.py",
            "relay/",
            "timeline.py",
            "status.py",
            "aiohttp/client",
        ],
    ),
    ("data-plane listener (gateway/dataplane/)", ["gateway/dataplane/"]),
]
LOOP = "event loop (uvloop: epoll, socket reads, callbacks) and the rest"


def layers(raw: Path) -> tuple[int, collections.Counter[str]]:
    total = 0
    out: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():  # a frame whose name held a newline splits its line
            continue
        count = int(n)
        total += count
        name = LOOP
        for frame in reversed(stack.split(";")):
            hit = next((nm for nm, pats in LAYERS if any(p in frame for p in pats)), None)
            if hit is not None:
                name = hit
                break
        out[name] += count
    return total, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--sse", action="store_true")
    ap.add_argument("--raw", type=Path, default=None)
    ap.add_argument("--dataplane", action="store_true", help="the raw-protocol listener")
    a = ap.parse_args()
    spy = Path(PY).with_name("py-spy")
    if not spy.exists():
        sys.exit(f"{spy} missing: .venv/bin/pip install py-spy")
    os.sched_setaffinity(0, {1})
    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    body = STREAM_BODY if a.sse else BODY
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        raw = a.raw or tmp / "stacks.txt"
        bport = free_port()
        script = "sse_backend.py" if a.sse else "proxy_backend.py"
        backend = start([PY, str(HERE / script), str(bport)], 1)
        port = free_port()
        gw = start(gridroute_args(tmp, port, bport, free_port(), dataplane=a.dataplane), 0)
        try:
            wait_port(bport)
            wait_port(port)
            time.sleep(1.5)
            asyncio.run(drive(port, a.connections, 1.0, body=body))  # warm-up
            rec = subprocess.Popen(
                [
                    str(spy),
                    "record",
                    "-p",
                    str(gw.pid),
                    "-r",
                    "500",
                    "-d",
                    str(a.seconds),
                    "-f",
                    "raw",
                    "-o",
                    str(raw),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            cpu0 = tree_cpu(gw.pid)
            stats = asyncio.run(drive(port, a.connections, a.seconds + 1, body=body))
            cpu_us = (tree_cpu(gw.pid) - cpu0) / max(stats.done, 1) * 1e6
            rec.wait()
        finally:
            stop(gw)
            stop(backend)
        total, by = layers(raw)
    print(
        f"{stats.done / (a.seconds + 1):.0f} req/s, {cpu_us:.0f} us CPU per request, "
        f"{total} samples, errors {stats.errors}\n"
    )
    for name, n in by.most_common():
        print(f"{100 * n / total:5.1f} %  {cpu_us * n / total:6.1f} us  {name}")


if __name__ == "__main__":
    main()
