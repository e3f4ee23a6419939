"""Fault scenarios short of a clean cut: lossy and slow links, skewed clocks.

Same processes, load driver and invariants as `test_scenarios.py`: every request ends
served or clearly refused before its deadline, nothing is served at a site the
gateway judged silent while another serves, and a site comes back only on fresh
samples. What each asserts is what a user sees (answers, and which site gave them).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.faults.conftest import ROWS
from tests.faults.harness import (
    Loopback,
    Process,
    Tally,
    assert_no_duplicates,
    check_no_duplicates,
    fake_site,
    gateway,
    load,
    operator,
    running,
    site_field,
    wait_field,
    wait_health,
)
from tests.faults.impair import loss_mechanism, packet_loss, skewed
from tests.faults.links import NETNS_OK, NETNS_WHY, NetnsLink, ProxyLink

ALLOWED_REFUSALS = {"504 upstream_timeout", "502 upstream_unreachable", "503 no_healthy_site"}


def _report(tally: Tally, mechanism: str) -> None:
    found = check_no_duplicates(tally)
    ROWS.append(tally.row(mechanism))
    print(tally.row(mechanism))
    assert_no_duplicates(found)


def _served_at(tally: Tally, site: str, start: float, end: float) -> int:
    return sum(1 for t, s in tally.served_at if s == site and start < t < end)


def peered_through(
    tmp_path: Path,
    link: ProxyLink,
    op_b_env: dict[str, str] | None = None,
    gw_env: dict[str, str] | None = None,
) -> tuple[Process, Process, Process, Process, Process]:
    """Sites a and b on loopback, operator a polling operator b through `link`, and a
    gateway at a polling operator a every 0.25 s: (a, b, op_a, op_b, gateway)."""
    from tests.gateway.processes import free_port

    lo = Loopback()
    a, url_a = fake_site(lo, "a")
    b, url_b = fake_site(lo, "b")
    op_b = operator(tmp_path, "b", url_b, {}, env=op_b_env)
    op_a = operator(tmp_path, "a", url_a, {"b": link.target(op_b.port)}, free_port())
    gw = gateway(
        tmp_path,
        {"a": url_a, "b": url_b},
        env=gw_env,
        operator={"url": op_a.url, "poll_interval_s": 0.25, "timeout_s": 0.2},
    )
    return a, b, op_a, op_b, gw


async def metric(url: str, name: str, **labels: str) -> float:
    """One sample of a process's `/metrics` (0 when absent)."""
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as r:
        text = await r.text()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def test_lossy_link_to_a_site_loses_no_request(tmp_path: Path) -> None:
    """A site's link drops 15 % of packets both ways for a while: TCP retransmits,
    connects time out and are retried on the other site, health may flap. Every
    request is served or refused with a clear 5xx before its deadline."""
    if not NETNS_OK:
        pytest.skip(f"packet loss needs network namespaces: {NETNS_WHY}")
    kind, why = loss_mechanism()
    if kind is None:
        pytest.skip(f"no way to drop packets here: {why}")
    link = NetnsLink(4)
    try:
        a, url_a = fake_site(Loopback(), "a")
        b, url_b = fake_site(link, "b")
        gw = gateway(tmp_path, {"a": url_a, "b": url_b})
        tally = Tally("lossy link to a site (15 % of packets dropped)")
        mechanism = ""

        async def scenario() -> None:
            nonlocal mechanism
            await wait_health(gw.url, "b", "up")
            done = asyncio.Event()
            driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
            await asyncio.sleep(1.0)
            before = tally.by_site["b"]
            with packet_loss(link, 15) as mechanism:
                await asyncio.sleep(5.0)
            await wait_health(gw.url, "b", "up", timeout=20)
            await asyncio.sleep(1.0)
            done.set()
            await driver
            assert before > 0 and tally.by_site["b"] > before  # b served before and after

        with running(gw, a, b):
            asyncio.run(asyncio.wait_for(scenario(), 90))
    finally:
        link.close()
    _report(tally, mechanism)
    assert tally.failed["hung_past_deadline"] == 0, tally
    assert sum(tally.failed.values()) == 0, tally
    assert set(tally.refused) <= ALLOWED_REFUSALS, tally.refused
    assert tally.served + sum(tally.refused.values()) == tally.sent  # none lost
    assert tally.by_site["a"] > 0


def test_lossy_peer_link_one_poll_through_does_not_bring_a_site_back(tmp_path: Path) -> None:
    """Operator a polls operator b over a link that is first slow (every chunk held
    50 ms: polls still arrive, b stays live and serves), then cut (b goes silent and
    gets nothing), then lets exactly one poll through (b must not come back on one
    sample), then heals (b is live again on fresh samples and serves)."""
    link = ProxyLink(6)
    a, b, op_a, op_b, gw = peered_through(tmp_path, link)
    tally = Tally("lossy peer link: slow, cut, one poll through, healed")

    async def scenario() -> None:
        await wait_field(gw.url, "b", "live", "live", timeout=30)
        done = asyncio.Event()
        driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
        link.delay_s = 0.05
        slow_at = time.monotonic()
        await asyncio.sleep(2.0)
        assert await site_field(gw.url, "b", "live") == "live"  # slow is not silent
        assert _served_at(tally, "b", slow_at, time.monotonic()) > 0
        link.delay_s = 0.0
        await asyncio.to_thread(link.cut)
        silent_at = await wait_field(gw.url, "b", "live", "silent", timeout=30)
        ok_before = await metric(op_a.url, "grid_signals_poll_total", target="b", result="ok")
        await asyncio.to_thread(link.let_one)
        for _ in range(600):  # the one poll may wait out a failing peer's backoff
            ok = await metric(op_a.url, "grid_signals_poll_total", target="b", result="ok")
            if ok > ok_before:
                break
            await asyncio.sleep(0.05)
        assert ok == ok_before + 1 and link.passed == 1  # exactly one poll got through
        seen = set()
        for _ in range(40):  # two seconds of the gateway's view after that poll
            seen.add(await site_field(gw.url, "b", "live"))
            await asyncio.sleep(0.05)
        assert "live" not in seen, seen  # one sample does not bring b back
        await asyncio.to_thread(link.heal)
        healed_at = time.monotonic()
        live_at = await wait_field(gw.url, "b", "live", "live", timeout=30)
        await asyncio.sleep(1.0)
        done.set()
        await driver
        assert _served_at(tally, "b", silent_at + 0.3, live_at - 0.3) == 0
        assert _served_at(tally, "b", live_at, time.monotonic()) > 0
        assert healed_at < live_at

    try:
        with running(gw, op_a, op_b, a, b):
            asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        link.close()
    _report(tally, "loopback fault proxy (operator to operator): delay, cut, one through")
    assert tally.failed["hung_past_deadline"] == 0, tally
    assert sum(tally.failed.values()) == 0 and not tally.refused, tally
    assert tally.by_site["a"] > 0 and tally.by_site["b"] > 0


def test_clock_skew_between_operators_and_the_gateway(tmp_path: Path) -> None:
    """Operator b's wall clock runs 5 minutes ahead, the gateway's 3 minutes behind,
    operator a's is right. Rows are re-based by each responder's Date, so no row is
    dropped as skew, b is judged live and serves; cut, b is judged silent (its future
    stamps do not keep it fresh) and gets nothing; healed, it is live and serves."""

    ahead, behind = skewed(300), skewed(-180)
    if isinstance(ahead, str) or isinstance(behind, str):
        pytest.skip(
            f"no way to skew a process's clock: {ahead if isinstance(ahead, str) else behind}"
        )
    link = ProxyLink(7)
    a, b, op_a, op_b, gw = peered_through(tmp_path, link, op_b_env=ahead, gw_env=behind)
    tally = Tally("clock skew: operator b +5 min, gateway -3 min, peer link cut and healed")

    async def scenario() -> None:
        await wait_field(gw.url, "b", "live", "live", timeout=30)
        done = asyncio.Event()
        driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
        start = time.monotonic()
        await asyncio.sleep(2.0)
        assert _served_at(tally, "b", start, time.monotonic()) > 0  # skew is not silence
        await asyncio.to_thread(link.cut)
        silent_at = await wait_field(gw.url, "b", "live", "silent", timeout=30)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(link.heal)
        live_at = await wait_field(gw.url, "b", "live", "live", timeout=30)
        await asyncio.sleep(1.0)
        done.set()
        await driver
        assert _served_at(tally, "b", silent_at + 0.3, live_at - 0.3) == 0
        assert _served_at(tally, "b", live_at, time.monotonic()) > 0
        skew = await metric(
            op_a.url, "grid_signals_ingest_dropped_total", target="b", reason="skew"
        )
        assert skew == 0  # a constant skew is re-based away, never dropped

    procs: list[Process] = [gw, op_a, op_b, a, b]
    try:
        with running(*procs):
            asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        link.close()
    _report(tally, "libfaketime (operator b +300 s, gateway -180 s) + loopback proxy")
    assert tally.failed["hung_past_deadline"] == 0, tally
    assert sum(tally.failed.values()) == 0 and not tally.refused, tally
    assert tally.by_site["a"] > 0 and tally.by_site["b"] > 0


_DATE = re.compile(rb"\r\nDate: ([^\r]+)\r\n", re.IGNORECASE)


def shift_date(seconds: float) -> Callable[[bytes], bytes]:
    """A rewrite of an answer's `Date` header by `seconds` (same length, so the
    framing holds): what a front proxy with a wrong clock does to a peer's answers."""
    from datetime import timedelta

    def rewrite(chunk: bytes) -> bytes:
        def shifted(m: re.Match[bytes]) -> bytes:
            when = parsedate_to_datetime(m.group(1).decode()) + timedelta(seconds=seconds)
            return b"\r\nDate: " + format_datetime(when, usegmt=True).encode() + b"\r\n"

        return _DATE.sub(shifted, chunk, count=1)

    return rewrite


def test_peer_rows_ahead_of_its_date_are_dropped_as_skew(tmp_path: Path) -> None:
    """Operator b's answers reach operator a with a `Date` 5 minutes behind the stamps
    of b's rows (a front proxy with a wrong clock; a clock step looks the same). Rows
    stamped after their responder's Date cannot be re-based, so a drops them as
    `skew` and counts them; b hears nothing usable, is judged silent and gets
    nothing while a serves; once the Date is right again b returns on fresh samples."""
    link = ProxyLink(8)
    a, b, op_a, op_b, gw = peered_through(tmp_path, link)
    tally = Tally("clock skew: peer b's Date 5 min behind its rows")
    dropped: list[float] = []

    async def scenario() -> None:
        await wait_field(gw.url, "b", "live", "live", timeout=30)
        done = asyncio.Event()
        driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
        await asyncio.sleep(1.0)
        before = await metric(
            op_a.url, "grid_signals_ingest_dropped_total", target="b", reason="skew"
        )
        link.rewrite = shift_date(-300)
        silent_at = await wait_field(gw.url, "b", "live", "silent", timeout=30)
        await asyncio.sleep(1.0)
        after = await metric(
            op_a.url, "grid_signals_ingest_dropped_total", target="b", reason="skew"
        )
        dropped.append(after - before)
        link.rewrite = None
        live_at = await wait_field(gw.url, "b", "live", "live", timeout=30)
        await asyncio.sleep(1.0)
        done.set()
        await driver
        assert _served_at(tally, "b", silent_at + 0.3, live_at - 0.3) == 0
        assert _served_at(tally, "b", live_at, time.monotonic()) > 0

    try:
        with running(gw, op_a, op_b, a, b):
            asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        link.close()
    tally.notes = f"{dropped[0]:.0f} rows dropped as skew" if dropped else ""
    _report(tally, "loopback fault proxy rewriting the peer's Date (-300 s)")
    assert dropped and dropped[0] > 0, "no row was dropped as skew"
    assert tally.failed["hung_past_deadline"] == 0, tally
    assert sum(tally.failed.values()) == 0 and not tally.refused, tally
    assert tally.by_site["a"] > 0 and tally.by_site["b"] > 0
