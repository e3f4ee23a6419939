"""Gateways' own in-flight over NATS (the fair share among gateways): each gateway
publishes its counts on its own subject and sums the others' itself; a gateway that
stops reporting ages out; a gateway's user may report only as its own site's.

The store is tested on its own first, then against a real nats-server on loopback
whose users are known by client certificates made at test time, as in test_nats.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry

from gridroute.grid.nats_server import READER, NatsCluster, gateway_user
from gridroute.relay.nats_gateway_reports import GatewayReportBoard
from gridroute.relay.nats_source import NatsSignalsSource, OwnReport
from gridroute.relay.poller import PollMetrics, PollOutcome, PollResult
from gridroute.wire.signals import GatewaySums
from tests.relay.test_nats import SITES, cluster, link, pytestmark, run, until

__all__ = ["pytestmark"]

PREFIX = "gridroute.gateways"


# --- the store ------------------------------------------------------------------------


def test_reports_are_summed_per_reporting_site_and_age_out_after_the_window() -> None:
    board = GatewayReportBoard(PREFIX, window_s=5.0)
    assert board.ingest(f"{PREFIX}.west.gw-1", b"west/pool=3,east/pool=1", now=100.0)
    assert board.ingest(f"{PREFIX}.west.gw-2", b"west/pool=2", now=101.0)
    assert board.ingest(f"{PREFIX}.east.gw-3", b"", now=102.0)  # reporting, nothing in flight
    assert board.sums(102.0) == {
        # No demand in the messages: each gateway demands its whole in-flight.
        "west": GatewaySums(
            101.0, 2, {"west/pool": 5.0, "east/pool": 1.0}, {"west/pool": 1.0, "east/pool": 3.0}
        ),
        "east": GatewaySums(102.0, 1, {}),
    }
    # A newer report replaces the gateway's last one; it is never added to it.
    board.ingest(f"{PREFIX}.west.gw-1", b"west/pool=1", now=103.0)
    assert board.sums(103.0)["west"].in_flight == {"west/pool": 3.0}
    # gw-2 last spoke at 101: past 5 s it is out of the sum, the others stay.
    assert board.sums(106.5) == {
        "west": GatewaySums(103.0, 1, {"west/pool": 1.0}),
        "east": GatewaySums(102.0, 1, {}),
    }
    assert board.sums(120.0) == {}


def test_a_malformed_report_is_refused_whole_and_counted() -> None:
    board = GatewayReportBoard(PREFIX)
    refused = {
        f"{PREFIX}.west": b"west/pool=1",  # no gateway id
        f"{PREFIX}.west.gw.1": b"west/pool=1",  # too many tokens
        "gridroute.signals.west": b"west/pool=1",  # another prefix
        f"{PREFIX}.west.gw-1": b"west/pool=1,garbage",  # half a report
    }
    for subject, data in refused.items():
        assert not board.ingest(subject, data, now=1.0), subject
    board.ingest(f"{PREFIX}.west.gw-2", b"\xff\xfe", now=1.0)
    assert board.sums(1.0) == {}
    assert board.take_dropped() == {"site_mismatch": 3, "undecodable": 2}
    assert board.take_dropped() == {}


# --- against a real nats-server --------------------------------------------------------


class Clock:
    """A wall clock the test can push forward (to age a report out without waiting)."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew


def gateway(
    nats: NatsCluster,
    site: str,
    ident: str,
    counts: Mapping[str, int],
    *,
    user: str | None = None,
    clock: Clock | None = None,
) -> NatsSignalsSource:
    """A gateway's NATS source at `site` reporting `counts` (as `user`'s certificate)."""
    return NatsSignalsSource(
        link(nats, user or gateway_user(site)),
        metrics=PollMetrics(CollectorRegistry()),
        reporter=OwnReport(site, ident, lambda: counts),
        **({} if clock is None else {"clock": clock}),
    )


def sums(outcome: PollOutcome) -> dict[str, tuple[int, dict[str, float]]]:
    """What one read relayed of the gateways: reporting site -> (gateways, sums)."""
    decoded = outcome.decoded
    assert decoded is not None
    return {s: (g.gateways, dict(g.in_flight)) for s, g in decoded.gateways.items()}


def test_two_gateways_read_each_others_counts_and_a_silent_one_ages_out(tmp_path: Path) -> None:
    async def scenario() -> None:
        with cluster(tmp_path, SITES) as nats:
            clock = Clock()
            a = gateway(nats, "west", "gw-a", {"west/pool": 3, "east/pool": 1}, clock=clock)
            b = gateway(nats, "east", "gw-b", {"west/pool": 2})
            try:
                both = {
                    "west": (1, {"west/pool": 3.0, "east/pool": 1.0}),
                    "east": (1, {"west/pool": 2.0}),
                }

                async def each_sees_both() -> bool:
                    out_a, out_b = await a.poll(), await b.poll()
                    assert out_a.result is PollResult.OK and out_b.result is PollResult.OK
                    return sums(out_a) == both and sums(out_b) == both

                await until(each_sees_both)
                assert a.report_refused is None and b.report_refused is None
                # b stops reporting (its gateway died): a drops it after the window.
                await b.close()
                clock.skew = a.link.report_window_s + 1.0
                out = await a.poll()
                assert sums(out) == {"west": (1, {"west/pool": 3.0, "east/pool": 1.0})}
            finally:
                await a.close()
                await b.close()

    run(scenario)


def test_a_gateway_may_report_only_as_its_own_site(tmp_path: Path) -> None:
    """West's gateway certificate reporting under east's subject is refused by the server
    (the honest gateway never sees it), and the liar's own read turns its sums off, so
    its share keeps the fallback instead of reading itself as the only gateway. The
    plain reader certificate may read reports but publish none."""

    async def scenario() -> None:
        with cluster(tmp_path, SITES) as nats:
            honest = gateway(nats, "east", "gw-honest", {"east/pool": 1})
            liar = gateway(nats, "east", "gw-liar", {"east/pool": 9}, user=gateway_user("west"))
            reader = gateway(nats, "west", "gw-reader", {"west/pool": 4}, user=READER)
            try:
                await until(lambda: _refused(liar))
                await until(lambda: _refused(reader))
                assert "permissions violation" in (liar.report_refused or "").lower()
                for _ in range(3):
                    out = await honest.poll()
                    assert sums(out) == {"east": (1, {"east/pool": 1.0})}
                    await asyncio.sleep(0.05)
                assert sums(await liar.poll()) == {}
                assert sums(await reader.poll()) == {}
            finally:
                for src in (honest, liar, reader):
                    await src.close()

    run(scenario)


async def _refused(src: NatsSignalsSource) -> bool:
    await src.poll()
    return src.report_refused is not None
