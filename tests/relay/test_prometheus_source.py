"""`PrometheusSource` against a stand-in query API on loopback: how each kind of failure
ends a poll, that a good answer becomes samples with judgement times, and that a lying
value is clamped exactly as the /signals decoder clamps it. (The real
Prometheus path is tests/e2e/test_prometheus_grid.py.)"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from gridroute.config import ConfigError
from gridroute.core.sample import Sample
from gridroute.gateway.config import parse_config
from gridroute.operator.config import parse_config as parse_operator_config
from gridroute.relay.poller import PollMetrics, PollResult
from gridroute.relay.prometheus_link import PrometheusLink
from gridroute.relay.prometheus_source import TARGET, PrometheusSource
from gridroute.wire.signals import FIELDS, decode_relay, encode_relay
from tests.gateway.backends import serve
from tests.gateway.harness import run

GOOD_SERIES = (
    ("llm_d_epp_average_running_requests", "3"),
    ("llm_d_epp_average_queue_size", "0"),
    ("llm_d_epp_ready_endpoints", "2"),
)


def _api(behaviour: dict[str, Any]) -> web.Application:
    async def query(request: web.Request) -> web.Response:
        mode = behaviour["mode"]
        expr = request.query["query"]
        if mode == "slow":
            await asyncio.sleep(2.0)
        if mode == "401":
            return web.Response(status=401)
        if mode == "400":
            return web.json_response({"status": "error", "error": "bad_data"}, status=400)
        if mode == "huge":
            return web.Response(body=b" " * 5000, content_type="application/json")
        now = time.time()
        if "grid_route_site_in_flight" in expr:
            behaviour.setdefault("gateway_queries", []).append(expr)
            result = [
                {"metric": {"job": "gw", "instance": inst, "site": site, "cluster": "p"},
                 "value": [now, value]}
                for inst, site, value in behaviour.get("gateways", ())
            ]  # fmt: skip
            kind = "vector"
        elif expr.startswith("max by"):
            result: list[Any] = [{"metric": {"grid_site": "hub"}, "value": [now, str(now)]}]
            kind = "vector"
        else:
            kind = "matrix"
            result = [
                {
                    "metric": {"__name__": name, "grid_site": "hub", "grid_provider": "p"},
                    "values": [[now - 0.2, value]],
                }
                for name, value in behaviour.get("series", GOOD_SERIES)
            ]
        body = {"status": "success", "data": {"resultType": kind, "result": result}}
        return web.Response(body=json.dumps(body).encode(), content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    return app


def test_each_failure_has_its_result_and_a_good_answer_is_read() -> None:
    async def scenario() -> None:
        behaviour = {"mode": "ok"}
        reg = CollectorRegistry()
        async with serve(_api(behaviour)) as url:
            cfg = PrometheusLink(url=url, timeout_s=0.5, max_response_bytes=4096)
            src = PrometheusSource(cfg, ["hub", "west"], PollMetrics(reg))
            try:
                ok = await src.poll()
                assert ok.result is PollResult.OK, ok.error
                assert ok.decoded is not None
                (sample,) = ok.decoded.samples
                assert (sample.key, sample.running, sample.ready) == ("hub/p", 3.0, 2.0)
                assert set(ok.decoded.round_ends) == {"hub"}
                for mode, want in (
                    ("401", PollResult.UNAUTHORIZED),
                    ("400", PollResult.UNREACHABLE),
                    ("huge", PollResult.TOO_LARGE),
                    ("slow", PollResult.UNREACHABLE),
                ):
                    behaviour["mode"] = mode
                    got = await src.poll()
                    assert got.result is want, (mode, got.error)
                    assert got.decoded is None
            finally:
                await src.close()
        counted = {
            result.value: reg.get_sample_value(
                "grid_signals_poll_total", {"target": TARGET, "result": result.value}
            )
            for result in PollResult
        }
        assert counted == {  # every result exposed, the ones that happened counted
            "ok": 1.0, "unreachable": 2.0, "unauthorized": 1.0, "too_large": 1.0,
            "no_date": 0.0, "bad_identity": 0.0, "undecodable": 0.0,
        }  # fmt: skip

    run(scenario)


def test_a_lying_peer_read_through_prometheus_is_clamped_as_on_the_signals_path() -> None:
    # A peer claims absurd load; Prometheus scraped its /signals rows as they were. The
    # gateway reading them back through the query API gets the same clamped sample the
    # operator's /signals decoder would have made of those rows.
    lie = Sample(
        site="hub", provider="p", at=time.time(), running=1e12, waiting=3.0, ready=2.0,
        held=0.0, kv_usage=7.0, max_running=5e9, generation=1,
    )  # fmt: skip
    series = tuple(
        (name, str(getattr(lie, attr))) for attr, name in FIELDS if getattr(lie, attr) is not None
    )
    body = encode_relay([[lie]], {}, local_site="hub").body
    (via_signals,) = decode_relay(body, date=lie.at, offset=0.0).received

    got_samples: list[Sample] = []

    async def scenario() -> None:
        async with serve(_api({"mode": "ok", "series": series})) as url:
            src = PrometheusSource(
                PrometheusLink(url=url, timeout_s=0.5), ["hub"], PollMetrics(CollectorRegistry())
            )
            try:
                got = await src.poll()
            finally:
                await src.close()
        assert got.result is PollResult.OK, got.error
        assert got.decoded is not None
        got_samples.extend(got.decoded.samples)

    run(scenario)
    (via_prometheus,) = got_samples
    assert (via_prometheus.running, via_prometheus.waiting, via_prometheus.max_running) == (
        None, 3.0, None,
    )  # fmt: skip
    assert via_prometheus.kv_usage == 1.0
    fields = [attr for attr, _ in FIELDS]
    assert [getattr(via_prometheus, a) for a in fields] == [
        getattr(via_signals.sample, a) for a in fields
    ]


def test_nothing_listening_is_unreachable() -> None:
    async def scenario() -> None:
        cfg = PrometheusLink(url="http://127.0.0.1:9", timeout_s=0.5)
        src = PrometheusSource(cfg, ["hub"], PollMetrics(CollectorRegistry()))
        try:
            got = await src.poll()
        finally:
            await src.close()
        assert got.result is PollResult.UNREACHABLE

    run(scenario)


GATEWAY_YAML = """
sites: [{name: hub, backend_url: "http://127.0.0.1:1"}]
models: [{name: m}]
signals: {transport: prometheus%s}
"""


def test_the_gateway_needs_the_link_and_an_operator_may_not_use_it() -> None:
    with pytest.raises(ConfigError, match="prometheus: required with transport: prometheus"):
        parse_config(GATEWAY_YAML % "")
    cfg = parse_config(GATEWAY_YAML % ', prometheus: {url: "http://127.0.0.1:9090/"}')
    assert cfg.signals.prometheus is not None
    assert cfg.signals.prometheus.url == "http://127.0.0.1:9090"
    operator = {
        "site": "hub",
        "listen": "127.0.0.1:9443",
        "providers": [],
        "signals": {"transport": "prometheus", "prometheus": {"url": "http://p:9090"}},
    }
    with pytest.raises(ConfigError, match="is for gateways"):
        parse_operator_config(operator)


def test_every_scraped_gateways_own_in_flight_is_read_beside_the_rows() -> None:
    """The third query: each gateway's `grid_route_site_in_flight`, as Prometheus scraped
    it from their metrics listeners, summed per candidate and counted per gateway, filed
    under the reader's site as the mesh files its own gateways' sums."""

    async def scenario() -> None:
        behaviour: dict[str, Any] = {
            "mode": "ok",
            "gateways": [
                ("10.0.0.1:9100", "hub", "3"),
                ("10.0.0.1:9100", "west", "1"),
                ("10.0.0.2:9100", "hub", "2"),
                ("10.0.0.3:9100", "west", "NaN"),  # a row a gateway no longer has
            ],
        }
        async with serve(_api(behaviour)) as url:
            cfg = PrometheusLink(url=url, timeout_s=0.5, gateway_selector='job="gw"')
            src = PrometheusSource(cfg, ["hub"], PollMetrics(CollectorRegistry()), local_site="hub")
            plain = PrometheusSource(cfg, ["hub"], PollMetrics(CollectorRegistry()))
            try:
                got = await src.poll()
                assert got.result is PollResult.OK, got.error
                assert got.decoded is not None
                sums = got.decoded.gateways["hub"]
                assert (sums.gateways, dict(sums.in_flight)) == (2, {"hub/p": 5.0, "west/p": 1.0})
                assert behaviour["gateway_queries"] == [
                    '{__name__=~"grid_route_site_in_flight|grid_route_site_demand'
                    '|grid_route_site_unmet|grid_route_site_want", job="gw"}'
                ]
                # Without its site (or with gateway_selector: null) no reports are read.
                off = await plain.poll()
                assert off.decoded is not None and off.decoded.gateways == {}
                assert len(behaviour["gateway_queries"]) == 1
                behaviour["gateways"] = []  # no gateway scraped: no sums, the fallback
                none = await src.poll()
                assert none.decoded is not None and none.decoded.gateways == {}
            finally:
                await src.close()
                await plain.close()

    run(scenario)
