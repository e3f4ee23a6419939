"""One HTTP/1.1 request cut from the front of a connection's buffer, for the bench's
raw-asyncio backends (proxy backend, SSE backend, OTLP sink).

Why raw framing at all: the backends must cost far less than the gateway they stand
behind, so they answer from `asyncio.Protocol.data_received` without a framework; the
framing (head up to the blank line, a body of `Content-Length` bytes) is the same for
all three and lives here once.
"""

from __future__ import annotations


def take_request(buf: bytes) -> tuple[bytes, bytes, bytes] | None:
    """(head, body, the rest of `buf`) of the first whole request in `buf`, or None
    while it is still incomplete. The head is as sent (no blank line)."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end]
    length = 0
    i = head.lower().find(b"content-length:")
    if i >= 0:
        j = head.find(b"\r\n", i)
        length = int(head[i + 15 : j if j > 0 else None])
    total = end + 4 + length
    if len(buf) < total:
        return None
    return head, buf[end + 4 : total], buf[total:]
