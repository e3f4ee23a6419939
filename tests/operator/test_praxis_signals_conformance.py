"""praxis-proxy/grid's llm-d series-mapping tests, replayed against the operator's scrape.

Upstream (`gateway/ai-grid-filters/src/signals/llm_d.rs` tests, and the legacy-name test
of `snapshot.rs`) reads the EPP's raw series from the gateway's store; in gridroute the
operator scrapes the EPP page into one `Sample` per instant (`ProviderScraper` over
`wire/prometheus.parse_exposition`) and the core concludes in-flight from it. Each test
serves an EPP page, scrapes it with the real scraper, and checks what the core reads.
"""

from __future__ import annotations

import asyncio

import aiohttp
from operator_fixtures import MetricsServer
from prometheus_client import CollectorRegistry

from gridroute.core import AvailabilitySettings, Candidate, GridState, Sample
from gridroute.core.window import SampleWindow
from gridroute.operator.config import ProviderConfig
from gridroute.operator.metrics import OperatorMetrics
from gridroute.operator.scrape import ProviderScraper

LABELS = '{pool="p"}'


def page(**series: float) -> str:
    """An EPP /metrics page with one line per series."""
    return "".join(f"{name}{LABELS} {value}\n" for name, value in series.items())


def provider(port: int) -> ProviderConfig:
    return ProviderConfig.model_validate(
        {
            "name": "pool-a",
            "models": ["m"],
            "backendUrl": "http://127.0.0.1:1",
            "metricsConfig": {"endpoint": f"http://127.0.0.1:{port}/metrics", "format": "epp"},
        }
    )


def scrape_pages(pages: list[str], start: float = 1.0) -> list[Sample | None]:
    """Each page scraped in turn, one second apart, by one scraper."""
    clock = [start]
    results: list[Sample | None] = []

    async def main() -> None:
        async with MetricsServer(pages[0]) as server, aiohttp.ClientSession() as http:
            scraper = ProviderScraper(
                "a",
                provider(server.port),
                metrics=OperatorMetrics(CollectorRegistry()),
                clock=lambda: clock[0],
            )
            for text in pages:
                server.text = text
                results.append(await scraper.scrape(http, 2.0))
                clock[0] += 1.0

    asyncio.run(main())
    return results


def test_a_mapping_reads_the_llm_d_series_into_in_flight() -> None:
    """signals/llm_d.rs::a_mapping_reads_the_same_store_under_other_names: (10 running +
    0.5 waiting) per unit, 2 units, plus 3 held by flow control: 24 in flight; the queue
    (0.5), held (3) and deepest per-unit queue (2) are read too."""
    (sample,) = scrape_pages(
        [
            page(
                llm_d_epp_average_running_requests=10,
                llm_d_epp_average_queue_size=0.5,
                llm_d_epp_ready_endpoints=2,
                llm_d_epp_flow_control_queue_size=3,
                llm_d_epp_per_endpoint_queue_size=2,
            )
        ]
    )
    assert sample is not None
    assert sample.in_flight == 24.0
    assert (sample.waiting, sample.held, sample.deepest_queue, sample.ready) == (0.5, 3.0, 2.0, 2.0)


def test_other_names_are_no_llm_d_load() -> None:
    """signals/llm_d.rs::a_mapping_reads_the_same_store_under_other_names (second half):
    a page of another vendor's names carries no llm-d load (gridroute: a failed scrape,
    the provider publishes no load from it)."""
    (sample,) = scrape_pages(
        [page(vendor_running=10, vendor_queue=0.5, vendor_units=2, vendor_held=3)]
    )
    assert sample is None or sample.in_flight is None


def test_zero_ready_units_reads_as_unready_and_unmeasured() -> None:
    """signals/llm_d.rs::zero_ready_units_reads_as_unready_and_unmeasured: 10 running per
    unit on 0 ready units: unready, nothing in flight."""
    (sample,) = scrape_pages(
        [page(llm_d_epp_average_running_requests=10, llm_d_epp_ready_endpoints=0)]
    )
    assert sample is not None
    assert sample.in_flight == 0.0, "no unit, nothing in flight"
    window = SampleWindow(sample.key)
    window.add(sample)
    reading = window.reading(1.0)
    assert reading is not None and reading.unready


def test_in_flight_is_concluded_from_readings_taken_together() -> None:
    """signals/llm_d.rs::in_flight_is_concluded_from_readings_taken_together: scrapes of
    2 units at 10, 1 unit at 20, then 0 units beside 4 running: 20 in flight over the
    window (not 40, not 0), and unready (the latest count is zero)."""
    samples = scrape_pages(
        [
            page(llm_d_epp_average_running_requests=r, llm_d_epp_ready_endpoints=u)
            for r, u in ((10, 2), (20, 1), (4, 0))
        ]
    )
    window = SampleWindow("a/pool-a")
    for sample in samples:
        assert sample is not None
        window.add(sample)
    reading = window.reading(1.0)
    assert reading is not None
    assert reading.in_flight == 20.0
    assert reading.unready


def test_an_implausible_count_reads_as_absent() -> None:
    """signals/llm_d.rs::an_implausible_count_reads_as_absent: 1e300 running on 1 ready
    unit reads as no in-flight at all."""
    (sample,) = scrape_pages(
        [page(llm_d_epp_average_running_requests=1e300, llm_d_epp_ready_endpoints=1)]
    )
    assert sample is None or sample.in_flight is None


def test_a_site_reporting_the_legacy_load_name_is_still_measured() -> None:
    """snapshot.rs::a_site_reporting_the_legacy_load_name_is_still_ordered: a page with the
    legacy `inference_pool_average_queue_size` (90) measures load like the current name:
    the queue is read and the site is not unmeasured."""
    (legacy,) = scrape_pages([page(inference_pool_average_queue_size=90)])
    (current,) = scrape_pages([page(llm_d_epp_average_queue_size=10)])
    assert legacy is not None and legacy.waiting == 90.0
    assert current is not None and current.waiting == 10.0
    cands = [Candidate("a", "pool-a", frozenset({"m"}), local=True)]
    state = GridState(cands, AvailabilitySettings(), models=["m"])
    snap = state.refresh([legacy], {"a": legacy.at}, legacy.at)
    plan = snap.plan("m")
    assert plan is not None and [v.key for v in plan.healthy] == ["a/pool-a"]
    assert plan.unmeasured == ()


def test_legacy_per_pod_queue_and_flow_control_names_are_read() -> None:
    """snapshot.rs::one_queued_pod_stops_teaching_without_counting_as_full and
    work_held_in_flow_control_counts_as_queued publish `inference_pool_per_pod_queue_size`
    and `llm_d_epp_flow_control_queue_size`: both reach the sample (deepest queue, held)."""
    (sample,) = scrape_pages(
        [
            page(
                llm_d_epp_average_running_requests=100,
                llm_d_epp_average_queue_size=0.25,
                llm_d_epp_ready_endpoints=1,
                inference_pool_per_pod_queue_size=1,
                llm_d_epp_flow_control_queue_size=60,
            )
        ]
    )
    assert sample is not None
    assert sample.deepest_queue == 1.0 and sample.held == 60.0
    assert not sample.queue_free()
