"""An OTLP/HTTP traces receiver for bench_observability.py (raw asyncio, uvloop).

It takes `POST /v1/traces` (protobuf `ExportTraceServiceRequest`, gzip or not), decodes
each body with opentelemetry-proto as a collector would, counts the spans and answers
200 at once; `GET /stats` answers `{"exports": N, "spans": N, "bytes": N}` so the bench
can tell how many spans the gateway really exported (a batch processor that cannot
keep up drops spans, which would make tracing look cheaper than it is).

    python bench/otlp_sink.py PORT
"""

from __future__ import annotations

import asyncio
import gzip
import json
import sys

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from http_frames import take_request

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
STATS = {"exports": 0, "spans": 0, "bytes": 0}


def _count(body: bytes, gzipped: bool) -> None:
    if gzipped:
        body = gzip.decompress(body)
    req = ExportTraceServiceRequest.FromString(body)
    STATS["exports"] += 1
    STATS["bytes"] += len(body)
    STATS["spans"] += sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)


class Sink(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (got := take_request(self.buf)) is not None:
            raw, body, self.buf = got
            head = raw.lower()
            if head.startswith(b"get /stats"):
                out = json.dumps(STATS).encode()
                self.t.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(out)}\r\n\r\n".encode()
                    + out
                )
                continue
            _count(body, b"content-encoding: gzip" in head)
            self.t.write(OK)


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Sink, "127.0.0.1", port, backlog=64)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(int(sys.argv[1])))
