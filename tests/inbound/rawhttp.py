"""Raw HTTP/1.1 over a real loopback socket: what a hostile or slow client sends."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return await asyncio.open_connection(parts.hostname, parts.port)


async def read_answer(reader: asyncio.StreamReader) -> Answer | None:
    """One response (Content-Length framed), or None when the server closed first."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Answer(status, headers, body)


async def closed(reader: asyncio.StreamReader) -> bool:
    """True when the server closed the connection (EOF or reset), reading what is left."""
    try:
        return await reader.read(65536) == b""
    except ConnectionError:
        return True


async def exchange(url: str, raw: bytes) -> Answer | None:
    """Send `raw` on a new connection and read one answer."""
    reader, writer = await connect(url)
    try:
        writer.write(raw)
        await writer.drain()
        return await read_answer(reader)
    finally:
        writer.close()


def post(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body
