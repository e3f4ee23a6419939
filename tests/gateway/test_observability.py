"""Metrics, /grid/status, readiness, tracing spans and transition logs."""

from __future__ import annotations

import logging
import math
import time

import aiohttp
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest

from gridroute.gateway.app import create_metrics_app
from gridroute.gateway.tracing import RequestTracer
from tests.gateway.backends import serve
from tests.gateway.harness import MODEL, eventually, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

CHAT = [{"role": "user", "content": "hello"}]
SITE_GAUGES = (
    "grid_route_site_ceiling_soft",
    "grid_route_site_ceiling_hard",
    "grid_route_site_ceiling",
    "grid_route_site_rho_reported",
    "grid_route_site_rho_counted",
    "grid_route_site_rho",
    "grid_route_site_weight",
)


def test_metrics_have_the_seed_names_and_nan_without_a_reading() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a"), "b": fake("b")}) as g:
            reg = g.gw.metrics.registry
            for name in SITE_GAUGES:
                value = reg.get_sample_value(name, {"site": "a", "cluster": "a"})
                assert value is not None and math.isnan(value), name
            g.feed({"a": (2.0, 0.0, 10.0)})
            assert reg.get_sample_value(
                "grid_route_site_ceiling", {"site": "a", "cluster": "a"}
            ) == pytest.approx(10.0)
            assert reg.get_sample_value(
                "grid_route_site_rho_counted", {"site": "a", "cluster": "a"}
            ) == pytest.approx(0.2)
            assert reg.get_sample_value("grid_route_shedding", {"model": MODEL}) == 0.0
            await g.client().chat.completions.create(model=MODEL, messages=CHAT)
            sel = sum(
                s.value
                for m in reg.collect()
                if m.name == "grid_route_selections"
                for s in m.samples
                if s.name.endswith("_total")
            )
            assert sel == 1
            assert (
                reg.get_sample_value(
                    "grid_route_decisions_total", {"site": "b", "reason": "unmeasured"}
                )
                == 1.0
            )
            count = reg.get_sample_value(
                "grid_route_request_duration_seconds_count", {"site": "a", "status": "2xx"}
            )
            assert count == 1  # a is the only healthy site
            async with (
                serve(create_metrics_app(g.gw)) as murl,
                aiohttp.ClientSession() as http,
                http.get(murl + "/metrics") as r,
            ):
                text = await r.text()
            for name in (*SITE_GAUGES, "grid_route_shedding", "grid_route_selections_total"):
                assert f"\n{name}{{" in text, name
            assert "grid_route_decisions_total" in generate_latest(reg).decode()

    run(scenario)


def test_grid_status_and_readiness() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g, aiohttp.ClientSession() as http:
            async with http.get(g.url + "/healthz") as r:
                assert r.status == 200
            async with http.get(g.url + "/readyz") as r:
                assert r.status == 200  # no operator, probes off: nothing to wait for
            g.feed({"a": (1.0, 0.0, 8.0)})
            await g.client().chat.completions.create(model=MODEL, messages=CHAT)
            async with http.get(g.url + "/grid/status") as r:
                body = await r.json()
            (site,) = body["sites"]
            assert site["site"] == "a" and site["ready"] and site["live"] == "live"
            assert site["capacity"] == 8.0 and site["in_flight"] == 0
            assert body["models"][MODEL] == {
                "policy": "gridroute",
                "shedding": False,
                "state": "routed",
            }
            assert sum(body["selections"]["total"].values()) == 1
            assert body["decisions"]["total"]["a"]["routed"] == 1

    run(scenario)


def test_readiness_waits_for_the_first_probe_round() -> None:
    async def scenario() -> None:
        health = {"enabled": True, "interval_s": 0.05, "rise": 1}
        async with running_grid({"a": fake("a")}, health=health) as g:
            assert g.gw.prober.rounds == 0 or g.gw.ready
            async with aiohttp.ClientSession() as http:
                for _ in range(200):
                    async with http.get(g.url + "/readyz") as r:
                        if r.status == 200:
                            break
                assert r.status == 200

    run(scenario)


def test_a_span_per_request_with_the_decision() -> None:
    async def scenario() -> None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        async with running_grid({"a": fake("a")}) as g:
            g.gw.tracer = RequestTracer(provider.get_tracer("test"))
            await g.client().chat.completions.create(model=MODEL, messages=CHAT)
        spans = {s.name: s for s in exporter.get_finished_spans()}
        assert set(spans) == {"gridroute.route", "gridroute.attempt"}
        attrs = dict(spans["gridroute.route"].attributes or {})
        assert attrs["grid.policy"] == "gridroute"
        assert attrs["grid.site"] == "a"
        assert attrs["grid.attempts"] == 1
        assert attrs["grid.path"] == "fallback"  # nothing measured yet
        assert attrs["http.response.status_code"] == 200

    run(scenario)


def test_refusal_transitions_log_once(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            import time

            from gridroute.core import Sample

            clock = [1000.0]
            g.gw.refusals.clock = lambda: clock[0]
            t = time.time()
            g.gw.current.refresh([Sample("a", "a", t, running=0, ready=0.0)], {"a": t}, t)
            client = g.client()
            for _ in range(5):
                with pytest.raises(Exception):  # noqa: B017 - 503, checked elsewhere
                    await client.chat.completions.create(model=MODEL, messages=CHAT)
            g.feed({"a": (0.0, 0.0, 8.0)})
            await client.chat.completions.create(model=MODEL, messages=CHAT)
            # Within the hold after the last refusal the model still reads no_site ...
            assert g.gw.refusals.current() == {MODEL: "no_site"}
            clock[0] += 10.0  # ... and once it has passed, routed (logged at the next request)
            for _ in range(5):
                await client.chat.completions.create(model=MODEL, messages=CHAT)

    with caplog.at_level(logging.WARNING, logger="gridroute.gateway"):
        run(scenario)
    lines = [r.getMessage() for r in caplog.records if "model m" in r.getMessage()]
    assert lines == ["model m: start -> no_site", "model m: no_site -> routed"]


def test_alternating_shed_and_routed_requests_log_one_line_and_raise_the_gauge() -> None:
    """gridroute past capacity sheds request by request: one transition line, gauge 1."""
    from gridroute.core import Outcome
    from gridroute.gateway.shedding_state import SheddingState

    clock = [0.0]
    log_ = SheddingState(hold_s=5.0, clock=lambda: clock[0])
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("gridroute.gateway")
    logger.addHandler(handler)
    try:
        for i in range(100):
            clock[0] = i * 0.01
            log_.note("m", Outcome.SHED if i % 3 == 0 else Outcome.ROUTE)
        assert log_.shedding("m")
        clock[0] = 20.0
        log_.note("m", Outcome.ROUTE)
        assert not log_.shedding("m")
    finally:
        logger.removeHandler(handler)
    assert records == ["model m: start -> shed", "model m: shed -> routed"]


def test_rho_gauges_and_status_read_the_core_formulas() -> None:
    """counted = (others + own now) / ceiling; rho = the gridroute pick's figure, which
    weighs others' part by this gateway's share; reported where the policy reads it."""

    async def scenario() -> None:
        models = [
            {"name": MODEL, "sites": ["a"]},
            {"name": "s", "sites": ["b"], "policy": "saturation"},
        ]
        async with running_grid({"a": fake("a"), "b": fake("b")}, models=models) as g:
            g.feed({"a": (4.0, 0.0, 10.0), "b": (5.0, 0.0, 10.0)})
            current = g.gw.current
            now = time.time()
            current.own.start("a/a", now)
            current.own.start("a/a", now)
            reg = g.gw.metrics.registry

            def gauge(name: str, site: str) -> float | None:
                return reg.get_sample_value(
                    f"grid_route_site_{name}", {"site": site, "cluster": site}
                )

            a = current.snapshot.view("a/a")
            b = current.snapshot.view("b/b")
            assert a is not None and b is not None
            assert a.share == pytest.approx(0.05)  # no own load at the sample: the floor
            assert gauge("rho_counted", "a") == pytest.approx((4 + 2) / 10)
            assert gauge("rho", "a") == pytest.approx((2 + 0.05 * 4) / 10)
            assert gauge("rho", "a") == pytest.approx(a.pick_rho(2))
            assert gauge("rho_reported", "a") == pytest.approx(a.rho)
            assert gauge("rho", "b") == pytest.approx(b.rho)  # saturation: reported
            assert gauge("rho_counted", "b") == pytest.approx(0.5)
            assert gauge("in_flight", "a") == 2.0
            async with aiohttp.ClientSession() as http, http.get(g.url + "/grid/status") as r:
                body = await r.json()
            by = {s["site"]: s for s in body["sites"]}
            assert by["a"]["rho_counted"] == pytest.approx(0.6)
            assert by["a"]["rho"] == pytest.approx(0.22)
            assert by["b"]["rho"] == pytest.approx(round(b.rho or 0.0, 4))
            assert by["a"]["weight"] == gauge("weight", "a")
            current.own.end("a/a", time.time())
            current.own.end("a/a", time.time())
            assert g.in_flight() == 0

    run(scenario)


def test_backend_pools_are_visible_in_metrics() -> None:
    """Open and idle connections per backend, and the resend counter, read at scrape."""

    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            reg = g.gw.metrics.registry
            labels = {"site": "a", "cluster": "a"}
            client = g.client()
            for _ in range(3):
                await client.chat.completions.create(model=MODEL, messages=CHAT)

            def conns(state: str) -> float | None:
                return reg.get_sample_value(
                    "grid_route_backend_connections", {**labels, "state": state}
                )

            opened = conns("open")
            assert opened is not None and opened >= 1
            # Nothing in flight (a health probe may be, for a moment): all back in the pool.
            await eventually(lambda: conns("idle") == conns("open"))
            assert reg.get_sample_value("grid_route_backend_resends_total", labels) == 0

    run(scenario)
