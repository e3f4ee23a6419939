"""Scraping: garbage pages are failed scrapes, stale readiness, silence, unmeasured providers."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
from operator_fixtures import MetricsServer, vllm_page
from prometheus_client import CollectorRegistry

from gridroute.operator.config import ProviderConfig
from gridroute.operator.metrics import OperatorMetrics
from gridroute.operator.scrape import ProviderScraper


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
