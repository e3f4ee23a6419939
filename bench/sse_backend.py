"""The streaming fake backend of bench_sse.py (raw asyncio, uvloop): SSE answers only.

Any POST is answered with an OpenAI-shaped chat completion stream (`text/event-stream`,
chunked): `--events` content events, then `data: [DONE]`. Each event is its own chunk
and its own socket write, and carries `"t"`: `time.monotonic()` when it was written
(CLOCK_MONOTONIC is one clock for every process on the machine), so the load generator
can tell how long each event took to reach it.

* `--interval 0` (fast): the events are written back to back, one loop turn apart:
  short streams for the streams-per-second figure.
* `--interval S` (slow): one event every S seconds per stream, with every stream's
  phase spread over the interval; one timer tick per millisecond serves all streams
  due then, so 1,000 streams at 20 events/s stay cheap here.

`GET /signals` answers the same three-site relay as proxy_backend.py (so gridroute routes
on live signals); any other GET answers 200 (health probes).

    python bench/sse_backend.py PORT [--events 8] [--interval 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_frames import take_request
from proxy_backend import signals_response

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
DONE = b"data: [DONE]\n\n"
EVENT = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,'
    b'"model":"m","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}],'
    b'"t":%.6f,"i":%d}\n\n'
)
TICK_S = 0.001


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Streams:
    """Every open slow stream, bucketed by the millisecond of the interval it is due in."""

    def __init__(self, interval: float, events: int) -> None:
        self.interval = interval
        self.events = events
        self.slots = max(1, round(interval / TICK_S))
        self.buckets: list[set[Backend]] = [set() for _ in range(self.slots)]
        self.tick = 0

    def add(self, conn: Backend) -> None:
        self.buckets[random.randrange(self.slots)].add(conn)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            bucket = self.buckets[self.tick % self.slots]
            for conn in list(bucket):
                if not conn.next_event():
                    bucket.discard(conn)
            self.tick += 1
            # Sleep to the next tick on the loop's clock, so ticks do not drift.
            await asyncio.sleep(max(0.0, start + self.tick * TICK_S - loop.time()))


class Backend(asyncio.Protocol):
    streams: Streams | None = None
    events = 8

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""
        self.sent = 0
        self.closed = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (got := take_request(self.buf)) is not None:
            head, _, self.buf = got
            if head.startswith(b"GET /signals"):
                self.t.write(signals_response())
            elif head.startswith(b"GET "):
                self.t.write(OK)
            else:
                self.start_stream()

    def start_stream(self) -> None:
        self.t.write(HEAD)
        self.sent = 0
        if self.streams is not None:
            self.streams.add(self)
        else:
            asyncio.get_running_loop().call_soon(self.fast)

    def fast(self) -> None:
        if self.next_event():
            asyncio.get_running_loop().call_soon(self.fast)

    def next_event(self) -> bool:
        """Write the next event (or the end); False once the stream is over."""
        if self.closed:
            return False
        if self.sent < self.events:
            self.t.write(chunk(EVENT % (time.monotonic(), self.sent)))
            self.sent += 1
            return True
        self.t.write(chunk(DONE) + b"0\r\n\r\n")
        return False


async def main(port: int, events: int, interval: float) -> None:
    Backend.events = events
    if interval > 0:
        Backend.streams = Streams(interval, events)
        asyncio.get_running_loop().create_task(Backend.streams.run())
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Backend, "127.0.0.1", port, backlog=4096)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    import uvloop

    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--events", type=int, default=8)
    ap.add_argument("--interval", type=float, default=0.0)
    a = ap.parse_args()
    uvloop.run(main(a.port, a.events, a.interval))
