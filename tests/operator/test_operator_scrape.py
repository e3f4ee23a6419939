"""Scraping: garbage pages are failed scrapes, stale readiness, silence, unmeasured providers,
and an EPP pool named by `poolName`."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import aiohttp
import pytest
from operator_fixtures import MetricsServer, free_port, operator_config, vllm_page, vllm_provider
from prometheus_client import CollectorRegistry

from gridroute.operator.config import ProviderConfig
from gridroute.operator.metrics import OperatorMetrics
from gridroute.operator.scrape import ProviderScraper
from gridroute.operator.service import Operator
from gridroute.relay.poller import PollLimits, PollMetrics, PollResult, SignalsClient


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def provider(port: int, **metrics: object) -> ProviderConfig:
    return ProviderConfig.model_validate(
        {
            "name": "pool",
            "models": ["m"],
            "backendUrl": "http://127.0.0.1:1",
            "maxRunning": 8,
            "metricsConfig": {
                "endpoint": f"http://127.0.0.1:{port}/metrics",
                "staleMetricsSeconds": 10,
                **metrics,
            },
        }
    )


def scrapes(registry: CollectorRegistry, result: str) -> float:
    value = registry.get_sample_value(
        "grid_provider_scrape_total", {"provider": "pool", "result": result}
    )
    return value or 0.0


def test_garbage_then_stale_readiness_then_silence_then_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gridroute.operator.scrape")
    clock = Clock()
    registry = CollectorRegistry()

    async def main() -> None:
        async with MetricsServer(vllm_page(3, 1)) as server, aiohttp.ClientSession() as http:
            scraper = ProviderScraper(
                "west", provider(server.port), metrics=OperatorMetrics(registry), clock=clock
            )
            good = await scraper.scrape(http, 1.0)
            assert good is not None and good.running == 3.0 and good.waiting == 1.0
            assert good.max_running == 8.0 and good.generation == scraper.generation
            assert scraper.condition is not None and scraper.condition.status

            server.text = "<html>oops</html>"
            clock.now += 5
            stale = await scraper.scrape(http, 1.0)
            assert stale is not None and stale.ready == 1.0
            assert stale.running is None and stale.generation is None  # nothing to learn
            cond = scraper.condition
            assert cond is not None and not cond.status and "parse" in cond.message

            server.status = 500
            clock.now += 6  # past staleMetricsSeconds since the last good scrape
            assert await scraper.scrape(http, 1.0) is None  # silent

            server.status, server.text = 200, vllm_page(4)
            back = await scraper.scrape(http, 1.0)
            assert back is not None and back.running == 4.0 and scraper.condition.status

    asyncio.run(main())
    assert scrapes(registry, "ok") == 2
    assert scrapes(registry, "parse") == 1 and scrapes(registry, "http_error") == 1
    messages = [r.getMessage() for r in caplog.records]
    assert sum("MetricsAvailable=False" in m for m in messages) == 1
    assert sum("MetricsAvailable=True again" in m for m in messages) == 1


def test_unreachable_endpoint_and_missing_token_file(tmp_path: Path) -> None:
    registry = CollectorRegistry()

    async def main() -> None:
        async with aiohttp.ClientSession() as http:
            scraper = ProviderScraper(
                "west",
                provider(1, bearerTokenFile=str(tmp_path / "missing")),
                metrics=OperatorMetrics(registry),
                clock=Clock(),
            )
            assert await scraper.scrape(http, 0.5) is None
            assert scraper.condition is not None and "token" in scraper.condition.message
            assert (
                await ProviderScraper(
                    "west", provider(1), metrics=OperatorMetrics(CollectorRegistry()), clock=Clock()
                ).scrape(http, 0.5)
                is None
            )

    asyncio.run(main())
    assert scrapes(registry, "token") == 1


def test_bearer_token_is_sent() -> None:
    from aiohttp import web

    seen: list[str | None] = []

    async def main(token_file: Path) -> None:
        async def metrics(request: web.Request) -> web.Response:
            seen.append(request.headers.get("Authorization"))
            return web.Response(text=vllm_page(1))

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        from operator_fixtures import free_port

        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with aiohttp.ClientSession() as http:
                scraper = ProviderScraper(
                    "west",
                    provider(port, bearerTokenFile=str(token_file)),
                    metrics=OperatorMetrics(CollectorRegistry()),
                    clock=Clock(),
                )
                assert await scraper.scrape(http, 1.0) is not None
        finally:
            await runner.cleanup()

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        token = Path(d) / "token"
        token.write_text("s3cret\n")
        asyncio.run(main(token))
    assert seen == ["Bearer s3cret"]


def test_provider_without_metrics_config_publishes_no_load() -> None:
    cfg = ProviderConfig.model_validate(
        {"name": "dark", "models": ["m"], "backendUrl": "http://127.0.0.1:1"}
    )
    scraper = ProviderScraper(
        "west", cfg, metrics=OperatorMetrics(CollectorRegistry()), clock=Clock()
    )

    async def main() -> None:
        async with aiohttp.ClientSession() as http:
            assert await scraper.scrape(http, 1.0) is None

    asyncio.run(main())
    assert not scraper.measured and scraper.condition is None


def test_a_page_past_the_size_bound_is_a_failed_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    """A metrics page larger than the scraper holds is refused whole (`too_large`), and
    the last good reading's readiness is republished while it is not stale."""
    registry = CollectorRegistry()
    clock = Clock()

    async def main() -> None:
        async with MetricsServer(vllm_page(3, 1)) as server, aiohttp.ClientSession() as http:
            scraper = ProviderScraper(
                "west", provider(server.port), metrics=OperatorMetrics(registry), clock=clock
            )
            assert await scraper.scrape(http, 1.0) is not None
            monkeypatch.setattr("gridroute.operator.scrape.MAX_EXPOSITION_BYTES", 64)
            clock.now += 1
            stale = await scraper.scrape(http, 1.0)
            assert stale is not None and stale.running is None
            cond = scraper.condition
            assert cond is not None and not cond.status and "too_large" in cond.message

    asyncio.run(main())
    assert scrapes(registry, "too_large") == 1


# --- an EPP serving two InferencePools: `metricsConfig.poolName` -----------------------

TWO_POOLS = """\
# TYPE llm_d_epp_average_running_requests gauge
llm_d_epp_average_running_requests{name="qwen3"} 3
llm_d_epp_average_running_requests{name="llama"} 40
llm_d_epp_average_queue_size{name="qwen3"} 1
llm_d_epp_average_queue_size{name="llama"} 7
llm_d_epp_ready_endpoints{name="qwen3"} 2
llm_d_epp_ready_endpoints{name="llama"} 5
llm_d_epp_per_endpoint_queue_size{name="qwen3",model_server_endpoint="10.0.0.1:8000"} 2
llm_d_epp_per_endpoint_queue_size{name="llama",model_server_endpoint="10.0.0.2:8000"} 12
llm_d_epp_average_kv_cache_utilization{name="qwen3"} 0.3
llm_d_epp_average_kv_cache_utilization{name="llama"} 0.9
llm_d_epp_flow_control_queue_size{fairness_id="a",inference_pool="qwen3",priority="0"} 4
llm_d_epp_flow_control_queue_size{fairness_id="a",inference_pool="llama",priority="0"} 9
llm_d_epp_flow_control_queue_size{fairness_id="b",priority="0"} 13
"""
"""Two pools on one EPP page, the pool gauges labelled `name`, the flow-control queue
`inference_pool`, and one flow-control partition with no pool label (a total)."""


def load_of(sample: object) -> tuple[object, ...]:
    fields = ("running", "waiting", "ready", "held", "deepest_queue", "kv_usage")
    return tuple(getattr(sample, f) for f in fields)


def test_a_named_pool_reads_only_its_own_series_from_a_shared_epp() -> None:
    """Three providers scrape one EPP page: `poolName: qwen3` and `poolName: llama` each
    read their own pool's series only, the unlabeled partition left out; a provider with
    no pool named reads the page as before, max across pools and every partition."""
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    seen: dict[str, object] = {}

    async def main() -> None:
        async with MetricsServer(TWO_POOLS) as server, aiohttp.ClientSession() as http:
            for pool in ("qwen3", "llama", None):
                extra = {"format": "epp"} if pool is None else {"poolName": pool}
                scraper = ProviderScraper(
                    "west", provider(server.port, **extra), metrics=metrics, clock=Clock()
                )
                seen[str(pool)] = await scraper.scrape(http, 1.0)
                cond = scraper.condition
                assert cond is not None and cond.status, cond
                assert (f"(pool {pool})" in cond.message) is (pool is not None)

    asyncio.run(main())
    assert load_of(seen["qwen3"]) == (3.0, 1.0, 2.0, 4.0, 2.0, 0.3)
    assert load_of(seen["llama"]) == (40.0, 7.0, 5.0, 9.0, 12.0, 0.9)
    assert load_of(seen["None"]) == (40.0, 7.0, 5.0, 26.0, 12.0, 0.9)  # unchanged: mixed
    assert scrapes(registry, "ok") == 3


def test_a_pool_missing_from_the_page_is_a_failed_scrape() -> None:
    """A pool the EPP does not (or no longer) serve has no series: the scrape fails as
    `empty` and the condition names the pool, rather than reading another pool's load."""
    registry = CollectorRegistry()

    async def main() -> None:
        async with MetricsServer(TWO_POOLS) as server, aiohttp.ClientSession() as http:
            scraper = ProviderScraper(
                "west",
                provider(server.port, poolName="mistral"),
                metrics=OperatorMetrics(registry),
                clock=Clock(),
            )
            assert await scraper.scrape(http, 1.0) is None
            cond = scraper.condition
            assert cond is not None and not cond.status
            assert "empty" in cond.message and "'mistral'" in cond.message

    asyncio.run(main())
    assert scrapes(registry, "empty") == 1


def test_the_operator_relays_each_named_pool_from_one_epp() -> None:
    """A running operator with two providers on one EPP, one per pool, serves each
    provider's own pool's load on /signals."""

    async def scenario() -> None:
        async with MetricsServer(TWO_POOLS) as epp:
            providers = [
                vllm_provider(pool, epp.port, format="epp", poolName=pool)
                for pool in ("qwen3", "llama")
            ]
            op = Operator(operator_config("hub", free_port(), certs=None, providers=providers))
            await op.start()
            gateway = SignalsClient(
                "hub",
                f"http://127.0.0.1:{op.port}/signals",
                metrics=PollMetrics(CollectorRegistry()),
                limits=PollLimits(timeout_s=5.0),
            )
            try:
                deadline = time.monotonic() + 30.0
                while not {"hub/qwen3", "hub/llama"} <= set(op.store.latest()):
                    assert time.monotonic() < deadline, "both pools scraped"
                    await asyncio.sleep(0.02)
                read = await gateway.poll()
                assert read.result is PollResult.OK and read.decoded is not None
                newest = {s.key: s for s in read.decoded.samples}
                assert (newest["hub/qwen3"].running, newest["hub/qwen3"].ready) == (3.0, 2.0)
                assert (newest["hub/llama"].running, newest["hub/llama"].ready) == (40.0, 5.0)
                assert newest["hub/qwen3"].in_flight == (3 + 1) * 2 + 4
                assert newest["hub/llama"].in_flight == (40 + 7) * 5 + 9
            finally:
                await gateway.close()
                await op.stop()

    asyncio.run(scenario())
