"""The fast fake backend every proxy in bench_proxy.py talks to (raw asyncio, uvloop).

It answers any POST with one small fixed chat completion (keep-alive, Content-Length)
and `GET /signals` with a fresh relay body for sites hub, west and east, so a gridroute
gateway polling it routes on real signals (three healthy sites, pressure tiers) while
every request still lands here. It is kept far cheaper per request than any proxy so
the proxy, pinned to its own core, is what saturates.

    python bench/proxy_backend.py PORT
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import sys
import time

from http_frames import take_request

BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()
RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)
SITES = ("hub", "west", "east")


def signals_response() -> bytes:
    from gridroute.core import Sample
    from gridroute.wire.signals import encode_relay

    now = time.time()
    histories = [
        [Sample(s, s, now, running=1.0, waiting=0.0, ready=1.0, max_running=64.0, generation=1)]
        for s in SITES
    ]
    body = encode_relay(histories, {s: now for s in SITES if s != "hub"}, local_site="hub").body
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
        f"Date: {email.utils.formatdate(usegmt=True)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Backend(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (got := take_request(self.buf)) is not None:
            head, _, self.buf = got
            if head.startswith(b"GET /signals"):
                self.t.write(signals_response())
            else:
                self.t.write(RESPONSE)


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Backend, "127.0.0.1", port, backlog=4096)
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(int(sys.argv[1])))
