"""Read a response body no larger than a limit, for every reader of signals.

Why: a peer operator, a Prometheus server or a model server's metrics page that answers
with more than the reader is willing to hold (a bug, a misconfigured proxy, or a lying
peer) must cost at most the limit in memory; the body is refused whole, never half-read.
The mesh poller, the Prometheus reader and the operator's scrape read this way, so the
rule lives once.
"""

from __future__ import annotations

from aiohttp import ClientResponse

CHUNK_BYTES = 64 * 1024


class BodyTooLarge(Exception):
    """The body was refused: its Content-Length or its bytes read passed the limit."""


async def read_bounded(resp: ClientResponse, limit: int) -> bytes:
    """The whole body of `resp`, or `BodyTooLarge` as soon as it passes `limit` bytes
    (at once when its Content-Length says so)."""
    if resp.content_length is not None and resp.content_length > limit:
        raise BodyTooLarge(f"Content-Length {resp.content_length} over {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
