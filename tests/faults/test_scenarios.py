"""Fault scenarios on real processes: every request ends served or clearly refused.

Each scenario drives load through a real gateway process at fake model servers (real
processes), breaks a link or a process under it, and checks the invariants:

* no request hangs past its deadline (each has one);
* every refusal is an OpenAI-shaped body with the right code for its status;
* once the gateway judged a site down, no request sent later is served there while
  another site serves the model (until it is judged up again);
* a healed site serves again only after it was judged up (two passing probes);
* failures are 0, except streams that were under way on a killed site, which end with
  a clean stream error (the connection is cut, never left hanging).

The counts go to the table in docs/reliability.md (`make test-faults`).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from tests.faults.conftest import ROWS
from tests.faults.harness import (
    MODEL,
    Loopback,
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
from tests.faults.links import MECHANISM, ProxyLink, open_link


def _report(tally: Tally, mechanism: str = MECHANISM) -> None:
    found = check_no_duplicates(tally)
    ROWS.append(tally.row(mechanism))
    print(tally.row(mechanism))
    assert_no_duplicates(found)


def _no_hangs(tally: Tally) -> None:
    assert tally.failed["hung_past_deadline"] == 0, tally


def _not_served_between(tally: Tally, site: str, start: float, end: float) -> None:
    late = [t for t, s in tally.served_at if s == site and start < t < end]
    assert not late, f"{len(late)} requests sent after {site} was judged down were served there"


@pytest.mark.fault_short
def test_site_partitioned_from_the_gateway_and_returned(tmp_path: Path) -> None:
    with open_link(1) as link:
        a, url_a = fake_site(Loopback(), "a")
        b, url_b = fake_site(link, "b")
        gw = gateway(tmp_path, {"a": url_a, "b": url_b})
        tally = Tally("site partitioned from the gateway, then returned")

        async def scenario() -> None:
            done = asyncio.Event()
            driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
            await wait_health(gw.url, "b", "up")
            await asyncio.sleep(1.0)
            await asyncio.to_thread(link.cut)
            down_at = await wait_health(gw.url, "b", "down")
            await asyncio.sleep(1.0)
            await asyncio.to_thread(link.heal)
            healed_at = time.monotonic()
            up_at = await wait_health(gw.url, "b", "up")
            await asyncio.sleep(1.0)
            done.set()
            await driver
            _not_served_between(tally, "b", down_at, healed_at)
            _not_served_between(tally, "b", healed_at, up_at - 0.05)

        with running(gw, a, b):
            asyncio.run(asyncio.wait_for(scenario(), 60))
    _report(tally)
    _no_hangs(tally)
    assert sum(tally.failed.values()) == 0, tally
    assert tally.by_site["a"] > 0 and tally.by_site["b"] > 0
    assert set(tally.refused) <= {"504 upstream_timeout"}, tally.refused


@pytest.mark.fault_short
def test_site_killed_mid_stream(tmp_path: Path) -> None:
    lo = Loopback()
    b, url_b = fake_site(lo, "b", "--per-token-ms", "100")
    a, url_a = fake_site(lo, "a", "--per-token-ms", "100")
    gw = gateway(tmp_path, {"b": url_b, "a": url_a}, models=[{"name": MODEL, "policy": "first"}])
    tally = Tally("site process killed mid-stream")

    async def scenario() -> None:
        done = asyncio.Event()
        await wait_health(gw.url, "b", "up")
        driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4, stream=True))
        await asyncio.sleep(1.2)
        await asyncio.to_thread(b.kill)
        await wait_health(gw.url, "b", "down")
        await asyncio.sleep(1.0)
        done.set()
        await driver

    with running(gw, a, b):
        asyncio.run(asyncio.wait_for(scenario(), 60))
    _report(tally, "SIGKILL of the site's process")
    _no_hangs(tally)
    cut = tally.failed["stream_cut_cleanly"] + tally.failed["stream_truncated"]
    assert sum(tally.failed.values()) == cut  # only streams under way on b
    assert cut <= 4  # at most the streams in flight at the kill
    assert tally.by_site["b"] > 0 and tally.by_site["a"] > 0
    assert not tally.refused, tally.refused


@pytest.mark.fault_short
def test_all_sites_down_last_resort_then_503(tmp_path: Path) -> None:
    with open_link(2) as la, open_link(3) as lb:
        a, url_a = fake_site(la, "a")
        b, url_b = fake_site(lb, "b")
        gw = gateway(tmp_path, {"a": url_a, "b": url_b})
        tally = Tally("all sites down")

        async def scenario() -> None:
            await wait_health(gw.url, "a", "up")
            await wait_health(gw.url, "b", "up")
            await asyncio.to_thread(la.cut)
            await asyncio.to_thread(lb.cut)
            await wait_health(gw.url, "a", "down")
            await wait_health(gw.url, "b", "down")
            done = asyncio.Event()
            driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
            await asyncio.sleep(1.5)
            done.set()
            await driver

        with running(gw, a, b):
            asyncio.run(asyncio.wait_for(scenario(), 60))
    _report(tally)
    _no_hangs(tally)
    assert tally.served == 0 and sum(tally.failed.values()) == 0, tally
    # the front candidate was tried as a last resort, then 503 + Retry-After (not 502/504)
    assert set(tally.refused) == {"503 no_healthy_site"}, tally.refused


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_gateways_local_operator_stopped_pauses_judgement(tmp_path: Path, how: str) -> None:
    """The gateway's own operator dies (SIGKILL: its port refuses) or freezes
    (SIGSTOP: connections are accepted and never answered, a stalled poller). Either
    way the gateway's polls fail, which pauses judgement: no site goes silent, and
    both keep serving long after any silence window would have closed."""
    lo = Loopback()
    a, url_a = fake_site(lo, "a")
    b, url_b = fake_site(lo, "b")
    op_b = operator(tmp_path, "b", url_b, {})
    op_a = operator(tmp_path, "a", url_a, {"b": op_b.url})
    gw = gateway(
        tmp_path,
        {"a": url_a, "b": url_b},
        operator={"url": op_a.url, "poll_interval_s": 0.25, "timeout_s": 0.2},
    )
    tally = Tally(f"the gateway's local operator stopped ({how})")

    async def scenario() -> None:
        await wait_field(gw.url, "a", "live", "live", timeout=30)
        await wait_field(gw.url, "b", "live", "live", timeout=30)
        done = asyncio.Event()
        driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
        await asyncio.sleep(1.0)
        if how == "killed":
            await asyncio.to_thread(op_a.kill)
        else:
            op_a.popen.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        seen: set[str | None] = set()
        for _ in range(30):  # 3 s: many poll intervals, far past any silence window
            seen |= {await site_field(gw.url, s, "live") for s in ("a", "b")}
            await asyncio.sleep(0.1)
        done.set()
        await driver
        if how == "frozen":
            op_a.popen.send_signal(signal.SIGCONT)
        assert "silent" not in seen, seen  # judgement paused, not every peer silenced
        for site in ("a", "b"):  # both still served well after the operator stopped
            assert any(s == site and t > stopped_at + 1.5 for t, s in tally.served_at), site

    with running(gw, op_a, op_b, a, b):
        asyncio.run(asyncio.wait_for(scenario(), 60))
    _report(tally, "SIGKILL of the operator" if how == "killed" else "SIGSTOP of the operator")
    _no_hangs(tally)
    assert sum(tally.failed.values()) == 0 and not tally.refused, tally
    assert tally.by_site["a"] > 0 and tally.by_site["b"] > 0  # neither went silent


async def _relays_load_of(operator_url: str, site: str) -> bool:
    """Whether an operator's /signals carries any load row of `site`'s providers."""
    async with aiohttp.ClientSession() as http, http.get(operator_url + "/signals") as r:
        text = await r.text()
    return f'{{grid_site="{site}",grid_provider=' in text


@pytest.mark.parametrize("restart", [False, True], ids=["steady", "operator-restarts"])
def test_peer_partitioned_between_operators_only(tmp_path: Path, restart: bool) -> None:
    """The gateway reaches both sites; only operator a's polls of operator b are cut.
    b's load goes unheard: b is judged silent and gets nothing new while a serves;
    after the heal it returns only on fresh samples. With `restart`, operator a
    restarts during the partition and knows nothing of b until the link heals."""
    from tests.gateway.processes import free_port

    lo = Loopback()
    link = ProxyLink(5)
    a, url_a = fake_site(lo, "a")
    b, url_b = fake_site(lo, "b")
    op_b = operator(tmp_path, "b", url_b, {})
    op_port = free_port()
    peers = {"b": link.target(op_b.port)}
    ops = [operator(tmp_path, "a", url_a, peers, op_port)]
    gw = gateway(
        tmp_path,
        {"a": url_a, "b": url_b},
        operator={"url": ops[0].url, "poll_interval_s": 0.25, "timeout_s": 0.2},
    )
    name = "peer partitioned between operators" + (", operator restarts" if restart else "")
    tally = Tally(name)

    async def scenario() -> None:
        await wait_field(gw.url, "b", "live", "live")
        assert await _relays_load_of(ops[0].url, "b")  # heard: a relays b's load
        done = asyncio.Event()
        driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(link.cut)
        silent_at = await wait_field(gw.url, "b", "live", "silent", timeout=30)
        if restart:
            await asyncio.to_thread(ops[0].kill)
            # started off the event loop: the load driver keeps running meanwhile
            ops.append(await asyncio.to_thread(operator, tmp_path, "a", url_a, peers, op_port))
            # the new operator has never heard b: it relays no load row of b's (b's
            # candidates are unmeasured there until b returns, as the seed says), and
            # the gateway, which remembers b silent, does not see it live meanwhile
            for _ in range(10):
                assert not await _relays_load_of(ops[-1].url, "b")
                assert await site_field(gw.url, "b", "live") != "live"
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(link.heal)
        healed_at = time.monotonic()
        live_at = await wait_field(gw.url, "b", "live", "live", timeout=30)
        await asyncio.sleep(1.0)
        done.set()
        await driver
        _not_served_between(tally, "b", silent_at + 0.3, healed_at)
        _not_served_between(tally, "b", healed_at, live_at - 0.3)

    try:
        with running(gw, op_b, a, b):
            asyncio.run(asyncio.wait_for(scenario(), 90))
    finally:
        for op in ops:
            op.stop()
        link.close()
    _report(tally, "loopback fault proxy (operator to operator)")
    _no_hangs(tally)
    assert sum(tally.failed.values()) == 0 and not tally.refused, tally
    assert tally.by_site["a"] > 0 and tally.by_site["b"] > 0


def test_proxy_fallback_partition_works_without_namespaces(tmp_path: Path) -> None:
    """The fallback mechanism itself, run even where namespaces work."""
    link = ProxyLink(9)
    try:
        a, url_a = fake_site(Loopback(), "a")
        b, url_b = fake_site(link, "b")
        gw = gateway(tmp_path, {"a": url_a, "b": url_b})
        tally = Tally("site partitioned (loopback proxy), then returned")

        async def scenario() -> None:
            done = asyncio.Event()
            driver = asyncio.create_task(load(gw.url, tally, done, concurrency=4))
            await wait_health(gw.url, "b", "up")
            await asyncio.sleep(0.5)
            await asyncio.to_thread(link.cut)
            await wait_health(gw.url, "b", "down")
            await asyncio.sleep(0.5)
            await asyncio.to_thread(link.heal)
            await wait_health(gw.url, "b", "up")
            await asyncio.sleep(0.5)
            done.set()
            await driver

        with running(gw, a, b):
            asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        link.close()
    _report(tally, "loopback fault proxy")
    _no_hangs(tally)
    assert sum(tally.failed.values()) == 0, tally
