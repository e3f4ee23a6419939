"""Closed-loop load against an OpenAI-compatible endpoint, for demos and benchmarks.

Each of N workers sends its next request as soon as its last one ended, so offered load
follows capacity the way interactive users do (an open-loop generator would instead pile
up an unbounded backlog past capacity). A shape is a list of phases, e.g. under-capacity
then past-capacity, and workers beyond a phase's count finish what they have in flight
and idle. All workers share one aiohttp session and its keep-alive pool.

A 429 with `Retry-After` sends the worker to sleep a jittered time within that value
(between half and all of it) before its next try, as a well-behaved client would; a
connection error backs off `error_backoff_s` so a dead endpoint does not become a spin.
Every request is recorded (status, latency, the site that answered) in a `LoadResult`.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import aiohttp

from gridroute.load.result import (
    UNKNOWN_SITE,
    LoadResult,
    Phase,
    RequestOutcome,
    RequestRecord,
    classify,
)

__all__ = ["LoadResult", "Phase", "run_load"]

SITE_HEADERS = ("x-grid-site", "x-fake-server")
"""Response headers naming the site that answered, in order of preference."""
_DONE = b"data: [DONE]"


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or HTTP-date); None if unusable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def _endpoint(base_url: str, api: str) -> str:
    base = base_url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return base + ("/chat/completions" if api == "chat" else "/completions")


def _body(model: str, api: str, stream: bool, max_tokens: int | None) -> bytes:
    body: dict[str, object] = {"model": model, "stream": stream}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": "Say something."}]
    else:
        body["prompt"] = "Say something."
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return json.dumps(body).encode()


class _Control:
    """Which workers may send now; phases change it, workers read it between requests."""

    def __init__(self, tickets: int | None) -> None:
        self.active = 0
        self.phase = 0
        self.stopped = False
        self.tickets = tickets
        self.wake = asyncio.Event()
        self.done = asyncio.Event()
        """Set when no more requests should start (tickets exhausted or time is up)."""

    def set_phase(self, phase: int, clients: int) -> None:
        self.phase, self.active = phase, clients
        self.wake.set()
        self.wake = asyncio.Event()

    def stop(self) -> None:
        self.stopped = True
        self.done.set()
        self.wake.set()

    def take_ticket(self) -> bool:
        if self.tickets is None:
            return True
        if self.tickets <= 0:
            self.stop()
            return False
        self.tickets -= 1
        return True


async def _one(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout: aiohttp.ClientTimeout,
    stream: bool,
    clock: Callable[[], float],
    t0: float,
    phase: int,
    client: int = -1,
) -> tuple[RequestRecord, float | None]:
    """Send one request and read its answer in full; never raises for network trouble."""
    start = clock()
    status, site, ttft, retry, broken = 0, UNKNOWN_SITE, None, None, False
    try:
        async with session.post(url, data=body, headers=headers, timeout=timeout) as resp:
            status = resp.status
            site = next((resp.headers[h] for h in SITE_HEADERS if h in resp.headers), site)
            if status == 429:
                retry = retry_after_s(resp.headers.get("Retry-After"))
            if stream and status == 200:
                tail = b""
                async for chunk in resp.content.iter_any():
                    if ttft is None:
                        ttft = clock() - start
                    tail = (tail + chunk)[-64:]
                broken = _DONE not in tail  # a stream cut short is a failure
            else:
                await resp.read()
    except (aiohttp.ClientError, OSError, TimeoutError):
        broken = True
    outcome = RequestOutcome.FAILED if broken else classify(status)
    rec = RequestRecord(start - t0, clock() - start, status, site, outcome, phase, ttft, client)
    return rec, retry


async def run_load(
    base_url: str,
    *,
    model: str = "fake-model",
    clients: int = 8,
    duration_s: float | None = None,
    requests: int | None = None,
    phases: Sequence[Phase | tuple[float, int]] | None = None,
    stream: bool = False,
    api: Literal["chat", "completions"] = "chat",
    max_tokens: int | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    error_backoff_s: float = 0.05,
    rng: random.Random | None = None,
    clock: Callable[[], float] = time.monotonic,
    session: aiohttp.ClientSession | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    identities: bool = False,
    first_client: int = 0,
) -> LoadResult:
    """Drive closed-loop load at `base_url` (with or without the trailing `/v1`).

    Shape: `phases` [(duration_s, clients), ...], or else one phase of `clients` for
    `duration_s`. `requests` caps the total sent (whichever of time or count ends first);
    at least one of the two must bound the run. Requests in flight when time is up are
    waited for (up to `timeout_s`) and recorded. Pass `session` to reuse a pool;
    `on_record` is called with each request as it ends (a progress line counts them).
    With `identities`, worker i sends `Authorization: Bearer client-<first_client + i>`,
    so a gateway whose fairness key is the API key (its default) tells clients apart.
    """
    shape = [p if isinstance(p, Phase) else Phase(*p) for p in phases or ()]
    if not shape:
        shape = [Phase(math.inf if duration_s is None else duration_s, clients)]
    if requests is None and any(math.isinf(p.duration_s) for p in shape):
        raise ValueError("run_load needs a duration, phases or a request count to stop")
    rng = rng or random.Random(0)
    url = _endpoint(base_url, api)
    body = _body(model, api, stream, max_tokens)
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    most = max(p.clients for p in shape)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    ctl = _Control(requests)
    records: list[RequestRecord] = []

    async def worker(idx: int, sess: aiohttp.ClientSession, t0: float) -> None:
        who = first_client + idx
        mine = {**hdrs, "Authorization": f"Bearer client-{who}"} if identities else hdrs
        while not ctl.stopped:
            wake = ctl.wake
            if idx >= ctl.active:
                await wake.wait()
                continue
            if not ctl.take_ticket():
                return
            rec, retry = await _one(
                sess, url, body, mine, timeout, stream, clock, t0, ctl.phase, who
            )
            records.append(rec)
            if on_record is not None:
                on_record(rec)
            pause = 0.0
            if rec.outcome is RequestOutcome.SHED and retry:
                pause = rng.uniform(retry / 2, retry)
            elif rec.outcome is RequestOutcome.FAILED and rec.status == 0:
                pause = error_backoff_s
            if pause > 0 and not ctl.stopped:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ctl.done.wait(), pause)

    async def drive(sess: aiohttp.ClientSession) -> float:
        t0 = clock()
        tasks = [asyncio.create_task(worker(i, sess, t0)) for i in range(most)]
        for i, ph in enumerate(shape):
            ctl.set_phase(i, ph.clients)
            try:
                timeout = None if math.isinf(ph.duration_s) else ph.duration_s
                await asyncio.wait_for(ctl.done.wait(), timeout)
                break  # tickets ran out
            except TimeoutError:
                pass
        ctl.stop()
        await asyncio.gather(*tasks)
        return clock() - t0

    if session is not None:
        elapsed = await drive(session)
    else:
        connector = aiohttp.TCPConnector(limit=max(most, 1), keepalive_timeout=30)
        async with aiohttp.ClientSession(connector=connector) as own:
            elapsed = await drive(own)
    records.sort(key=lambda r: r.start_s)
    return LoadResult(tuple(records), elapsed, tuple(shape))
