"""The operator's own Prometheus metrics, created once per registry.

Every label value is bounded: a configured provider or peer name, or a small enum.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from gridroute.relay.poller import PollMetrics


class OperatorMetrics:
    """Scrape, relay and poll metrics of one operator (one registry per operator)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.poll = PollMetrics(registry)
        self.scrapes = Counter(
            "grid_provider_scrape_total", "Provider metric scrapes by result.",
            ["provider", "result"], registry=registry,
        )  # fmt: skip
        self.metrics_available = Gauge(
            "grid_provider_metrics_available", "1 while the MetricsAvailable condition is True.",
            ["provider"], registry=registry,
        )  # fmt: skip
        self.in_flight = Gauge(
            "grid_provider_in_flight_requests", "(running + waiting) x ready + held, last scrape.",
            ["provider"], registry=registry,
        )  # fmt: skip
        self.ready = Gauge(
            "grid_provider_ready_endpoints", "Ready endpoints, last scrape.",
            ["provider"], registry=registry,
        )  # fmt: skip
        self.capacity = Gauge(
            "grid_provider_capacity_requests", "maxRunning x ready endpoints, last scrape.",
            ["provider"], registry=registry,
        )  # fmt: skip
        self.truncated = Counter(
            "grid_signals_relay_truncated_total", "Rows left out of a /signals body to fit.",
            ["store", "cut"], registry=registry,
        )  # fmt: skip
