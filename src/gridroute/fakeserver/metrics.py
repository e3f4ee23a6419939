"""The fake server's `/metrics`: exactly the vLLM series a site operator scrapes.

Names, types and labels follow vLLM's exposition (see shared/fixtures/vllm):
`vllm:num_requests_running` / `vllm:num_requests_waiting` gauges, the KV-cache usage
gauge under both its current name (`vllm:kv_cache_usage_perc`) and the legacy one
(`vllm:gpu_cache_usage_perc`, still read by older scrapers), `vllm:request_success_total`
by `finished_reason`, token counters and the TTFT / end-to-end latency histograms, all
labelled `engine="0"` and `model_name`.

Values are read from the engines at scrape time by a custom collector registered in a
per-app `CollectorRegistry`: the request path only bumps plain ints (no metric locks),
and several servers can live in one process without their series colliding.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gridroute.fakeserver.served_model import FakeEngine

TTFT_BOUNDS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
"""vLLM's `time_to_first_token_seconds` bucket bounds."""

E2E_BOUNDS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
"""vLLM's `e2e_request_latency_seconds` bucket bounds."""

FINISHED_REASONS = ("stop", "length", "abort")
"""`finished_reason` label values of `vllm:request_success_total`; abort = client left."""

ENGINE = "0"
LABELS = ["engine", "model_name"]


class Buckets:
    """A lock-free histogram accumulator (one event loop writes it, scrapes read it)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs ending with +Inf, as the exposition wants."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            total += count
            out.append((bound, float(total)))
        return out


class VllmCollector(Collector):
    """Reads every engine's live state into vLLM-named metric families at scrape time."""

    def __init__(
        self, engines: Callable[[], Iterable[FakeEngine]], kv_at_full: float = 0.7
    ) -> None:
        self._engines = engines
        self._kv_at_full = kv_at_full

    def collect(self) -> Iterator[Metric]:
        engines = list(self._engines())
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.",
            labels=LABELS,
        )  # fmt: skip
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
            labels=LABELS,
        )  # fmt: skip
        kv = GaugeMetricFamily(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
            labels=LABELS,
        )  # fmt: skip
        gpu = GaugeMetricFamily(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use "
            "vllm:kv_cache_usage_perc instead.",
            labels=LABELS,
        )
        success = CounterMetricFamily(
            "vllm:request_success", "Count of successfully processed requests.",
            labels=["engine", "finished_reason", "model_name"],
        )  # fmt: skip
        prompt = CounterMetricFamily(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels=LABELS
        )
        generation = CounterMetricFamily(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels=LABELS
        )
        ttft = HistogramMetricFamily(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            labels=LABELS,
        )  # fmt: skip
        e2e = HistogramMetricFamily(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels=LABELS,
        )
        for eng in engines:
            lv = [ENGINE, eng.model]
            pool = eng.pool
            running.add_metric(lv, float(pool.running))
            waiting.add_metric(lv, float(pool.waiting))
            full = self._kv_at_full
            usage = min(full * pool.running / pool.slots, 1.0) if pool.slots else 0.0
            kv.add_metric(lv, usage)
            gpu.add_metric(lv, usage)
            for reason in FINISHED_REASONS:
                success.add_metric([ENGINE, reason, eng.model], float(eng.finished[reason]))
            prompt.add_metric(lv, float(eng.prompt_tokens))
            generation.add_metric(lv, float(eng.generation_tokens))
            ttft.add_metric(lv, eng.ttft.cumulative(), eng.ttft.sum)
            e2e.add_metric(lv, eng.e2e.cumulative(), eng.e2e.sum)
        yield from (running, waiting, kv, gpu, success, prompt, generation, ttft, e2e)


def make_registry(
    engines: Callable[[], Iterable[FakeEngine]], kv_at_full: float = 0.7
) -> CollectorRegistry:
    """A registry of its own per app, so servers sharing a process stay separate."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmCollector(engines, kv_at_full))
    return registry
